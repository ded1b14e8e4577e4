"""A LoRA run's outputs: ``adapter/`` in peft's format, and on request the merged model
(export.py writes them from a checkpoint).

``adapter/`` holds ``adapter_config.json`` and ``adapter_model.safetensors`` (fp32, peft's
names), which ``PeftModel.from_pretrained(base, "adapter")`` loads onto the base model.
With ``peft.merged`` the directory itself becomes a Hugging Face model, base plus
adapter merged by peft, in ``checkpoint.final.dtype``: the base is built whole in host
memory (fp32) for the merge, unlike the unit-by-unit export of a full fine-tune.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from fsdpspec.job.job import Job
from fsdpspec.job.rundir import ADAPTER
from fsdpspec_runners.engine.errors import EngineError
from fsdpspec_runners.engine.lora import (
    base_key,
    is_adapter_key,
    lora_config,
    peft_file_key,
)
from fsdpspec_runners.engine.model_build import build_model, read_weights

ADAPTER_DIR = ADAPTER


def write_adapter(trainable: dict[str, torch.Tensor], job: Job, directory: Path) -> None:
    """adapter_config.json and adapter_model.safetensors, as peft's save_pretrained
    writes them."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True)
    config = lora_config(job)
    config.base_model_name_or_path = job.spec.model.weights or job.spec.model.hf_config
    config.save_pretrained(str(directory))
    tensors = {peft_file_key(k): v.float().contiguous() for k, v in trainable.items()}
    save_file(tensors, str(directory / "adapter_model.safetensors"), metadata={"format": "pt"})
    for file in directory.iterdir():
        file.chmod(0o644)


def merged_model(trainable: dict[str, torch.Tensor], job: Job) -> nn.Module:
    """The base model (its weights, or the run's seeded initialisation) with the trained
    adapters merged in by peft, under the base model's names: one fp32 copy of the model
    in host memory (the adapters are injected into it, then merged into its weights).
    Built with eager attention: converting needs no attention kernel installed."""
    from peft import inject_adapter_in_model
    from peft.tuners.lora import LoraLayer

    spec = job.spec
    base = job.with_spec(spec.model_copy(update={"peft": None}))
    model = build_model(base, on_meta=False, attention="eager")
    if spec.model.weights:
        model.load_state_dict(read_weights(spec.model.weights), strict=False)
    inject_adapter_in_model(lora_config(job), model)
    result = model.load_state_dict(trainable, strict=False)
    lacking = [k for k in result.missing_keys if is_adapter_key(k) or ".modules_to_save." in k]
    if lacking or result.unexpected_keys:
        raise EngineError("the checkpoint's adapter tensors do not match the model: "
                          f"{(lacking or result.unexpected_keys)[:3]}")
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, LoraLayer):
                module.merge()
    merged = {base_key(k): v for k, v in model.state_dict().items()
              if not is_adapter_key(k) and ".original_module." not in k}
    layout = build_model(base, on_meta=True, attention="eager")
    layout.load_state_dict(merged, strict=True, assign=True)
    return layout
