"""The FSDP units: the job names them from the geometry, the engine shards the modules
of those names. Built on the meta device with the same policy over the real module
tree, every preset gives the same names for every wrap policy and a sweep of
min_num_params, and the engine's wrapped model has exactly those units."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from fsdpspec.catalog.presets import preset_config, preset_names
from fsdpspec.job.job import Job, decoder_layer_classes, resolve, wrap_of
from fsdpspec.job.tree import LAYER
from fsdpspec.job.units import Units, choose_units
from fsdpspec.spec.v1 import JobSpec

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from fsdpspec.job.introspect import module_tree  # noqa: E402

BASE = Path(".")
# Small widths keep every published preset's depth and structure but build in
# milliseconds on the meta device.
SMALL = {"hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 320,
         "moe_intermediate_size": 32, "num_hidden_layers": 3,
         # DeepSeek-V3's 3 dense layers would leave 3 layers no experts: one dense, two MoE.
         "first_k_dense_replace": 1}
# Keys only a family that reads them is given.
_OWN_KEYS = ("moe_intermediate_size", "first_k_dense_replace")
SWEEP = (1, 100, 2_000, 5_000, 12_000, 20_480, 40_000, 10**9)


def _small(preset: str) -> dict:
    config = preset_config(preset)
    small = config | {k: v for k, v in SMALL.items() if k in config or k not in _OWN_KEYS}
    # Token ids of the published vocabulary would not fit the small one.
    small |= {k: None for k in ("pad_token_id", "bos_token_id", "eos_token_id")}
    if "layer_types" in config:
        small["layer_types"] = (config["layer_types"] * 3)[:3]
    return small


def _spec(preset: str, **fsdp: object) -> JobSpec:
    return JobSpec.model_validate({
        "apiVersion": "fsdpspec/v1", "kind": "TrainingJob", "metadata": {"name": "u"},
        "resources": {"gpus_per_node": 4}, "model": {"preset": preset}, "fsdp": fsdp,
        "data": {"global_batch_size": 4}})


def _built(config: dict):
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**config))


def _job(preset: str, config: dict, **fsdp: object) -> Job:
    return resolve(_spec(preset, **fsdp), BASE, config=config)


def _expert_tensors(units: Units) -> Counter:
    """How many stacked expert tensors of each shape the units hold, and in which unit
    (a layer's template and its layers alike)."""
    held: Counter = Counter()
    for u in (*units.units, units.root):
        for shape, n in u.experts:
            held[(shape, u.name.replace(LAYER, "0").rsplit(".", 1)[-1].isdigit())] += n * u.count
    return held


@pytest.mark.parametrize("preset", preset_names())
def test_job_units_are_the_built_models_modules(preset: str) -> None:
    config = _small(preset)
    model = _built(config)
    tree = module_tree(model)
    for fsdp in ([{"auto_wrap_policy": "transformer"}, {"auto_wrap_policy": "none"}]
                 + [{"auto_wrap_policy": "size", "min_num_params": n, "version": v,
                     "activation_checkpointing": ac}
                    for n in SWEEP for v in (1, 2) for ac in ("none", "selective")]):
        job = _job(preset, config, **fsdp)
        assert job.units is not None and job.geometry is not None
        classes = decoder_layer_classes(job.spec, job.geometry)
        engine = choose_units(tree, wrap_of(job.spec, classes))
        names = list(job.units.names())
        assert names == list(engine.names()), (preset, fsdp)
        assert list(job.units.layer_names()) == list(engine.layer_names())
        assert list(job.units.checkpointed()) == list(engine.checkpointed())
        # The stacked experts: the same modules, the same tensors in the same units.
        assert list(job.units.expert_names()) == list(engine.expert_names())
        assert _expert_tensors(job.units) == _expert_tensors(engine)
        for name in names:
            model.get_submodule(name)
        # Every parameter is in exactly one unit or the root.
        held = sum(u.numel * u.count for u in job.units.units) + job.units.root.numel
        assert held == job.geometry.total_params, (preset, fsdp)


@pytest.fixture(scope="module")
def fake_group():
    """A fake process group of 2 ranks (no communication) and its 1-D mesh."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from fsdpspec_runners.engine.mesh import shard_group_mesh

    dist.init_process_group("fake", rank=0, world_size=2, store=FakeStore())
    yield shard_group_mesh("cpu", 2)
    dist.destroy_process_group()


@pytest.mark.parametrize("preset", preset_names())
def test_the_engine_shards_exactly_the_jobs_units(preset: str, fake_group) -> None:
    """parallelize(model, job) on the meta device: the modules fully_shard made FSDP
    units are the job's unit names (the root aside), for every wrap policy and a sweep
    of min_num_params."""
    from torch.distributed.fsdp import FSDPModule

    from fsdpspec_runners.engine.wrap import parallelize

    config = _small(preset)
    for fsdp in ({"auto_wrap_policy": "transformer"}, {"auto_wrap_policy": "none"},
                 *({"auto_wrap_policy": "size", "min_num_params": n} for n in (100, 5_000,
                                                                                20_480))):
        job = _job(preset, config, **fsdp, activation_checkpointing="selective")
        model = _built(config)
        parallelize(model, job, fake_group, torch.device("cpu"))
        sharded = [name.replace("._checkpoint_wrapped_module", "")
                   for name, m in model.named_modules() if isinstance(m, FSDPModule) and name]
        assert sorted(sharded) == sorted(job.units.names()), (preset, fsdp)


def test_op_level_checkpointing_keeps_checkpointed_layers_whole() -> None:
    """Soundness sample 152 (seed 0: tiny-qwen2, size policy of 0, op-level checkpointing)
    stopped in backward: op-level checkpointing replays a layer's ops by count, and an
    FSDP unit inside the layer all-gathers again in the recomputation. No unit goes
    inside a checkpointed layer; with full checkpointing they still do."""
    def inside(mode: str) -> list[str]:
        units = resolve(_spec("tiny-qwen2", activation_checkpointing=mode,
                              auto_wrap_policy="size", min_num_params=0), BASE).units
        layers = list(units.layer_names())
        return [n for n in units.names() if any(n.startswith(f"{layer}.") for layer in layers)]

    assert inside("op") == []
    assert inside("full")
