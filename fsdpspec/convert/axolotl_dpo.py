"""axolotl's `rl: dpo` as `train.objective: dpo` (docs/dpo.md).

axolotl hands DPO to TRL's `DPOTrainer` (axolotl/core/builders/rl.py): its beta is
`trl.beta`, else `rl_beta`, else the deprecated `dpo_beta` (the rest of `trl` is GRPO's
and vLLM's: notes); `dpo_label_smoothing`, `dpo_loss_type` and `precompute_ref_log_probs`
are DPOConfig's. The reference is TRL's: an adapter run's base with the adapters off,
else a frozen copy of the model, unless the log-probs are precomputed.

A DPO dataset's `type` names the transform axolotl maps its records through before TRL
reads them (axolotl/prompt_strategies/dpo/; a name without a function gets `.default`).
Three hand TRL the spec's preference records: `chat_template` reads a prompt
conversation and a chosen and a rejected answer (chat_template.py); `passthrough`, or no
type, passes the records on as they are; a `type:` mapping (user_defined.py) copies its
`field_prompt`, `field_chosen` and `field_rejected` into a string each through its
formats, which without a template around the field are the fields themselves. The
others (chatml.*, llama3.*, mistral.*, zephyr.*) put a fixed prompt template around the
fields, which the preference format does not apply, and are refused by name, as are the
other RL objectives and the DPO settings the spec cannot say.
"""

from __future__ import annotations

from typing import Any

from fsdpspec.convert import dpo
from fsdpspec.convert.axolotl_lora import truthy
from fsdpspec.convert.draft import Draft, Entry, Note

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
_CHAT, _PASSTHROUGH = "chat_template.default", "passthrough.default"
# A user-defined type's formats that leave its field as it is.
_IDENTITY = {"prompt_format": "{prompt}", "chosen_format": "{chosen}",
             "rejected_format": "{rejected}"}


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


def _strategy(kind: str) -> str:
    """The transform a type names, as axolotl resolves it (`chat_template` is
    chat_template.default)."""
    return kind if "." in kind else f"{kind}.default"


def refused_type(kind: Any, line: int | None, draft: Draft) -> bool:
    """Refuse a first DPO dataset of type ``kind`` whose records are not the spec's
    preference records (at ``line``, the datasets key's): whether it was."""
    if isinstance(kind, dict):
        templated = next((k for k, same in _IDENTITY.items()
                          if kind.get(k) not in (None, "", same)), None)
        if templated is not None:
            draft.refuse(line, f"datasets[0] type {{{templated}: {kind[templated]!r}}} (a "
                         "template around the record's field, which the preference format "
                         "does not apply)")
        return templated is not None
    if not kind or isinstance(kind, str) and _strategy(kind) in (_CHAT, _PASSTHROUGH):
        return False
    if kind == "user_defined.default":
        draft.refusals.append(Note(line, "FS052 datasets[0] type user_defined.default: "
                                   "axolotl reads a user-defined type's fields from a `type:` "
                                   "mapping and stops on the name alone"))
    else:
        draft.refuse(line, f"datasets[0] type {kind} (a DPO dataset type that rewrites the "
                     "records: axolotl's chatml.*, llama3.*, mistral.* and zephyr.* put a "
                     "fixed prompt template around the fields, which the preference format "
                     "does not apply; the spec reads chat_template, passthrough and a "
                     "`type:` mapping without templates)")
    return True


def preference_fields(item: dict[str, Any], entry: Entry, draft: Draft) -> None:
    """A first DPO dataset's fields as the preference format's (its type is one
    `refused_type` accepts); what its records may hold beyond the spec's is said."""
    kind = item.get("type")
    if isinstance(kind, dict):
        _user_defined(kind, entry, draft)
    elif kind and _strategy(kind) == _CHAT:
        _chat_fields(item, entry, draft)
    else:
        draft.note(entry, f"datasets[0]: type {kind or 'none'} hands TRL the records as "
                   f"they are: imported as data.format preference, assuming each holds "
                   f"{dpo.RECORDS_ASSUMED}")


def _user_defined(kind: dict[str, Any], entry: Entry, draft: Draft) -> None:
    fields = {"data.prompt_field": kind.get("field_prompt", "prompt"),
              "data.chosen_field": kind.get("field_chosen", "chosen"),
              "data.rejected_field": kind.get("field_rejected", "rejected")}
    for dotted, name in fields.items():
        if isinstance(name, str):
            draft.carry(dotted, name, entry, ": the user-defined type's field")
    draft.note(entry, "datasets[0]: a user-defined type without templates: imported as "
               "data.format preference, assuming its fields hold text (axolotl formats "
               "each into a string)")


def _chat_fields(item: dict[str, Any], entry: Entry, draft: Draft) -> None:
    """chat_template's messages fields; what its records may hold beyond the spec's is
    said."""
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
