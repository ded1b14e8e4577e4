"""accelerate's FSDP vocabulary and where each word lives in a fsdpspec v1 spec.

One table serves the "did you mean" hints of `validate` and the accelerate import and
export (fsdpspec/convert/accelerate.py), so the two never disagree.
"""

from __future__ import annotations

# accelerate config key → dotted path of the v1 field that says the same thing.
KEY_TO_FIELD: dict[str, str] = {
    "fsdp_version": "fsdp.version",
    "fsdp_sharding_strategy": "fsdp.sharding_strategy",
    "fsdp_reshard_after_forward": "fsdp.sharding_strategy",
    "fsdp_auto_wrap_policy": "fsdp.auto_wrap_policy",
    "fsdp_transformer_layer_cls_to_wrap": "fsdp.transformer_layer_cls",
    "fsdp_min_num_params": "fsdp.min_num_params",
    "fsdp_backward_prefetch": "fsdp.backward_prefetch",
    "fsdp_backward_prefetch_policy": "fsdp.backward_prefetch",
    "fsdp_forward_prefetch": "fsdp.forward_prefetch",
    "fsdp_offload_params": "fsdp.cpu_offload",
    "fsdp_state_dict_type": "fsdp.state_dict_type",
    "fsdp_sync_module_states": "fsdp.sync_module_states",
    "fsdp_cpu_ram_efficient_loading": "fsdp.cpu_ram_efficient_loading",
    "fsdp_use_orig_params": "fsdp.use_orig_params",
    "fsdp_limit_all_gathers": "fsdp.limit_all_gathers",
    "fsdp_activation_checkpointing": "fsdp.activation_checkpointing",
    "mixed_precision": "fsdp.mixed_precision",
    "num_processes": "resources.gpus_per_node",
    "num_machines": "resources.nodes",
    "main_process_ip": "launch.rdzv_endpoint",
    "main_process_port": "launch.rdzv_endpoint",
}

# accelerate (and torch.distributed.fsdp.ShardingStrategy) numbers the strategies 1–5.
SHARDING_STRATEGY_BY_NUMBER: dict[int, str] = {
    1: "FULL_SHARD",
    2: "SHARD_GRAD_OP",
    3: "NO_SHARD",
    4: "HYBRID_SHARD",
    5: "HYBRID_SHARD_ZERO2",
}

AUTO_WRAP_POLICY: dict[str, str] = {
    "TRANSFORMER_BASED_WRAP": "transformer",
    "SIZE_BASED_WRAP": "size",
    "NO_WRAP": "none",
}

MIXED_PRECISION: dict[str, str] = {"bf16": "bf16", "fp16": "fp16", "no": "fp32"}

BACKWARD_PREFETCH: dict[str, str] = {
    "BACKWARD_PRE": "BACKWARD_PRE",
    "BACKWARD_POST": "BACKWARD_POST",
    "NO_PREFETCH": "NONE",
}


def value_alias(field: str, value: object) -> str | None:
    """The v1 spelling of a value written the accelerate way, for a field name."""
    tables: dict[str, dict] = {
        "sharding_strategy": {**SHARDING_STRATEGY_BY_NUMBER,
                              **{str(k): v for k, v in SHARDING_STRATEGY_BY_NUMBER.items()}},
        "auto_wrap_policy": AUTO_WRAP_POLICY,
        "mixed_precision": MIXED_PRECISION,
        "backward_prefetch": BACKWARD_PREFETCH,
    }
    table = tables.get(field, {})
    try:
        return table.get(value)
    except TypeError:  # unhashable (a list or mapping): no alias
        return None


# The import and export (runners/accelerate.py) read these too.

STATE_DICT_TYPE: dict[str, str] = {
    "FULL_STATE_DICT": "FULL_STATE_DICT",
    "SHARDED_STATE_DICT": "SHARDED_STATE_DICT",
}

# Keys accelerate accepts and then ignores: importing their value would change the job.
SILENT_NOOP_KEYS: dict[str, str] = {
    "fsdp_backward_prefetch_policy": (
        "legacy key that accelerate silently ignores (a no-op): prefetch followed "
        "fsdp_backward_prefetch, NO_PREFETCH when that is absent; not imported"),
}

# Real accelerate keys with no v1 field: reported with the reason, never "did you mean".
NOT_CARRIED: dict[str, str] = {
    "fsdp_ignored_modules": "modules FSDP would leave unsharded; the spec shards every unit",
    "dynamo_backend": ("accelerate's torch.compile backend; the spec compiles with "
                       "train.compile (inductor)"),
}

# Keys that say nothing a spec holds (where the script runs, TPU and debug settings).
NO_BEARING_KEYS: frozenset[str] = frozenset({
    "compute_environment", "debug", "downcast_bf16", "machine_rank",
    "main_training_function", "rdzv_backend", "same_network", "tpu_env", "tpu_use_cluster",
    "tpu_use_sudo", "gpu_ids", "enable_cpu_affinity", "fsdp_config",
    "dynamo_config", "deepspeed_config", "megatron_lm_config", "ipex_config",
    "mpirun_config", "tpu_name", "tpu_zone", "commands", "command_file", "fp8_config",
})

# accelerate's value for a key left out, where it differs from fsdpspec's default.
ABSENT_DEFAULTS: dict[str, object] = {
    "fsdp_version": 1,
    "fsdp_auto_wrap_policy": "NO_WRAP",
}
FSDP1_ABSENT_DEFAULTS: dict[str, object] = {
    "fsdp_backward_prefetch": "NO_PREFETCH",
    "fsdp_state_dict_type": "FULL_STATE_DICT",
}
