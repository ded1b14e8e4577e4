"""The key facts of a spec that head both pages: model, world, strategy, precision,
batch."""

from __future__ import annotations

from fsdpspec.spec.v1 import JobSpec


def model_label(spec: JobSpec) -> str:
    model = spec.model
    return model.preset or model.hf_config or model.factory or "model"


def parameter_count(count: int) -> str:
    """A parameter count the way papers write it: 8.03 B, 124 M, 115 k."""
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return str(count)


def spec_facts(spec: JobSpec) -> list[tuple[str, str]]:
    """(label, value) pairs, in reading order."""
    precision = spec.fsdp.mixed_precision
    data = spec.data
    return [
        ("model", model_label(spec)),
        ("world", f"{spec.resources.nodes} node(s) × {spec.resources.gpus_per_node} "
                  f"{spec.device().name} = {spec.world_size} ranks"),
        ("strategy", f"FSDP{spec.fsdp.version} {spec.fsdp.sharding_strategy}, "
                     f"activation checkpointing {spec.fsdp.activation_checkpointing}"),
        ("precision", f"params {precision.param_dtype}, reduce {precision.reduce_dtype}"),
        ("batch", f"global {data.global_batch_size} × {data.seq_len} tokens, "
                  f"micro {data.micro_batch_size} per rank"),
    ]
