"""FS13x: settings that NO_SHARD makes meaningless (nothing is sharded or gathered)."""

from __future__ import annotations

from collections.abc import Iterator

from fsdpspec.lint.registry import LintContext, diagnostic, rule
from fsdpspec.spec.diagnostics import Diagnostic, Severity

_PREFETCHING = (True, "BACKWARD_PRE", "BACKWARD_POST")


@rule("FS130", "offload-no-shard", Severity.WARNING,
      "CPU offload with NO_SHARD keeps a full model copy per rank in host memory",
      "use FULL_SHARD with cpu_offload, or drop cpu_offload")
def offload_no_shard(ctx: LintContext) -> Iterator[Diagnostic]:
    """CPU offload moves each rank's parameter shard to host memory. Under `NO_SHARD`
    the "shard" is the whole model: every rank keeps a full copy in host RAM and
    copies all of it to the device every step — the cost of offload with none of the
    memory saving of sharding.

    FAIL:

        resources: {gpus_per_node: 2}
        fsdp: {sharding_strategy: NO_SHARD, cpu_offload: true}

    PASS:

        resources: {gpus_per_node: 2}
        fsdp: {sharding_strategy: FULL_SHARD, cpu_offload: true}
    """
    fsdp = ctx.spec.fsdp
    if fsdp.cpu_offload and fsdp.sharding_strategy == "NO_SHARD":
        yield diagnostic("FS130", "cpu_offload with NO_SHARD offloads a full model copy on "
                         "every rank", "/fsdp/cpu_offload")


@rule("FS131", "prefetch-no-shard", Severity.WARNING,
      "prefetch settings with NO_SHARD, which never all-gathers",
      "remove the prefetch settings, or use a sharded strategy")
def prefetch_no_shard(ctx: LintContext) -> Iterator[Diagnostic]:
    """Prefetching overlaps the next unit's parameter all-gather with compute. Under
    `NO_SHARD` parameters are never gathered, so `forward_prefetch`, a non-default
    `backward_prefetch` and `limit_all_gathers` do nothing.

    FAIL:

        resources: {gpus_per_node: 2}
        fsdp: {version: 1, sharding_strategy: NO_SHARD, forward_prefetch: true}

    PASS:

        resources: {gpus_per_node: 2}
        fsdp: {version: 1, sharding_strategy: FULL_SHARD, forward_prefetch: true}
    """
    fsdp = ctx.spec.fsdp
    if fsdp.sharding_strategy != "NO_SHARD":
        return
    for name in ("forward_prefetch", "backward_prefetch", "limit_all_gathers"):
        pointer = f"/fsdp/{name}"
        # Only values that ask for prefetching: turning it off is harmless.
        if ctx.is_set(pointer) and getattr(fsdp, name) in _PREFETCHING:
            yield diagnostic("FS131", f"fsdp.{name} does nothing with NO_SHARD", pointer)


@rule("FS132", "fsdp1-offload-on-cpu", Severity.ERROR,
      "FSDP1 CPU offload on accelerator cpu: there is no device to offload from",
      "set fsdp.cpu_offload: false (on the CPU the parameters are in host memory already), "
      "or use fsdp.version: 2")
def fsdp1_offload_on_cpu(ctx: LintContext) -> Iterator[Diagnostic]:
    """FSDP1's `CPUOffload(offload_params=True)` keeps each shard in pinned (page-locked)
    host memory so it can be copied to the GPU quickly. Pinning needs a GPU driver: on a
    machine without one the first forward fails with "Cannot access accelerator device".
    On `accelerator: cpu` the parameters already live in host memory, so offloading
    saves nothing; FSDP2 accepts the setting and skips the pinning.

    FAIL:

        resources: {accelerator: cpu}
        fsdp: {version: 1, cpu_offload: true}

    PASS:

        resources: {accelerator: cpu}
        fsdp: {version: 1, cpu_offload: false}
    """
    spec = ctx.spec
    if spec.fsdp.version == 1 and spec.fsdp.cpu_offload and not spec.device().is_gpu:
        yield diagnostic("FS132", "FSDP1 cpu_offload pins host memory, which needs a GPU; "
                         "accelerator is cpu", "/fsdp/cpu_offload")
