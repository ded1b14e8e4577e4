"""The engine's facts have one definition (fsdpspec.semantics) that the planner and the
engine both call: MFU's FLOPs per token and the plan's FLOPs agree for every preset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fsdpspec import semantics
from fsdpspec.catalog.presets import preset_config, preset_names
from fsdpspec.job.job import resolve
from fsdpspec.job.layout import layout
from fsdpspec.plan.planner import plan_job
from fsdpspec.spec.v1 import JobSpec

torch = pytest.importorskip("torch")

from fsdpspec_runners.engine.metrics import flops_per_token  # noqa: E402

BASE = Path(".")  # presets and inline geometries: no input paths

SEQ_LEN = 512


def _spec(preset: str, **fsdp: object) -> JobSpec:
    return JobSpec.model_validate({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "flops"},
        "resources": {"gpus_per_node": 8, "accelerator": "H100-80GB"},
        "model": {"preset": preset}, "fsdp": fsdp,
        "data": {"seq_len": SEQ_LEN, "micro_batch_size": 1, "global_batch_size": 16},
    })


@pytest.mark.parametrize("preset", preset_names())
def test_engine_mfu_flops_equal_the_plans(preset: str) -> None:
    plan = plan_job(resolve(_spec(preset), BASE, config=preset_config(preset)))
    tokens = plan.job.batch.tokens * plan.job.batch.accumulation
    engine = flops_per_token(torch.nn.Linear(1, 1), plan.job)
    assert plan.compute.flops / tokens == pytest.approx(engine, rel=1e-12)


def test_gemma2_attention_flops_use_the_query_width() -> None:
    """Gemma 2's query width (heads × head_dim) is not its hidden size."""
    config = preset_config("gemma2-9b")
    q_width = config["num_attention_heads"] * config["head_dim"]
    assert q_width != config["hidden_size"]
    plan = plan_job(resolve(_spec("gemma2-9b"), BASE, config=config))
    per_token = plan.compute.flops / (plan.job.batch.tokens * plan.job.batch.accumulation)
    assert per_token - 6 * plan.parameters == 12 * config["num_hidden_layers"] * q_width * SEQ_LEN


def test_checkpointing_adds_recompute_to_the_plan_not_to_mfu() -> None:
    config = preset_config("llama3-8b")
    base = plan_job(resolve(_spec("llama3-8b"), BASE, config=config))
    full_ac = _spec("llama3-8b", activation_checkpointing="full")
    full = plan_job(resolve(full_ac, BASE, config=config))
    assert full.compute.flops == pytest.approx(base.compute.flops * 4 / 3, rel=1e-12)


@pytest.mark.parametrize(("strategy", "group", "shape"), [
    ("FULL_SHARD", None, (16,)), ("SHARD_GRAD_OP", None, (16,)), ("NO_SHARD", None, (16, 1)),
    ("HYBRID_SHARD", None, (2, 8)), ("HYBRID_SHARD_ZERO2", 4, (4, 4)),
])
def test_mesh_shape_and_shard_group(strategy: str, group: int | None,
                                    shape: tuple[int, ...]) -> None:
    spec = JobSpec.model_validate({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "mesh"},
        "resources": {"nodes": 2, "gpus_per_node": 8},
        "launch": {"rdzv_endpoint": "node-0:29500"},
        "model": {"preset": "tiny-llama"},
        "fsdp": {"sharding_strategy": strategy, "shard_group_size": group},
    })
    dims = layout(spec).dims
    assert dims.mesh_shape == shape
    assert dims.dp_shard == shape[-1]


@pytest.mark.parametrize(("mode", "every", "layers", "count"), [
    ("none", 1, 32, 0), ("full", 1, 32, 32), ("selective", 2, 32, 16),
    ("selective", 3, 32, 11), ("selective", 3, 2**31 - 1, 715827883),
])
def test_checkpointed_count_matches_the_per_layer_rule(mode: str, every: int, layers: int,
                                                       count: int) -> None:
    assert semantics.checkpointed_count(mode, every, layers) == count
    if layers < 100:
        assert count == sum(semantics.is_checkpointed(mode, every, i) for i in range(layers))


def test_engine_mfu_flops_equal_the_plans_for_an_introspected_model(tmp_path: Path) -> None:
    """A model_type without an analytic family (GPT-2): the engine's MFU counts its
    attention as the plan does (it used to count zero layers)."""
    pytest.importorskip("transformers")
    gpt2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 3, "n_head": 4, "vocab_size": 320,
            "n_positions": 1024}
    (tmp_path / "config.json").write_text(json.dumps(gpt2))
    spec = JobSpec.model_validate({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "flops"},
        "resources": {"gpus_per_node": 2}, "model": {"hf_config": "config.json"},
        "data": {"seq_len": SEQ_LEN, "micro_batch_size": 1, "global_batch_size": 2}})
    plan = plan_job(resolve(spec, tmp_path))
    assert plan.geometry.introspected and plan.geometry.num_layers == 3
    tokens = plan.job.batch.tokens * plan.job.batch.accumulation
    engine = flops_per_token(torch.nn.Linear(1, 1), plan.job)
    assert plan.compute.flops / tokens == pytest.approx(engine, rel=1e-12)
    attention = 12 * 3 * 64 * SEQ_LEN
    assert engine == 6 * plan.parameters + attention
