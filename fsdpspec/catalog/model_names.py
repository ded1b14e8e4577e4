"""Which family a model's name says, where no config of it is at hand: a Hub id
(``Qwen/Qwen3-235B-A22B``), torchtitan's ``[model] name`` and flavor, or a decoder layer
class (``Llama4TextDecoderLayer``). An importer that cannot read the model's config uses
it to keep a stand-in in the model's own family, or to stop naming the model, never to
swap a Mixture of Experts (or any model) for one of another family unsaid.

Each entry names the transformers ``model_type`` the name means. Whether it is a Mixture
of Experts is the family registry's fact for a registered family; for the others it is
this table's, read off each transformers 5.25 config class (its expert count:
tests/catalog/test_model_names.py checks it)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from fsdpspec.catalog.families import family


@dataclass(frozen=True)
class NamedFamily:
    """A family as its names spell it: ``pattern`` is searched, case-insensitively, in
    the name with separators kept (a Hub id) and in a class name's lowercase."""

    model_type: str
    title: str
    pattern: str
    # A Mixture of Experts, for a family the registry lacks (the registry says it for its own).
    unregistered_moe: bool = False
    # Why transformers' model of a Mixture of Experts trains with no load balancing (read
    # off its modeling code: no auxiliary loss), or "" where it has one or is dense.
    unbalanced: str = ""

    @property
    def moe(self) -> bool:
        registered = family(self.model_type)
        return registered.moe is not None if registered else self.unregistered_moe

    @property
    def kind(self) -> str:
        return "a Mixture of Experts" if self.moe else "dense"

    @property
    def what(self) -> str:
        """``a Llama 4 model (a Mixture of Experts, transformers' llama4_text)``."""
        return f"a {self.title} model ({self.kind}, transformers' {self.model_type})"


# DeepSeek's auxiliary-loss-free balancing: a per-expert routing bias nudged after each
# step by the experts' load, outside the gradient.
_BIAS_NOT_UPDATED = ("transformers has no auxiliary loss for it, and its routing bias "
                     "(e_score_correction_bias, the balancing DeepSeek trains with) is a buffer "
                     "nothing updates")

# The most specific names first: Llama 4 before Llama, Qwen3.5-MoE before Qwen3-MoE before
# Qwen3, Mistral Small 4 before Mistral.
NAMES: tuple[NamedFamily, ...] = (
    NamedFamily("deepseek_v3", "DeepSeek-V3", r"deepseek[-_ ]?v3", unregistered_moe=True,
                unbalanced=_BIAS_NOT_UPDATED),
    NamedFamily("llama4_text", "Llama 4", r"llama[-_ ]?4(?!\d)", unregistered_moe=True,
                unbalanced="transformers computes no load-balancing loss for it (its "
                "config's router_aux_loss_coef is read by nothing)"),
    NamedFamily("glm_moe_dsa", "GLM-5", r"glm[-_ ]?5(?![-_ ]?next)|glm_?moe_?dsa",
                unregistered_moe=True),
    NamedFamily("glm4_moe_lite", "GLM-4.7-Flash", r"glm[-_ ]?4[._]?7[-_ ]?flash|glm4_?moe_?lite",
                unregistered_moe=True),
    NamedFamily("glm4_moe", "GLM-4.5", r"glm[-_ ]?4[._]?[56]|glm4_?moe", unregistered_moe=True,
                unbalanced=_BIAS_NOT_UPDATED),
    NamedFamily("mistral4", "Mistral Small 4", r"mistral[-_ ]?small[-_ ]?4|mistral4",
                unregistered_moe=True),
    NamedFamily("qwen3_5_moe", "Qwen3.5-MoE", r"qwen3[._]5[-_].*a\d+b|qwen3_?5_?moe",
                unregistered_moe=True),
    NamedFamily("qwen3_next", "Qwen3-Next", r"qwen3[-_]?next", unregistered_moe=True),
    NamedFamily("qwen3_moe", "Qwen3-MoE", r"qwen3[-_].*a\d+b|qwen3_?moe"),
    NamedFamily("qwen2_moe", "Qwen2-MoE", r"qwen(1\.5|2)[-_].*a\d+(\.\d+)?b|qwen2_?moe",
                unregistered_moe=True),
    NamedFamily("mixtral", "Mixtral", r"mixtral"),
    NamedFamily("gpt_oss", "gpt-oss", r"gpt[-_ ]?oss"),
    NamedFamily("olmoe", "OLMoE", r"olmoe"),
    NamedFamily("phimoe", "Phi-3.5-MoE", r"phi[-_ ]?3\.5[-_ ]?moe|phimoe"),
    NamedFamily("qwen3", "Qwen3", r"qwen3"),
    NamedFamily("qwen2", "Qwen2", r"qwen2"),
    NamedFamily("gemma3_text", "Gemma 3", r"gemma[-_ ]?3"),
    NamedFamily("gemma2", "Gemma 2", r"gemma[-_ ]?2"),
    NamedFamily("gemma", "Gemma", r"gemma"),
    NamedFamily("olmo2", "OLMo 2", r"olmo[-_ ]?2"),
    NamedFamily("phi3", "Phi-3", r"phi[-_ ]?3"),
    NamedFamily("starcoder2", "StarCoder2", r"starcoder[-_ ]?2"),
    NamedFamily("gpt_neox", "GPT-NeoX", r"pythia|gpt[-_ ]?neox"),
    NamedFamily("mistral", "Mistral", r"mistral"),
    NamedFamily("llama", "Llama", r"llama"),
)


def named_family(name: str) -> NamedFamily | None:
    """The family ``name`` says (None when it says none)."""
    return next((n for n in NAMES if re.search(n.pattern, name, re.IGNORECASE)), None)


def of_model_type(model_type: str) -> NamedFamily | None:
    """The entry of a transformers ``model_type``."""
    return next((n for n in NAMES if n.model_type == model_type), None)
