"""The final export: full weights gathered to rank 0 (on the CPU) and written as
safetensors in the spec's dtype, with ``config.json``, so that
``AutoModelForCausalLM.from_pretrained(run_dir/final)`` loads them."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from fsdpspec.atomicio import publish_dir
from fsdpspec.spec.v1 import JobSpec
from fsdpspec_runners.engine.adapter import fsdp_adapter
from fsdpspec_runners.engine.dist import Runtime
from fsdpspec_runners.engine.model import tied_weight_keys
from fsdpspec_runners.engine.wrap import DTYPES

FINAL_DIR = "final"
WEIGHTS_FILE = "model.safetensors"


def export_final(model: nn.Module, spec: JobSpec, run_dir: Path, runtime: Runtime) -> Path:
    """Gather, cast and write ``run_dir/final`` (a temp dir renamed into place)."""
    # Every rank takes part in the gather. From GPUs only rank 0 keeps the tensors, on
    # the CPU; on a CPU run they are host tensors already (and FSDP1's offload path
    # crashes there), so each rank keeps its copy.
    on_gpu = runtime.device.type == "cuda"
    full = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=on_gpu)
    )
    target = run_dir / FINAL_DIR
    if runtime.is_main:
        module = fsdp_adapter(spec.fsdp.version).unwrap(model)
        _write(module, full, DTYPES[spec.checkpoint.final.dtype], target)
    return target


def _write(
    module: nn.Module, full: dict[str, torch.Tensor], dtype: torch.dtype, target: Path
) -> None:
    from safetensors.torch import save_file

    tied = tied_weight_keys(module)
    tensors = {k: v.to(dtype).contiguous() for k, v in full.items() if k not in tied}
    tmp = target.with_name(f".tmp-{target.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
    config = getattr(module, "config", None)
    if config is not None:  # a factory model has no Hugging Face config to write
        config = config.__class__.from_dict(config.to_dict())
        config.dtype = dtype
        config.use_cache = True  # off only for training; generation wants it
        config.save_pretrained(tmp)
    publish_dir(tmp, target)
