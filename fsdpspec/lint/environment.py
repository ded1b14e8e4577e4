"""FS410, FS411: what the machine and the model's transformers class must provide for
the settings — an attention kernel the family supports, the packages the options need.

Both were found only when `fsdpspec run` started (or the model was built on every rank);
`validate` reads them from the family registry and from the installed packages, without
importing any of them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

from fsdpspec.catalog.families import family
from fsdpspec.lint.registry import LintContext, diagnostic, rule
from fsdpspec.spec.diagnostics import Diagnostic, Severity
from fsdpspec.spec.v1 import JobSpec


def needed_packages(spec: JobSpec) -> list[tuple[str, str]]:
    """(pointer, module) for each optional package the job's settings need."""
    needed = []
    if spec.logging.tensorboard:
        needed.append(("/logging/tensorboard", "tensorboard"))
    if spec.logging.wandb is not None:
        needed.append(("/logging/wandb", "wandb"))
    if spec.logging.mlflow is not None:
        needed.append(("/logging/mlflow", "mlflow"))
    if spec.model.attention == "flash_attention_2":
        needed.append(("/model/attention", "flash_attn"))
    if spec.data.source == "dataset":
        needed.append(("/data/source", "datasets"))
    return needed


def missing_packages(spec: JobSpec) -> list[tuple[str, str]]:
    """The needed packages that are not installed: found without importing them, so the
    check stays cheap (and torch-free)."""
    return [(pointer, package) for pointer, package in needed_packages(spec)
            if importlib.util.find_spec(package) is None]


@rule("FS410", "attention-unsupported", Severity.ERROR,
      "model.attention sdpa on a family transformers builds without SDPA",
      "set model.attention: auto or eager (or flash_attention_2 on a GPU)")
def attention_unsupported(ctx: LintContext) -> Iterator[Diagnostic]:
    """transformers builds some families (gpt-oss, Gemma 2) without SDPA attention (the
    family registry's `eager_only`): with `sdpa` written, the model fails to build on
    every rank after the job has started. The default, `auto`, builds them with eager
    attention, as transformers picks.

    FAIL:

        model: {preset: tiny-gpt-oss, attention: sdpa}

    PASS:

        model: {preset: tiny-gpt-oss}
    """
    config = ctx.model_config or {}
    found = family(config.get("model_type"))
    attention = ctx.spec.model.attention
    if found is not None and found.eager_only and attention == "sdpa":
        yield diagnostic("FS410", f"transformers builds {found.model_type} without SDPA "
                         "attention",
                         ctx.first_set("/model/attention", "/model"))


@rule("FS411", "package-missing", Severity.ERROR,
      "a setting needs a package that is not installed here",
      "install the package, or for a spec written for another machine ignore FS411 "
      "(`fsdpspec run` checks it again)")
def package_missing(ctx: LintContext) -> Iterator[Diagnostic]:
    """`logging.tensorboard` needs tensorboard, `attention: flash_attention_2` needs
    flash_attn, `logging.wandb` wandb, `logging.mlflow` mlflow and `data.source:
    dataset` the datasets package. Without it the run is refused at its start; a spec
    validated on a machine without the package says so here. A spec written for a
    cluster that has them can say `lint: {ignore: [FS411]}`.

    FAIL:

        model: {preset: tiny-llama, attention: flash_attention_2}

    PASS:

        model: {preset: tiny-llama, attention: sdpa}
    """
    for pointer, package in missing_packages(ctx.spec):
        field = pointer.strip("/").replace("/", ".")
        yield diagnostic("FS411", f"{field} needs the {package} package, which is not "
                         f"installed (pip install {package})", pointer)
