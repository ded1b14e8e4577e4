"""What `fsdpspec tune` may change in a job: one row per lever, the spec key it sets (as
`--set` writes it) and the values worth trying for a job. A new lever is one row here.

Values depend on the candidate built so far (the rows before it), so a lever that only
means something under another (the hybrid shard group, `ac_every`) lists no values
elsewhere and is left as the spec has it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args

from fsdpspec.job.job import Job
from fsdpspec.job.parallel import parallel_dims
from fsdpspec.plan.expert_parallel import expert_count
from fsdpspec.plan.tensor_parallel import DEGREES
from fsdpspec.semantics import HYBRID_STRATEGIES
from fsdpspec.spec.section import Section
from fsdpspec.spec.v1 import Fsdp, JobSpec

# Sequences from this length on are long enough for tune to split them over ranks
# (torchtitan's CP table starts at 32k tokens, where one H100 holds one sequence).
LONG_SEQUENCE = 32768
# A candidate as it is built: spec key → value.
Choice = dict[str, Any]
Values = Callable[[JobSpec, Choice], tuple[Any, ...]]


@dataclass(frozen=True)
class Lever:
    key: str
    values: Values
    doc: str
    # Searched only when `--vary` names it (or all): it changes the numerics, not only
    # where the work runs.
    opt_in: bool = False
    # Offered by default (and under `--vary all`) only for a model it means something
    # for; None: every model.
    applies: Callable[[Job], bool] | None = None

    def setting(self, value: Any) -> str:
        """The `--set KEY=VALUE` that makes ``value``."""
        if self.key == FLOAT8:  # a section: on with a recipe, off as null
            return "float8=null" if value is None else f"float8.recipe={value}"
        if isinstance(value, bool):
            return f"{self.key}={'true' if value else 'false'}"
        return f"{self.key}={value}"


def value_of(spec: JobSpec, choice: Choice, key: str) -> Any:
    """The value of ``key`` in the candidate: chosen, else the spec's."""
    if key in choice:
        return choice[key]
    node: Any = spec
    for part in key.split("."):
        node = getattr(node, part)
    return node


def spec_values(section: type[Section], field: str) -> tuple[Any, ...]:
    """The values a Literal field of the spec allows: a mode the spec gains is searched."""
    return get_args(section.field_types()[field])


def _data_parallel(spec: JobSpec, choice: Choice) -> int:
    """The candidate's data-parallel ranks: the ranks of one context-parallel group hold
    one sequence between them, those of one tensor-parallel group one layer."""
    split = (value_of(spec, choice, "parallelism.context_parallel")
             * value_of(spec, choice, "parallelism.tensor_parallel"))
    return spec.world_size // split


def _tensor_parallel(spec: JobSpec, choice: Choice) -> tuple[Any, ...]:
    """Degrees within a node (`tensor_parallel.DEGREES`); whether the model splits at
    one is the search's to judge (`tensor_parallel.runs_at`)."""
    per_node = spec.resources.gpus_per_node
    return tuple(d for d in DEGREES if d <= per_node and per_node % d == 0)


def _strategies(spec: JobSpec, choice: Choice) -> tuple[Any, ...]:
    # A hybrid strategy needs a group smaller than the data-parallel ranks; else it is
    # FULL_SHARD.
    groups = _groups(_data_parallel(spec, choice))
    sharded = value_of(spec, choice, "parallelism.context_parallel") > 1  # FS195
    return tuple(s for s in spec_values(Fsdp, "sharding_strategy")
                 if (groups or s not in HYBRID_STRATEGIES) and not (sharded and s == "NO_SHARD"))


def _groups(world: int) -> tuple[int, ...]:
    """Groups that divide the world into whole replicas, from 2 ranks to half of them."""
    return tuple(n for n in range(2, world // 2 + 1) if world % n == 0)


def _shard_groups(spec: JobSpec, choice: Choice) -> tuple[Any, ...]:
    if value_of(spec, choice, "fsdp.sharding_strategy") not in HYBRID_STRATEGIES:
        return ()
    return _groups(_data_parallel(spec, choice))


def _expert_parallel(spec: JobSpec, choice: Choice) -> tuple[Any, ...]:
    """Powers of two (torchtitan's degrees, as `plan` offers them) that divide the ranks
    the experts are sharded over, FSDP's shard group (FS162), under FSDP2 over a sharded
    strategy without tensor or context parallelism (FS163, FS164, FS181); whether the
    model's experts split whole at one is the search's to judge
    (`expert_parallel.runs_at`)."""
    strategy = value_of(spec, choice, "fsdp.sharding_strategy")
    if (spec.fsdp.version != 2 or strategy == "NO_SHARD"
            or value_of(spec, choice, "parallelism.tensor_parallel") > 1
            or value_of(spec, choice, "parallelism.context_parallel") > 1):
        return ()
    ranks = parallel_dims(world_size=spec.world_size, strategy=strategy,
                          shard_group_size=value_of(spec, choice, "fsdp.shard_group_size"),
                          gpus_per_node=spec.resources.gpus_per_node, fsdp_version=2).dp_shard
    return tuple(1 << k for k in range(ranks.bit_length()) if ranks % (1 << k) == 0)


def _has_experts(job: Job) -> bool:
    return expert_count(job.units) > 0


def _checkpointing(spec: JobSpec, choice: Choice) -> tuple[Any, ...]:
    return spec_values(Fsdp, "activation_checkpointing")


def _ac_every(spec: JobSpec, choice: Choice) -> tuple[Any, ...]:
    if value_of(spec, choice, "fsdp.activation_checkpointing") != "selective":
        return ()
    return (2, 3, 4)


def _context_parallel(spec: JobSpec, choice: Choice) -> tuple[Any, ...]:
    """For a long sequence on GPUs, the context-parallel degrees a node holds (powers
    of two whose 2 × cp chunks split the sequence evenly), where the layout can run them
    (FSDP2, no adapters, text data, no tensor parallelism: FS194–FS196; NO_SHARD is not
    offered beside it); the model's attention (FS192, FS193) is validate's to check."""
    seq = spec.data.seq_len
    runs = (spec.device().is_gpu and seq >= LONG_SEQUENCE and spec.fsdp.version == 2
            and spec.peft is None and spec.data.format == "text"
            and spec.parallelism.tensor_parallel == 1)
    if not runs:
        return ()
    per_node = spec.resources.gpus_per_node
    degrees = (1 << k for k in range(per_node.bit_length()))
    return tuple(c for c in degrees if per_node % c == 0 and seq % (2 * c) == 0)


def _micro_batches(spec: JobSpec, choice: Choice) -> tuple[Any, ...]:
    """Micro-batches that keep the global batch exactly (a whole number of accumulation
    steps of every data-parallel rank's micro-batch: the ranks of one context-parallel
    group share theirs)."""
    per_rank, rest = divmod(spec.data.global_batch_size, _data_parallel(spec, choice))
    if rest or not per_rank:
        return ()
    return tuple(n for n in range(1, per_rank + 1) if per_rank % n == 0)


def _offload(spec: JobSpec, choice: Choice) -> tuple[Any, ...]:
    # On a CPU the parameters are in host memory already: nothing to offload.
    return (False, True) if spec.device().is_gpu else ()


FLOAT8 = "float8"


def _float8(spec: JobSpec, choice: Choice) -> tuple[Any, ...]:
    """float8 where it runs: a GPU with FP8 tensor cores, FSDP2, no adapters, no tensor
    parallelism (FS320-FS325); torchao's default recipe."""
    device = spec.device()
    if (not device.is_gpu or not device.fp8_tflops or spec.peft is not None
            or spec.fsdp.version != 2
            or value_of(spec, choice, "parallelism.tensor_parallel") > 1):
        return ()
    return (None, "tensorwise")


LEVERS: tuple[Lever, ...] = (
    # First: the data-parallel ranks the levers below divide depend on it.
    Lever("parallelism.tensor_parallel", _tensor_parallel,
          "ranks each layer is split over, within a node"),
    Lever("parallelism.context_parallel", _context_parallel,
          "ranks each long sequence is split over (ring attention, GPUs)"),
    Lever("fsdp.sharding_strategy", _strategies, "what is sharded, and over how many ranks"),
    Lever("fsdp.shard_group_size", _shard_groups, "ranks per shard group (hybrid strategies)"),
    # After the shard group, which it divides.
    Lever("parallelism.expert_parallel", _expert_parallel,
          "ranks each layer's experts are split over (a Mixture of Experts)",
          applies=_has_experts),
    Lever("fsdp.activation_checkpointing", _checkpointing, "which layers recompute in backward"),
    Lever("fsdp.ac_every", _ac_every, "one layer in this many checkpointed (selective)"),
    Lever("data.micro_batch_size", _micro_batches,
          "sequences per forward; accumulation keeps the global batch"),
    Lever("fsdp.cpu_offload", _offload, "sharded state in host memory (GPUs)"),
    Lever(FLOAT8, _float8, "float8 matmuls at the FP8 peak (GPUs with FP8 tensor cores)",
          opt_in=True),
)
LEVER_KEYS = tuple(lever.key for lever in LEVERS)


def lever_of(key: str) -> Lever:
    """The lever that sets ``key`` (a GPU count's keys are plain settings)."""
    return next((lever for lever in LEVERS if lever.key == key),
                Lever(key, lambda spec, choice: (), ""))
