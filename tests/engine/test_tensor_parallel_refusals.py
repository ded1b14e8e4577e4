"""What the engine's tensor parallelism does not split is refused by name, in one line,
before any process group forms (`tensor_parallel_plan`, called first by the engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from engine_jobs import BASE, merged  # noqa: E402

from fsdpspec.job.job import resolve  # noqa: E402
from fsdpspec.spec.v1 import JobSpec  # noqa: E402
from fsdpspec_runners.engine.errors import EngineError  # noqa: E402
from fsdpspec_runners.engine.tensor_parallel import tensor_parallel_plan  # noqa: E402

TP2 = {"parallelism": {"tensor_parallel": 2}}


@pytest.mark.parametrize(("override", "says"), [
    ({"fsdp": {"version": 1}}, "FSDP1 does not shard DTensors"),
    ({"fsdp": {"sharding_strategy": "NO_SHARD"}}, "NO_SHARD replicates with DDP"),
    ({"peft": {"method": "lora"}}, "a lora adapter's projections are not split"),
    ({"train": {"loss_chunks": 2}}, "train.loss_chunks applies the output projection"),
    ({"model": {"preset": "tiny-olmo2"}}, "its q/k norms normalise over every head"),
    ({"model": {"preset": None, "factory": "engine_factory:build"}}, "a factory model"),
    ({"data": {"seq_len": 33}}, "data.seq_len 33, not divisible"),
    ({"parallelism": {"tensor_parallel": 4}, "resources": {"gpus_per_node": 4}},
     "key/value heads 2 is not divisible"),
])
def test_what_tp_cannot_split_is_one_named_line(override: dict, says: str) -> None:
    job = resolve(JobSpec.model_validate(merged(merged(BASE, TP2), override)), Path("."))
    with pytest.raises(EngineError) as caught:
        tensor_parallel_plan(job)
    message = str(caught.value)
    assert says in message and "\n" not in message
    assert message.endswith("set parallelism.tensor_parallel: 1")


def test_every_dense_family_preset_has_a_plan() -> None:
    for preset in ("tiny-llama", "tiny-qwen2", "tiny-gemma3", "tiny-gpt-neox",
                   "tiny-starcoder2"):
        job = resolve(JobSpec.model_validate(merged(merged(BASE, TP2),
                                                    {"model": {"preset": preset}})), Path("."))
        assert tensor_parallel_plan(job).styles
