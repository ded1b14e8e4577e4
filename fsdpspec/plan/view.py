"""A Plan as stable JSON data, and as the text table `fsdpspec plan` prints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsdpspec.plan.budget import SCALING_LOSS
from fsdpspec.plan.lora import base_bytes_per_element, trainable_numel
from fsdpspec.plan.memory import GIB
from fsdpspec.plan.planner import MAX_NODES
from fsdpspec.plan.steptime import STEP_TIME_BAND

if TYPE_CHECKING:
    from fsdpspec.plan.budget import Budget, Scaling
    from fsdpspec.plan.planner import Plan


def _peft_json(plan: Plan) -> dict[str, Any] | None:
    a = plan.job.adapters
    if a is None:
        return None
    return {"method": a.method, "r": a.r, "adapted_per_layer": [n for n, _ in a.linears],
            "trainable_parameters": trainable_numel(plan.job),
            "modules_saved": a.saved_modules(),
            "frozen_base_bytes_per_parameter": base_bytes_per_element(plan.job)}


def _float8_json(plan: Plan) -> dict[str, Any] | None:
    f8 = plan.job.float8
    if f8 is None:
        return None
    return {"recipe": f8.recipe, "linears": sum(n for _, _, n in f8.linears),
            "converted_parameters": f8.numel, "fsdp_all_gather": f8.all_gather,
            "fp8_tflops": plan.accelerator.fp8_tflops}


def plan_json(plan: Plan) -> dict[str, Any]:
    """The documented JSON form (keys are stable)."""
    device, host, compute = plan.device, plan.host, plan.compute
    return {
        "parameters": {"total": plan.parameters,
                       "active": plan.geometry.active_params,
                       "per_layer": plan.geometry.layer_params,
                       "outside_layers": plan.geometry.root_params,
                       "source": "introspected" if plan.geometry.introspected else "analytic"},
        "world_size": plan.job.layout.world_size,
        "shard_size": plan.job.layout.shard_size,
        "context_parallel": plan.job.layout.dims.cp,
        "tensor_parallel": plan.job.layout.dims.tp,
        "accumulation_steps": plan.job.batch.accumulation,
        "accelerator": plan.accelerator.name,
        "peft": _peft_json(plan),
        "float8": _float8_json(plan),
        "dpo": _preference_json(plan),
        "memory": {
            "device": {
                "peak_allocated_bytes": device.peak_allocated,
                "peak_reserved_bytes": device.peak_reserved,
                "total_bytes": device.total,
                "capacity_bytes": plan.capacity,
                "headroom": round(plan.headroom, 4),
                "peak_phase": device.peak.name,
                "terms": dict(device.peak.terms),
                "fragmentation_bytes": device.fragmentation,
                "idle_cache_bytes": device.idle_cache,
                "cuda_context_bytes": device.cuda_context,
                "nccl_bytes": device.nccl,
                "phases": {p.name: p.total for p in device.points},
            },
            "host": {
                "peak_bytes": host.peak,
                "capacity_bytes": plan.host_capacity,
                "peak_phase": host.peak_phase,
                "terms": dict(host.terms),
            },
        },
        "compute": {
            "flops_per_step": compute.flops,
            "compute_seconds": compute.compute_seconds,
            "communication_seconds": compute.communication_seconds,
            "all_gather_bytes": compute.all_gather_bytes,
            "reduce_scatter_bytes": compute.reduce_scatter_bytes,
            "all_reduce_bytes": compute.all_reduce_bytes,
            # The step-time model's verdict: the one answer to what bounds the step.
            "communication_bound": plan.step is not None and plan.step.bound == "communication",
            "offload_seconds": compute.offload_seconds,
            "ring_bytes_per_micro_batch": compute.ring_bytes,
            "ring_seconds_per_micro_batch": compute.ring_seconds,
            "tensor_parallel_bytes": compute.tensor_parallel_bytes,
            "expert_parallel_bytes": compute.expert_parallel_bytes,
        },
        "step_time": _step_json(plan),
        "fits": plan.fits,
        "fits_device": plan.fits_device,
        "fits_host": plan.fits_host,
        "min_gpus": plan.min_gpus,
        "min_single_gpus": plan.min_single_gpus,
        "min_gpus_tensor_parallel": None if plan.min_gpus_tp is None else {
            "gpus": plan.min_gpus_tp[0], "tensor_parallel": plan.min_gpus_tp[1]},
        "min_gpus_expert_parallel": None if plan.min_gpus_ep is None else {
            "gpus": plan.min_gpus_ep[0], "expert_parallel": plan.min_gpus_ep[1]},
        "suggestions": [{"override": s.override, "description": s.description,
                         "saves_bytes": s.saves_bytes, "fits": s.fits}
                        for s in plan.suggestions],
        "fitting_levers": None if plan.fitting_levers is None else {
            "overrides": list(plan.fitting_levers.overrides),
            "saves_bytes": plan.fitting_levers.saves_bytes,
            "device_total_bytes": plan.fitting_levers.device_total,
            "extra_seconds_per_step": plan.fitting_levers.extra_seconds,
        },
    }


def _step_json(plan: Plan) -> dict[str, Any] | None:
    """The step-time model's prediction (null when the device's peak is unknown)."""
    step = plan.step
    if step is None:
        return None
    return {"seconds": step.seconds, "compute_seconds": step.compute_seconds,
            "exposed_communication_seconds": step.exposed_communication_seconds,
            "exposed_host_seconds": step.exposed_host_seconds,
            "optimizer_seconds": step.optimizer_seconds,
            "tokens_per_s_per_device": step.tokens_per_s, "mfu": step.mfu,
            "bound": step.bound, "calibrated": plan.accelerator.is_gpu
            or plan.accelerator.name != "cpu"}


MIB = 1 << 20


def _unit(plan: Plan) -> tuple[int, str]:
    """GiB, or MiB for a job whose whole device footprint is under one GiB."""
    return (GIB, "GiB") if plan.device.total >= GIB else (MIB, "MiB")


def amount(n: float, unit: int) -> str:
    return f"{n / unit:8.2f}"


def _share(n: int, capacity: int) -> str:
    return f"{100 * n / capacity:6.1f}%" if capacity > 0 else "      -"


def _device_rows(plan: Plan, unit: int, name: str) -> list[str]:
    device, cap = plan.device, plan.capacity

    def row(label: str, value: int, share: bool = True) -> str:
        return f"  {label:<28}{amount(value, unit)}  {_share(value, cap) if share else ''}"

    rows = [f"  {'term':<28}{name:>8}  {'of device':>8}"]
    rows += [row(term.replace("_", " "), v) for term, v in device.peak.terms.items() if v]
    rows.append(row("= peak allocated", device.peak_allocated))
    rows.append(row("+ allocator fragmentation", device.fragmentation, False))
    if device.idle_cache:
        rows.append(row("+ idle cached logits block", device.idle_cache, False))
    rows.append(row("= peak reserved", device.peak_reserved, False))
    if device.idle_cache:
        rows.append(row("- idle cache (releasable)", device.idle_cache, False))
    if device.cuda_context or device.nccl:
        rows.append(row("+ CUDA context", device.cuda_context, False))
        rows.append(row("+ NCCL buffers", device.nccl, False))
    rows.append(row("= device total", device.total))
    return [r.rstrip() for r in rows]


def _verdict(plan: Plan, unit: int, name: str) -> list[str]:
    device, cap = plan.device, plan.capacity
    word = "fits" if plan.fits_device else "DOES NOT FIT"
    lines = [f"device: {word}: {device.total / unit:.1f} of {cap / unit:.1f} {name} "
             f"(headroom {100 * plan.headroom:.1f}%, wanted {100 * plan.headroom_target:.0f}%)"]
    host_word = "fits" if plan.fits_host else "DOES NOT FIT"
    lines.append(f"host (per node): {host_word}: {plan.host.peak / GIB:.1f} of "
                 f"{plan.host_capacity / GIB:.1f} GiB at {plan.host.peak_phase}")
    if plan.accelerator.is_gpu:
        lines.append(f"fewest {plan.accelerator.name} that fit: {_fewest_answer(plan)}")
    return lines


def _fewest_answer(plan: Plan) -> str:
    """The fewest GPUs, said so that it cannot read as contradicting the verdict: it
    counts whole nodes, and keeps the wanted headroom."""
    fewest, single = plan.min_gpus, plan.min_single_gpus
    if fewest is None:
        return f"none up to {MAX_NODES} nodes" + _fewest_tp(plan) + _fewest_ep(plan)
    per_node = plan.spec.resources.gpus_per_node
    nodes = fewest // per_node
    answer = (f"{fewest} ({nodes} whole node{'s' * (nodes != 1)} of {per_node}, keeping "
              f"{100 * plan.headroom_target:.0f}% headroom")
    if single is not None and single < fewest:
        answer += f"; {single} GPU{'s' * (single != 1)} alone would hold it"
    return answer + ")" + _fewest_tp(plan) + _fewest_ep(plan)


def _fewest_tp(plan: Plan) -> str:
    """The fewest GPUs with tensor parallelism, where it needs fewer."""
    if plan.min_gpus_tp is None:
        return ""
    gpus, degree = plan.min_gpus_tp
    return f"; {gpus} with --set parallelism.tensor_parallel={degree}"


def _fewest_ep(plan: Plan) -> str:
    """The fewest GPUs with expert parallelism, where it needs fewer."""
    if plan.min_gpus_ep is None:
        return ""
    gpus, degree = plan.min_gpus_ep
    return f"; {gpus} with --set parallelism.expert_parallel={degree}"


def _compute_lines(plan: Plan) -> list[str]:
    c = plan.compute
    traffic = (c.all_gather_bytes + c.reduce_scatter_bytes + c.all_reduce_bytes) / GIB
    head = f"step: {c.flops / 1e12:.1f} TFLOP per rank"
    if c.compute_seconds is None:
        return [f"{head}, {traffic:.1f} GiB of collectives per rank; compute time unknown "
                "(set resources.accelerator.bf16_tflops)"]
    # The verdict is the predicted step's (below): FSDP overlaps the two, so their sum
    # is not the step, and each alone is at most the step that contains it.
    bound = f"likely {plan.step.bound}-bound" if plan.step else "bound unknown"
    lines = [f"{head}, ideal {c.compute_seconds:.3f} s compute and "
             f"{c.communication_seconds:.3f} s collectives ({traffic:.1f} GiB per rank) on "
             f"overlapping streams: {bound}"]
    if c.offload_seconds:
        lines.append(f"activation offload: {c.offload_seconds:.3f} s of PCIe transfers per "
                     "step (out overlapped with forward, back on demand in backward)")
    if c.ring_bytes:
        lines.append(f"ring attention (context_parallel {plan.job.layout.dims.cp}): "
                     f"{c.ring_bytes / GIB:.1f} GiB of keys, values and their gradients per "
                     f"rank and micro-batch, {c.ring_seconds:.3f} s, waited for inside "
                     "attention (fsdpspec/plan/ring.py)")
    if c.expert_parallel_bytes:
        dims = plan.job.layout.dims
        lines.append(f"expert parallelism (expert_parallel {dims.ep}, experts sharded over "
                     f"efsdp {dims.efsdp}): {c.expert_parallel_bytes / GIB:.1f} GiB of routed "
                     "tokens per rank per step in all-to-alls, on the critical path; every "
                     "figure assumes a perfectly balanced router (each rank receives "
                     "tokens × top-k rows; fsdpspec/plan/expert_parallel.py)")
    return lines


def step_line(plan: Plan) -> str:
    """The predicted step: its time and parts, throughput, MFU and what bounds it."""
    step = plan.step
    if step is None:
        return "predicted step: unknown (set resources.accelerator.bf16_tflops)"
    device = "GPU" if plan.accelerator.is_gpu else "process"
    line = (f"predicted step: {step.seconds:.3f} s (compute {step.compute_seconds:.3f}, "
            f"exposed communication {step.exposed_communication_seconds:.3f}, host transfers "
            f"{step.exposed_host_seconds:.3f}, optimizer {step.optimizer_seconds:.3f}): "
            f"{step.tokens_per_s:,.0f} tokens/s per {device}, MFU {100 * step.mfu:.1f}%, "
            f"{step.bound}-bound")
    if not plan.accelerator.is_gpu and plan.accelerator.name == "cpu":
        line += " (placeholder CPU rates: `fsdpspec tune --measure` calibrates this machine)"
    return line


def _count(n: float) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.2f}{suffix}"
    return str(n)


def _parameters(plan: Plan) -> str:
    """Total parameters; a Mixture of Experts' active ones too; the source when the model
    was introspected rather than counted from its family."""
    g = plan.geometry
    text = f"{_count(plan.parameters)} parameters"
    if g.active_params != plan.parameters:
        text += f" ({_count(g.active_params)} active per token)"
    return text + (f" (introspected: model_type {g.family})" if g.introspected else "")


def _adapter_lines(plan: Plan) -> list[str]:
    """What a LoRA / QLoRA trains and how its frozen base is stored."""
    a = plan.job.adapters
    if a is None:
        return []
    trainable = trainable_numel(plan.job)
    stored = f"{base_bytes_per_element(plan.job)} bytes per parameter"
    if a.method == "qlora":
        stored = f"4 bits + block scales per projection weight, {stored} elsewhere"
    saved = a.saved_modules()
    copies = f" and {saved} module(s) trained in full (modules_to_save)" if saved else ""
    line = (f"{a.method} r={a.r} on {len(a.linears)} projection(s) per layer{copies}: "
            f"{trainable / 1e6:,.1f}M trainable ({100 * trainable / plan.parameters:.2f}%), "
            f"fp32 with gradients and optimizer state; frozen base stored at {stored}")
    lines = [line]
    if a.method == "qlora" and plan.job.layout.fsdp_version == 1:
        lines.append("note: the engine trains QLoRA under FSDP2 only (FS312)")
    return lines


def _preference_lines(plan: Plan, unit: int, name: str) -> list[str]:
    """A DPO job: two sequences per pair, and its reference choices side by side."""
    if not plan.references:
        return []
    own = plan.spec.train.dpo.reference
    sides = [f"{choice}{' (this job)' if choice == own else ''} "
             f"{m.peak_allocated / unit:.2f} / {m.total / unit:.2f}"
             for choice, m in plan.references.items()]
    lines = [f"DPO: each pair runs as 2 sequences (chosen, rejected); by reference, "
             f"peak allocated / device total per rank ({name}): " + ", ".join(sides)]
    per_pair = plan.precompute_seconds_per_pair
    if per_pair is not None:
        pairs = plan.spec.train.max_steps * plan.spec.data.global_batch_size
        taken = _duration(pairs * per_pair / 3600)
        lines.append(f"precompute pass (before step 1, once; a resume reads it back): "
                     f"{1000 * per_pair:.2f} s per 1,000 pairs, {taken} for "
                     f"the {pairs:,} pairs train.max_steps × global batch reads; it reads "
                     "every pair of the train and eval data")
    return lines


def _preference_json(plan: Plan) -> dict[str, Any] | None:
    if not plan.references:
        return None
    per_pair = plan.precompute_seconds_per_pair
    return {"reference": plan.spec.train.dpo.reference, "sequences_per_pair": 2,
            "precompute_seconds_per_pair": per_pair,
            "by_reference": {choice: {"peak_allocated_bytes": m.peak_allocated,
                                      "total_bytes": m.total,
                                      "reference_bytes": m.peak.terms["reference_parameters"],
                                      "fits": m.total <= plan.capacity}
                             for choice, m in plan.references.items()}}


def _float8_lines(plan: Plan) -> list[str]:
    """What float8 converts, how its weights are gathered, and the rate it runs at."""
    f8 = plan.job.float8
    if f8 is None:
        return []
    fp8 = plan.accelerator.fp8_tflops
    rate = (f"at the FP8 peak ({fp8:,.0f} TFLOP/s)" if fp8
            else f"at the bf16 rate ({plan.accelerator.name} has no FP8 tensor cores)")
    gather = "float8" if f8.all_gather else plan.spec.fsdp.mixed_precision.param_dtype
    return [f"float8 {f8.recipe}: {sum(n for _, _, n in f8.linears)} Linear modules, "
            f"{_count(f8.numel)} weights, matmuls {rate}, all-gathered in {gather}"]


def plan_text(plan: Plan, budget: Budget | None = None, scaling: Scaling | None = None) -> str:
    """The table `fsdpspec plan` prints (with the budget and scaling lines after the
    predicted step when given)."""
    w, batch = plan.job.layout, plan.job.batch
    layout = "as DDP" if w.ddp else f"over {w.shard_size}"
    if w.dims.cp_enabled:
        layout += (f" (dp_shard {w.dims.dp_shard} × cp {w.dims.cp}; each rank holds "
                   f"{batch.local_seq} tokens of a sequence)")
    if w.dims.tp_enabled:
        layout += f" × tensor parallel {w.dims.tp}"
    head = [f"{plan.spec.metadata.name}: {_parameters(plan)}, "
            f"{w.world_size} × {plan.accelerator.name}, {w.written_strategy} {layout}, "
            f"micro-batch {batch.micro} × {batch.seq}, "
            f"{batch.accumulation} accumulation step(s)",
            *_adapter_lines(plan), *_float8_lines(plan)]
    unit, name = _unit(plan)
    head += [*_preference_lines(plan, unit, name),
             f"per-rank device memory at its peak ({plan.device.peak.name}):"]
    host = ["host memory per node (GiB):"]
    host += [f"  {k.replace('_', ' '):<28}{amount(v, GIB)}"
             for k, v in plan.host.terms.items() if v]
    lines = (head + _device_rows(plan, unit, name) + host + _verdict(plan, unit, name)
             + _compute_lines(plan) + [step_line(plan)] + budget_lines(plan, budget, scaling))
    if plan.suggestions:
        lines.append("cheapest changes, by memory saved:")
        lines += [f"  --set {s.override:<40} saves {s.saves_bytes / unit:7.2f} {name}"
                  f"{'  (fits)' if s.fits else ''}  {s.description}" for s in plan.suggestions]
    return "\n".join(lines + _fitting_lines(plan, unit, name)) + "\n"


def _fitting_lines(plan: Plan, unit: int, name: str) -> list[str]:
    """The cheapest combination of levers that fits on the spec's GPUs, as --set lines."""
    fit = plan.fitting_levers
    if fit is None:
        return []
    gpus = f"{plan.job.layout.world_size} {plan.accelerator.name}"
    return [f"fits on {gpus} with (device total {fit.device_total / unit:.1f} {name}, "
            f"saves {fit.saves_bytes / unit:.2f} {name}, costs "
            f"{fit.extra_seconds:+.3f} s per step):",
            *[f"  --set {o}" for o in fit.overrides]]


def _duration(hours: float) -> str:
    """Hours, or minutes or seconds when under one."""
    if hours >= 1:
        return f"{hours:,.1f} h"
    return f"{60 * hours:.1f} min" if hours * 60 >= 1 else f"{3600 * hours:.1f} s"


def _amount(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def budget_lines(plan: Plan, budget: Budget | None, scaling: Scaling | None) -> list[str]:
    """Time, GPU-hours and cost of the token budget at the model's band; where scaling
    stops paying."""
    unit, units = ("GPU", "GPUs") if plan.accelerator.is_gpu else ("process", "processes")
    lines = []
    if plan.step is None:
        lines.append("budget: unknown (no predicted step: set resources.accelerator.bf16_tflops)")
    if budget is not None:
        hours, gpu_hours = budget.hours, budget.gpu_hours
        (fast, slow), (low, high) = budget.band(hours), budget.band(gpu_hours)
        line = (f"budget: {_count(budget.tokens)} tokens ({budget.tokens_from}) on "
                f"{budget.gpus} {units} at {budget.tokens_per_s:,.0f} tokens/s: "
                f"{_duration(hours)} ({_duration(fast)} to {_duration(slow)}), "
                f"{_amount(gpu_hours)} {unit}-hours ({_amount(low)} to {_amount(high)})")
        if budget.cost is not None:
            low, high = budget.band(budget.cost)
            line += (f", cost {_amount(budget.cost)} at {budget.price_per_gpu_hour:,.2f} per "
                     f"{unit}-hour ({_amount(low)} to {_amount(high)})")
        lines.append(line + f"; ranges: the step-time model's ±{100 * STEP_TIME_BAND:.0f}% "
                     "on tokens/s")
    if scaling is not None:
        line = (f"scaling: tokens/s per {unit} stays within {100 * SCALING_LOSS:.0f}% of "
                f"{scaling.start} {units}' {scaling.start_rate:,.0f} up to "
                f"{scaling.holds_to:,} {units} ({scaling.holds_rate:,.0f})")
        if scaling.past is None:
            line += ", the end of the scan"
        else:
            count, rate = scaling.past
            line += (f"; past it, {count:,} {units}: {rate:,.0f} "
                     f"({100 * (rate / scaling.start_rate - 1):+.1f}%)")
        lines.append(line)
    return lines


def budget_json(budget: Budget | None, scaling: Scaling | None) -> dict[str, Any]:
    """The same as `budget_lines`, as the documented JSON keys."""
    data: dict[str, Any] = {"budget": None, "scaling": None}
    if budget is not None:
        cost = budget.cost
        data["budget"] = {
            "tokens": budget.tokens, "tokens_from": budget.tokens_from, "gpus": budget.gpus,
            "tokens_per_s": budget.tokens_per_s, "band": STEP_TIME_BAND,
            "hours": budget.hours, "hours_range": list(budget.band(budget.hours)),
            "gpu_hours": budget.gpu_hours,
            "gpu_hours_range": list(budget.band(budget.gpu_hours)),
            "price_per_gpu_hour": budget.price_per_gpu_hour, "cost": cost,
            "cost_range": None if cost is None else list(budget.band(cost))}
    if scaling is not None:
        data["scaling"] = {
            "loss": SCALING_LOSS, "start_gpus": scaling.start,
            "start_tokens_per_s_per_device": scaling.start_rate,
            "holds_to_gpus": scaling.holds_to,
            "holds_tokens_per_s_per_device": scaling.holds_rate,
            "past": None if scaling.past is None else {
                "gpus": scaling.past[0], "tokens_per_s_per_device": scaling.past[1]}}
    return data
