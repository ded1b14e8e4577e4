"""axolotl's `rl: dpo` as `train.objective: dpo` (docs/dpo.md).

axolotl hands DPO to TRL's `DPOTrainer` (axolotl/core/builders/rl.py): its beta is
`trl.beta`, else `rl_beta`, else the deprecated `dpo_beta` (the rest of `trl` is GRPO's
and vLLM's: notes); `dpo_label_smoothing`, `dpo_loss_type` and `precompute_ref_log_probs`
are DPOConfig's. The reference is TRL's: an adapter run's base with the adapters off,
else a frozen copy of the model, unless the log-probs are precomputed. A DPO dataset of
type `chat_template.default` reads a prompt conversation and a chosen and a rejected
answer (axolotl/prompt_strategies/dpo/chat_template.py): the spec's chat preference
records. The other RL objectives, and the DPO settings the spec cannot say, are refused
by name.
"""

from __future__ import annotations

from typing import Any

from fsdpspec.convert import dpo
from fsdpspec.convert.axolotl_lora import truthy
from fsdpspec.convert.draft import Draft, Entry

# Beta's keys, the first given wins (axolotl's order, `trl.beta` aside).
_BETA = ("rl_beta", "dpo_beta")
# DPO settings that change the loss, refused when on: the feature each is.
_REFUSED = {
    "dpo_use_weighting": "WPO's weighting of the DPO loss",
    "rpo_alpha": "RPO's NLL term beside the DPO loss",
    "dpo_norm_loss": "a length-normalised DPO loss",
    "dpo_padding_free": "padding-free DPO batches",
}
KEYS = frozenset({"trl", *_BETA, "dpo_label_smoothing", "dpo_loss_type",
                  "precompute_ref_log_probs", *_REFUSED})
# The one DPO dataset type whose records are the spec's: messages with chosen and rejected.
CHAT_TYPE = "chat_template.default"


def is_dpo(entries: dict[str, Entry]) -> bool:
    rl = entries.get("rl")
    return rl is not None and rl.value == "dpo"


def apply_dpo(entries: dict[str, Entry], draft: Draft) -> None:
    """train.objective dpo and train.dpo from an `rl: dpo` config's keys."""
    rl = entries["rl"]
    draft.carry("train.objective", "dpo", rl)
    for key, feature in _REFUSED.items():
        if truthy(entries.get(key)):
            draft.refuse(entries[key].line, f"{key} {entries[key].value} ({feature})")
    beta = next((entries[k] for k in _BETA if truthy(entries.get(k))), None)
    trl = entries.get("trl")
    if trl is not None and trl.value is not None and not isinstance(trl.value, dict):
        draft.note(trl, "trl: not a mapping; not imported")
    elif trl is not None and trl.value is not None:
        for key, value in trl.value.items():
            if key == "beta" and value is not None:
                beta = Entry(value, trl.line, "trl.beta")
            elif value is not None:
                draft.note(trl, f"trl.{key}: no v1 field; not imported")
    dpo.carry_beta(beta, draft)
    smoothing = entries.get("dpo_label_smoothing")
    if smoothing is not None and smoothing.value is not None:
        draft.carry("train.dpo.label_smoothing", smoothing.value, smoothing)
    dpo.carry_loss(entries.get("dpo_loss_type"), draft)
    dpo.carry_reference(draft, objective=Entry(rl.value, rl.line, "rl dpo"),
                        precompute=entries.get("precompute_ref_log_probs"),
                        adapter=entries["adapter"] if truthy(entries.get("adapter")) else None)


def preference_fields(item: dict[str, Any], entry: Entry, draft: Draft) -> None:
    """A chat_template.default DPO dataset's fields as the preference format's; what its
    records may hold beyond the spec's is said."""
    fields = {"data.prompt_field": item.get("field_messages", "messages"),
              "data.chosen_field": item.get("field_chosen", "chosen"),
              "data.rejected_field": item.get("field_rejected", "rejected")}
    for dotted, name in fields.items():
        if isinstance(name, str):
            draft.carry(dotted, name, entry)
    draft.note(entry, "datasets[0]: imported as data.format preference, chat messages, "
               "assuming each record's chosen and rejected are lists of {role, content} "
               "messages (axolotl's chat_template.default also takes one message or a "
               "string, and keeps the last message of a list)")
    mappings = item.get("message_property_mappings")
    roles = item.get("roles")
    if (mappings not in (None, {"role": "role", "content": "content"})
            or (isinstance(roles, dict) and any(v != [k] for k, v in roles.items()))):
        draft.note(entry, "datasets[0]: message_property_mappings / roles other than "
                   "role, content and the roles' own names; not imported (the spec reads "
                   "{role, content} messages)")
