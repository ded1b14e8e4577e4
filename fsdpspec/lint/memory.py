"""FS20x: memory — the job must fit its devices (with headroom) and its hosts.

The rules share one analytic plan (fsdpspec.plan), computed once per spec."""

from __future__ import annotations

from collections.abc import Iterator

from fsdpspec.job.geometry import GeometryError
from fsdpspec.job.introspect import NotIntrospected
from fsdpspec.lint.registry import LintContext, diagnostic, rule
from fsdpspec.plan.memory import GIB
from fsdpspec.plan.planner import Plan, plan_job
from fsdpspec.spec.diagnostics import Diagnostic, Severity


def _plan(ctx: LintContext) -> Plan | GeometryError | None:
    """The spec's plan (cached), the geometry error that prevents one, or None for a
    factory model without `model.geometry` or a model_type without an analytic family."""
    if "plan" not in ctx.cache:
        job = ctx.job
        if job.geometry is not None:
            ctx.cache["plan"] = plan_job(job)
        elif isinstance(job.geometry_error, NotIntrospected):
            ctx.cache["plan"] = None  # FS210 says so
        else:
            ctx.cache["plan"] = job.geometry_error
    return ctx.cache["plan"]


def _planned(ctx: LintContext) -> Plan | None:
    found = _plan(ctx)
    return found if isinstance(found, Plan) else None


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _fixes(plan: Plan) -> str:
    best = [f"--set {s.override} (saves {_gib(s.saves_bytes)})" for s in plan.suggestions[:3]]
    return "cheapest fixes: " + "; ".join(best) if best else ""


def _fewest(plan: Plan) -> str:
    if plan.min_gpus is None:
        ep = plan.min_gpus_ep
        with_ep = (f" ({ep[0]} do with --set parallelism.expert_parallel={ep[1]})"
                   if ep else "")
        return f"no number of {plan.accelerator.name} fits this configuration{with_ep}"
    per_node = plan.spec.resources.gpus_per_node
    nodes = plan.min_gpus // per_node
    return (f"it fits on at least {plan.min_gpus} {plan.accelerator.name} "
            f"({nodes} node{'s' * (nodes != 1)} of {per_node})")


@rule("FS201", "does-not-fit", Severity.ERROR,
      "the job does not fit its GPUs' memory",
      "use at least the GPU count named, or one of the fixes named")
def does_not_fit(ctx: LintContext) -> Iterator[Diagnostic]:
    """Per-rank device memory at the step's peak — sharded parameters, gradients and
    optimizer state, the gathered units, activations, logits and loss, buffers, plus
    allocator fragmentation, the CUDA context and NCCL — exceeds the device. The message
    names the fewest GPUs (whole nodes) that fit and the changes that save most memory.
    With `accelerator: cpu` each process is judged against its share of host memory.
    See `fsdpspec plan` for every term.

    FAIL:

        resources: {nodes: 1, gpus_per_node: 1, accelerator: H100-80GB}
        model: {preset: llama3-8b}
        fsdp: {mixed_precision: bf16}

    PASS:

        resources: {nodes: 1, gpus_per_node: 8, accelerator: H100-80GB}
        model: {preset: llama3-8b}
        fsdp: {mixed_precision: bf16, activation_checkpointing: full}
        data: {global_batch_size: 8}
    """
    plan = _planned(ctx)
    # On a CPU the device is host memory: FS203 speaks for it when the host overflows.
    if plan is None or plan.fits_device or not (plan.accelerator.is_gpu or plan.fits_host):
        return
    device = plan.accelerator.name
    need = _gib(plan.device.total)
    if plan.accelerator.is_gpu:
        message = (f"needs {need} per GPU at its peak ({plan.device.peak.name}) but {device} "
                   f"has {_gib(plan.capacity)}; {_fewest(plan)}")
        path = "/resources/gpus_per_node"
    else:
        message = (f"needs {need} per process at its peak ({plan.device.peak.name}) but the "
                   f"host leaves {_gib(plan.capacity)} per process")
        path = "/resources/host_memory_gib"
    yield diagnostic("FS201", message, path, _fixes(plan) or None)


@rule("FS202", "low-memory-headroom", Severity.WARNING,
      "the job fits, but with less free device memory than resources.memory_headroom",
      "lower the peak (see `fsdpspec plan`) or accept a smaller resources.memory_headroom")
def low_headroom(ctx: LintContext) -> Iterator[Diagnostic]:
    """The predicted peak fits the device but leaves less of it free than
    `resources.memory_headroom` asks for. Allocation patterns vary (sequence packing,
    allocator state, library workspaces), so a job planned at 98% often fails at step
    one hundred.

    FAIL:

        resources: {gpus_per_node: 8, accelerator: H100-80GB, memory_headroom: 0.10}
        model: {preset: llama3-8b}
        fsdp: {mixed_precision: bf16}
        data: {seq_len: 7680, global_batch_size: 8}

    PASS:

        resources: {gpus_per_node: 8, accelerator: H100-80GB, memory_headroom: 0.10}
        model: {preset: llama3-8b}
        fsdp: {mixed_precision: bf16, activation_checkpointing: full}
        data: {seq_len: 8192, global_batch_size: 8}
    """
    plan = _planned(ctx)
    if plan is None or not plan.fits_device or plan.headroom >= plan.headroom_target:
        return
    yield diagnostic(
        "FS202",
        f"peak {_gib(plan.device.total)} leaves {100 * plan.headroom:.1f}% of "
        f"{plan.accelerator.name} free; resources.memory_headroom asks for "
        f"{100 * plan.headroom_target:.0f}%",
        "/resources/memory_headroom", _fixes(plan) or None)


_HOST_HINTS = {
    "processes": "run fewer processes per node (resources.gpus_per_node) or add host memory",
    "weight loading": "set fsdp.cpu_ram_efficient_loading: true (only rank 0 reads weights)",
    "training": "offloaded state is per rank: add host memory or drop fsdp.cpu_offload",
    "checkpoint save": "use fsdp.state_dict_type: SHARDED_STATE_DICT (no rank-0 gather)",
    "final export": "export smaller shards (checkpoint.final.max_shard_mb) or fewer bytes "
                    "(checkpoint.final.dtype: bfloat16), or disable checkpoint.final",
}


@rule("FS203", "host-memory", Severity.ERROR,
      "a node's host memory cannot hold what the job puts there",
      "see the hint for the phase that peaks")
def host_memory(ctx: LintContext) -> Iterator[Diagnostic]:
    """Host memory per node peaks above `resources.host_memory_gib`: CPU-offloaded
    parameters, gradients and optimizer state of every rank on the node; weight loading
    (every rank, unless `cpu_ram_efficient_loading`); the rank-0 gather of a
    `FULL_STATE_DICT` checkpoint (fp32 weights and optimizer state); and the final
    export, which gathers fp32 weights on rank 0 before casting them.

    FAIL:

        resources: {gpus_per_node: 8, accelerator: H100-80GB, host_memory_gib: 96}
        model: {preset: llama3-8b}
        fsdp: {mixed_precision: bf16, state_dict_type: FULL_STATE_DICT}

    PASS:

        resources: {gpus_per_node: 8, accelerator: H100-80GB, host_memory_gib: 96}
        model: {preset: llama3-8b}
        fsdp: {mixed_precision: bf16, state_dict_type: SHARDED_STATE_DICT}
    """
    plan = _planned(ctx)
    if plan is None or plan.fits_host:
        return
    host = plan.host
    yield diagnostic(
        "FS203",
        f"host memory per node peaks at {_gib(host.peak)} ({host.peak_phase}) but "
        f"resources.host_memory_gib is {ctx.spec.resources.host_memory_gib:g}",
        "/resources/host_memory_gib", _HOST_HINTS[host.peak_phase])


@rule("FS204", "unplannable-model", Severity.ERROR,
      "the model config cannot be counted",
      "give sizes that divide as the model needs (hidden_size by num_attention_heads, …)")
def unplannable_model(ctx: LintContext) -> Iterator[Diagnostic]:
    """The model's sizes do not fit together (a hidden size that the attention heads do
    not divide, with no head_dim), so neither the memory plan nor the engine can build
    the model. A size of the wrong type in config.json is FS030 already, naming the key.

    FAIL:

        model: {hf_config: models/indivisible-llama/}   # "hidden_size": 2000, 32 heads

    PASS:

        model: {hf_config: models/llama/}          # config.json: "hidden_size": 2048
    """
    found = _plan(ctx)
    if isinstance(found, GeometryError):
        pointer = "/model/geometry" if ctx.spec.model.geometry else "/model/hf_config"
        yield diagnostic("FS204", str(found), pointer)
