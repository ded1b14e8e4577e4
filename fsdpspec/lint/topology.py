"""FS10x: topology — world size, hybrid sharding groups, process-group backend."""

from __future__ import annotations

from collections.abc import Iterator

from fsdpspec.job.parallel import ParallelDims, ParallelDimsError
from fsdpspec.lint.registry import LintContext, diagnostic, rule
from fsdpspec.semantics import HYBRID_STRATEGIES
from fsdpspec.spec.diagnostics import Diagnostic, Severity
from fsdpspec.spec.v1 import JobSpec

# What each hybrid strategy is once there is a single shard group.
_FLAT_EQUIVALENT = {"HYBRID_SHARD": "FULL_SHARD", "HYBRID_SHARD_ZERO2": "SHARD_GRAD_OP"}
# Variables torchrun sets in every worker; values in launch.env are replaced.
_TORCHRUN_ENV = ("RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR", "MASTER_PORT")


def _world_sizes(spec: JobSpec) -> dict[str, int]:
    return {"WORLD_SIZE": spec.world_size, "LOCAL_WORLD_SIZE": spec.resources.gpus_per_node}


@rule("FS101", "world-size-mismatch", Severity.ERROR,
      "launch.env sets a world size other than nodes × gpus_per_node",
      "remove it: torchrun derives the world size from resources.nodes × gpus_per_node")
def world_size_mismatch(ctx: LintContext) -> Iterator[Diagnostic]:
    """The world size is `resources.nodes × resources.gpus_per_node`, and torchrun sets
    `WORLD_SIZE` / `LOCAL_WORLD_SIZE` from it in every process. A different value in
    `launch.env` means the spec was written for another topology: the batch arithmetic
    and sharding the author had in mind are not what will run.

    FAIL:

        resources: {nodes: 1, gpus_per_node: 2}
        launch:
          env: {WORLD_SIZE: "8"}

    PASS:

        resources: {nodes: 1, gpus_per_node: 2}
        launch:
          env: {OMP_NUM_THREADS: "1"}
    """
    for name, size in _world_sizes(ctx.spec).items():
        value = ctx.spec.launch.env.get(name)
        if value is not None and value.strip() != str(size):
            yield diagnostic("FS101", f"launch.env {name}={value} but the spec runs {size} "
                             f"process{'es' * (size != 1)}", f"/launch/env/{name}")


@rule("FS102", "torchrun-env", Severity.WARNING,
      "launch.env sets a variable torchrun overwrites in every process",
      "remove it; use launch.rdzv_endpoint for the rendezvous address")
def torchrun_env(ctx: LintContext) -> Iterator[Diagnostic]:
    """torchrun sets `RANK`, `LOCAL_RANK`, `GROUP_RANK`, `ROLE_RANK`, `MASTER_ADDR` and
    `MASTER_PORT` for each worker, so values in `launch.env` are silently replaced.
    (`WORLD_SIZE` is checked by FS101.)

    FAIL:

        launch:
          env: {MASTER_PORT: "29501"}

    PASS:

        launch:
          env: {NCCL_DEBUG: WARN}
    """
    for name in _TORCHRUN_ENV:
        if name in ctx.spec.launch.env:
            yield diagnostic("FS102", f"launch.env {name} is overwritten by torchrun",
                             f"/launch/env/{name}")


@rule("FS103", "hybrid-single-group", Severity.WARNING,
      "a hybrid strategy with one shard group is the plain strategy plus overhead",
      "use FULL_SHARD (or SHARD_GRAD_OP), or a shard_group_size below the world size")
def hybrid_single_group(ctx: LintContext) -> Iterator[Diagnostic]:
    """`HYBRID_SHARD` shards within a group of `shard_group_size` ranks (default: one
    node) and replicates across groups. When one group spans every rank — one node with
    the default group size — there is nothing to replicate across, and the job is
    `FULL_SHARD` with an extra 2-D device mesh.

    FAIL:

        resources: {nodes: 1, gpus_per_node: 2}
        fsdp: {sharding_strategy: HYBRID_SHARD}

    PASS:

        resources: {nodes: 1, gpus_per_node: 2}
        fsdp: {sharding_strategy: FULL_SHARD}
    """
    dims = ctx.job.layout.dims
    strategy, world = dims.written_strategy, dims.world_size
    if strategy in HYBRID_STRATEGIES and _fits(dims) and not dims.dp_replicate_enabled:
        yield diagnostic("FS103", f"{strategy} with one shard group of {world} "
                         f"ranks is {_FLAT_EQUIVALENT[strategy]}", "/fsdp/sharding_strategy",
                         f"use {_FLAT_EQUIVALENT[strategy]}, or a shard_group_size that "
                         f"divides {world} into several groups")


def _fits(dims: ParallelDims) -> bool:
    try:
        dims.validate()
    except ParallelDimsError:
        return False
    return True


@rule("FS104", "hybrid-degree", Severity.ERROR,
      "the hybrid shard group size does not divide the world size",
      "choose a shard_group_size that divides nodes × gpus_per_node")
def hybrid_degree(ctx: LintContext) -> Iterator[Diagnostic]:
    """Hybrid sharding lays the ranks out as a (replicate × shard) mesh, so the shard
    group size must divide the world size; otherwise the device mesh cannot be built
    and every rank fails at start-up.

    FAIL:

        resources: {nodes: 1, gpus_per_node: 4}
        fsdp: {sharding_strategy: HYBRID_SHARD, shard_group_size: 3}

    PASS:

        resources: {nodes: 1, gpus_per_node: 4}
        fsdp: {sharding_strategy: HYBRID_SHARD, shard_group_size: 2}
    """
    dims = ctx.job.layout.dims
    try:
        dims.validate()
    except ParallelDimsError as exc:
        if exc.field.startswith("/parallelism"):
            return  # the tensor-, context- (FS176) and expert-parallel degrees' (FS162)
        world = dims.world_size
        divisors = [d for d in range(1, world + 1) if world % d == 0]
        # The default group (one node) always divides: only a written size can fail.
        yield diagnostic("FS104", str(exc), exc.field,
                         f"use a shard_group_size among {divisors}")


@rule("FS105", "shard-group-unused", Severity.WARNING,
      "shard_group_size is set but the strategy is not hybrid",
      "remove shard_group_size, or use HYBRID_SHARD / HYBRID_SHARD_ZERO2")
def shard_group_unused(ctx: LintContext) -> Iterator[Diagnostic]:
    """`fsdp.shard_group_size` only shapes the hybrid strategies; with any other strategy
    it is ignored.

    FAIL:

        fsdp: {sharding_strategy: FULL_SHARD, shard_group_size: 2}

    PASS:

        resources: {nodes: 1, gpus_per_node: 4}
        fsdp: {sharding_strategy: HYBRID_SHARD, shard_group_size: 2}
    """
    fsdp = ctx.spec.fsdp
    if fsdp.shard_group_size is not None and fsdp.sharding_strategy not in HYBRID_STRATEGIES:
        yield diagnostic("FS105", f"shard_group_size is ignored with {fsdp.sharding_strategy}",
                         "/fsdp/shard_group_size")


@rule("FS106", "nccl-on-cpu", Severity.ERROR,
      "the nccl backend on a CPU accelerator",
      "use backend: gloo (or auto) for CPU processes")
def nccl_on_cpu(ctx: LintContext) -> Iterator[Diagnostic]:
    """NCCL only moves CUDA tensors: CPU processes cannot initialise an NCCL process
    group, so the job fails at start-up.

    FAIL:

        resources: {accelerator: cpu, gpus_per_node: 2}
        launch: {backend: nccl}

    PASS:

        resources: {accelerator: cpu, gpus_per_node: 2}
        launch: {backend: gloo}
    """
    if ctx.spec.launch.backend == "nccl" and not ctx.spec.device().is_gpu:
        yield diagnostic("FS106", "backend nccl needs GPUs; the accelerator is cpu",
                         "/launch/backend")


@rule("FS107", "gloo-on-gpu", Severity.WARNING,
      "the gloo backend on GPUs",
      "use backend: nccl (or auto) on GPUs")
def gloo_on_gpu(ctx: LintContext) -> Iterator[Diagnostic]:
    """Gloo runs collectives through host memory: on GPUs every all-gather and
    reduce-scatter is copied to the CPU and back, many times slower than NCCL.

    FAIL:

        resources: {accelerator: A100-80GB, gpus_per_node: 8}
        fsdp: {mixed_precision: bf16}
        launch: {backend: gloo}

    PASS:

        resources: {accelerator: A100-80GB, gpus_per_node: 8}
        fsdp: {mixed_precision: bf16}
        launch: {backend: nccl}
    """
    if ctx.spec.launch.backend == "gloo" and ctx.spec.device().is_gpu:
        yield diagnostic("FS107", "backend gloo on GPUs moves every collective through "
                         "host memory", "/launch/backend")
