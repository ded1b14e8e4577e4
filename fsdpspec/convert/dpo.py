"""TRL's `DPOTrainer` as the spec says it, for each importer of a DPO job: axolotl's
`rl: dpo` (axolotl_dpo) and TRL's DPO script (trl_dpo) both hand their settings to
TRL's `DPOConfig`, so its loss names, its default beta and the reference it trains
against are read here once.
"""

from __future__ import annotations

from fsdpspec.convert.draft import Draft, Entry, Note, origin
from fsdpspec.convert.fsdpkeys import NotCarried, boolean

# The DPOConfig losses the spec has (train.dpo.loss).
LOSSES = frozenset({"sigmoid", "ipo"})
DEFAULT_BETA = 0.1  # DPOConfig's
# What an imported preference dataset's records are taken to hold (the engine reads them
# as TRL does: runners/engine/preference_data.py).
RECORDS_ASSUMED = ("a prompt, a chosen and a rejected completion (text, or lists of {role, "
                   "content} messages), or no prompt, as TRL reads them: then the common "
                   "start of chosen and rejected is the prompt")


def carry_beta(entry: Entry | None, draft: Draft) -> None:
    if entry is not None:
        draft.carry("train.dpo.beta", entry.value, entry)
    else:
        draft.put("train.dpo.beta", DEFAULT_BETA, "not in the source: TRL's default beta")


def carry_loss(entry: Entry | None, draft: Draft) -> None:
    """One loss the spec has (a list of one, as DPOConfig's loss_type is); more than one
    (DPOConfig weighs and sums them) or another is refused."""
    if entry is None or entry.value is None:
        return
    losses = entry.value if isinstance(entry.value, list) else [entry.value]
    if len(losses) == 1 and isinstance(losses[0], str) and losses[0] in LOSSES:
        draft.carry("train.dpo.loss", losses[0], entry)
    else:
        draft.refuse(entry.at, f"{entry.written} {entry.value} (the spec's DPO losses are "
                     "sigmoid and ipo, one at a time)")


def carry_reference(draft: Draft, *, objective: Entry, precompute: Entry | None,
                    adapter: Entry | None) -> None:
    """TRL's reference: the log-probs precomputed when asked, else an adapter run's base
    with the adapters off, else a frozen copy of the model. ``objective`` says DPO."""
    try:
        precomputed = precompute is not None and precompute.value is not None and \
            boolean(precompute.value)
    except NotCarried as exc:
        draft.refusals.append(Note(precompute.at, f"FS052 {precompute.written}: {exc}"))
        return
    if precomputed:
        draft.carry("train.dpo.reference", "precomputed", precompute)
    elif adapter is not None:
        draft.carry("train.dpo.reference", "adapter", adapter,
                    ": TRL's reference for an adapter run, its base with the adapters off")
    else:
        draft.put("train.dpo.reference", "model", f"{origin(objective)} without an adapter: "
                  "TRL's reference, a frozen copy of the model", objective)
