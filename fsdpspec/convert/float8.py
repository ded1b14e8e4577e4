"""float8 training as the importers write it: the `float8` section (recipe, the layers
left in high precision, FSDP2's float8 all-gather), each value naming the source key
and line it came from. accelerate (its torchao backend), axolotl (through accelerate)
and torchtitan all run torchao's `convert_to_float8_training`; they differ in which
keys say it, their defaults, and the names they give the layers they leave out.
"""

from __future__ import annotations

from dataclasses import dataclass

from fsdpspec.convert.draft import Draft, Entry, origin

RECIPES = ("tensorwise", "rowwise")
# torchtitan's filter_fqns word for torchao's small-layer filter (float8.skip_small).
SMALL_LAYERS = "auto_filter_small_kn"

# torchtitan's module names (its own Llama/Qwen/DeepSeek code) → the end of the Hugging
# Face module path the engine trains, which `float8.exclude` matches.
TORCHTITAN_NAMES = {
    "output": "lm_head",
    "attention.wq": "q_proj", "attention.wk": "k_proj", "attention.wv": "v_proj",
    "attention.wo": "o_proj",
    "feed_forward.w1": "gate_proj", "feed_forward.w2": "down_proj",
    "feed_forward.w3": "up_proj",
    "router.gate": "mlp.gate",
}

# What accelerate's torchao backend (and axolotl, which hands fp8 to it) leaves in high
# precision, besides layers whose sizes _scaled_mm cannot take.
FIRST_AND_LAST = ("accelerate's torchao filter keeps the model's first and last nn.Linear "
                  "in high precision")


@dataclass(frozen=True)
class Value:
    """One float8 field's value, the source entry it came from (None for the tool's
    default) and what the comment adds (for a default: which one)."""

    value: object
    entry: Entry | None = None
    says: str = ""

    def comment(self) -> str:
        if self.entry is None:
            return self.says
        return origin(self.entry) + (f": {self.says}" if self.says else "")


# What accelerate's filter leaves out that a path can name (the first layer's name is the
# model's, which the spec does not know: `keeps_first_linear` says so).
ACCELERATE_EXCLUDE = Value(["lm_head"], says=f"the model's last linear layer: {FIRST_AND_LAST}")


def apply_float8(draft: Draft, *, enabled: Entry, recipe: Value, exclude: Value,
                 all_gather: Value, skip_small: Value | None = None) -> None:
    """The float8 section of ``draft``, turned on by ``enabled``, each field from its
    Value (a default's refusal points at ``enabled``)."""
    fields = {"recipe": recipe, "exclude": exclude, "fsdp_all_gather": all_gather,
              "skip_small": skip_small}
    for name, value in fields.items():
        if value is not None:
            draft.put(f"float8.{name}", value.value, value.comment(), value.entry or enabled)


def keeps_first_linear(draft: Draft, enabled: Entry) -> None:
    """The note accelerate's torchao filter needs: the spec names layers by path and
    does not know which is the model's first."""
    draft.note(enabled, f"{enabled.written}: {FIRST_AND_LAST}; the import leaves lm_head "
               "out and converts the first (add its name to float8.exclude to match)")
