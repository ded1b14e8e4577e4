"""float8 training: torchao's `convert_to_float8_training` swaps the job's Linear
modules (`Job.float8.converts`, the planner's filter) for Float8Linear, before
checkpointing, compile and FSDP (torchtitan's order). The weights stay high-precision
parameters, so checkpoints, resume and the export are those of a bf16 run."""

from __future__ import annotations

from torch import nn

from fsdpspec.job.float8 import fits_scaled_mm
from fsdpspec.job.job import Job
from fsdpspec_runners.engine.errors import EngineError


def convert_float8(model: nn.Module, job: Job) -> None:
    """Convert ``model``'s Linear modules in place as `float8` says (on the meta device
    too). A converted module `_scaled_mm` cannot take is an
    EngineError (FS321 says so at validate for a model with a geometry)."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    float8 = job.float8
    assert float8 is not None

    def keep(module: nn.Module, path: str) -> bool:
        shape = tuple(module.weight.shape)
        if not float8.converts(path, shape):
            return False
        if not fits_scaled_mm(shape):
            raise EngineError(f"float8: {path} has weight {list(shape)}, not multiples of 16 "
                              "(torch._scaled_mm): add it to float8.exclude")
        return True

    if float8.recipe == "tensorwise":
        config = Float8LinearConfig(enable_fsdp_float8_all_gather=float8.all_gather)
    else:
        config = Float8LinearConfig.from_recipe_name(float8.recipe)
    convert_to_float8_training(model, config=config, module_filter_fn=keep)


def float8_summary(model: nn.Module, job: Job) -> str:
    """What the startup line says of float8: the recipe, the modules converted and how
    their weights are gathered (empty without float8)."""
    if job.float8 is None:
        return ""
    count = sum(type(m).__name__ == "Float8Linear" for m in model.modules())
    gather = "float8" if job.float8.all_gather else job.spec.fsdp.mixed_precision.param_dtype
    return f", float8 {job.float8.recipe}: {count} Linear modules (all-gathered in {gather})"
