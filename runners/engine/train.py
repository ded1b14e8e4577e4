"""Entry point: read the resolved spec, set up, train, tear down.

Anticipated failures (``EngineError``) print one line on rank 0 and exit 1; a clean
finish, or a stop by SIGTERM / SIGINT after checkpointing, exits 0 (a stop is told to
`fsdpspec run` through ``fsdpspec.runfiles.outcome``).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.device_mesh import DeviceMesh

from fsdpspec.job.job import Job
from fsdpspec.job.units import Units
from fsdpspec.jsonfile import JsonFileError
from fsdpspec.runfiles.events import append_event
from fsdpspec.runfiles.outcome import tell_stopped
from fsdpspec.runfiles.resolved import read_resolved_job
from fsdpspec.spec.v1 import JobSpec
from fsdpspec_runners.engine import faults
from fsdpspec_runners.engine.checkpoint import (
    TrainState,
    choose_resume_checkpoint,
    load_checkpoint,
)
from fsdpspec_runners.engine.data import Batches, SequenceSource
from fsdpspec_runners.engine.datasource import as_data_error, dataset_sources
from fsdpspec_runners.engine.dist import (
    Runtime,
    console,
    fail_together,
    first_to_fail,
    init_runtime,
    teardown,
)
from fsdpspec_runners.engine.errors import EngineError, first_line
from fsdpspec_runners.engine.expert_parallel import check_expert_parallel
from fsdpspec_runners.engine.float8 import float8_summary
from fsdpspec_runners.engine.loop import Trainer, export_final, train
from fsdpspec_runners.engine.lora import is_quantised
from fsdpspec_runners.engine.mesh import build_mesh, cp_mesh, expert_meshes, fsdp_mesh
from fsdpspec_runners.engine.metrics import (
    MetricsSink,
    flops_per_token,
    peak_tflops,
)
from fsdpspec_runners.engine.model_build import build_model, load_weights, materialise
from fsdpspec_runners.engine.optim import build_grad_scaler, build_optimizer, build_scheduler
from fsdpspec_runners.engine.preference import (
    Preference,
    as_reference,
    build_objective,
    freeze,
    holds_frozen_copy,
    precompute,
    reference_note,
)
from fsdpspec_runners.engine.signals import StopRequest
from fsdpspec_runners.engine.tensor_parallel import tensor_parallel_plan
from fsdpspec_runners.engine.wrap import DDP_BUCKET_MB, fsdp1_syncs_states, parallelize


def build_fsdp_model(job: Job, runtime: Runtime, world: DeviceMesh | None = None, *,
                     describe: bool = True, reference: bool = False) -> torch.nn.Module:
    """The model, checkpointed, sharded and initialised (or loaded) as the job says, on
    the ``world`` mesh (built here when not given); ``describe`` says how, on rank 0;
    ``reference``: DPO's frozen copy (`as_reference`)."""
    spec = job.spec
    dims = job.layout.dims
    if dims.tp_enabled:
        tensor_parallel_plan(job)  # what it cannot split fails here, before any collective
    check_expert_parallel(job)
    world = world or build_mesh(dims, runtime.device.type)
    mesh = fsdp_mesh(world, dims)
    if job.layout.fsdp_version == 2:
        meta = build_model(job, on_meta=True)
        model, units = parallelize(as_reference(meta, job) if reference else meta, job, mesh,
                                   runtime.device,
                                   tp_mesh=world["tp"] if dims.tp_enabled else None,
                                   expert_meshes=expert_meshes(world, dims))
        if describe:
            _describe(job, runtime, units, model, sum(map(is_quantised, model.parameters())))
        materialise(model, runtime.device, spec.train.seed)
        if spec.model.weights:
            load_weights(model, spec, runtime, sharded=True)
        return model
    # FSDP1 shards a built model: rank 0 holds it and the others start on meta when
    # FSDP1 can broadcast (GPU); on the CPU every rank builds the same seeded model.
    on_meta = (
        fsdp1_syncs_states(spec.fsdp.sync_module_states, runtime.device)
        and spec.fsdp.cpu_ram_efficient_loading
        and not runtime.is_main
    )
    model = build_model(job, on_meta=on_meta)
    if spec.model.weights:
        load_weights(model, spec, runtime, sharded=False)
    model, units = parallelize(model, job, mesh, runtime.device)
    if describe:
        _describe(job, runtime, units, model)
    return model


def _describe(job: Job, runtime: Runtime, units: Units, model: torch.nn.Module,
              quantised: int = 0) -> None:
    lay = job.layout
    wrapped = (f"as DDP ({DDP_BUCKET_MB} MiB buckets)" if lay.ddp
               else f"{len(list(units.names()))} units + root "
                    f"({job.spec.fsdp.auto_wrap_policy} policy)")
    # The strategy that runs (FSDP1's hybrid groups of one rank run NO_SHARD), and the
    # named mesh it runs over.
    dims = lay.dims
    written = (f" (written {dims.written_strategy})"
               if dims.written_strategy != dims.strategy else "")
    mesh = " × ".join(f"{name} {size}" for name, size in
                      zip(dims.mesh_names, dims.mesh_shape, strict=True))
    if dims.ep_enabled:  # the experts' sparse mesh
        mesh += ", experts " + " × ".join(f"{name} {size}" for name, size in zip(
            dims.sparse_mesh_names, dims.sparse_mesh_shape, strict=True))
    console(
        runtime,
        f"fsdp{lay.fsdp_version} {dims.strategy}{written}: {wrapped}, mesh {mesh}, "
        f"activation checkpointing {units.ac_mode}, "
        f"params {job.spec.fsdp.mixed_precision.param_dtype}, {runtime.world_size} processes on "
        f"{runtime.device.type}" + (f", QLoRA: {quantised} base weights in 4-bit NF4"
                                    if quantised else "") + float8_summary(model, job),
    )


def _open_sink(spec: JobSpec, run_dir: Path, runtime: Runtime, step: int) -> MetricsSink:
    """Rank 0 opens the run's outputs (trackers may fail to start); every rank learns
    whether it could, so none is left waiting in a collective for a rank that stopped."""
    failure = None
    try:
        sink = MetricsSink(spec, run_dir, runtime.is_main, resumed_step=step)
    except EngineError as exc:
        failure = exc
    fail_together(failure, runtime, "rank 0 could not open the run's outputs")
    return sink


def build_trainer(job: Job, run_dir: Path, runtime: Runtime) -> Trainer:
    """Model, optimizer, schedule, data, and the state resumed from a checkpoint."""
    spec = job.spec
    world = build_mesh(job.layout.dims, runtime.device.type)
    model = build_fsdp_model(job, runtime, world)
    preference = _preference(job, runtime, world)
    torch.manual_seed(spec.train.seed)
    # Frozen parameters (the base of a LoRA) have no gradient and take no optimizer state.
    optimizer = build_optimizer([p for p in model.parameters() if p.requires_grad],
                                spec.optimizer)
    vocab_size = job.config["vocab_size"] if job.config else None
    source, eval_sequences = _data_sources(spec, vocab_size, run_dir, runtime)
    if spec.train.objective == "dpo" and spec.train.dpo.reference == "precomputed":
        # Before a checkpoint is loaded: the model still holds the starting weights.
        precompute(model, {"train": source.sequences, "eval": eval_sequences}, spec,
                   job.batch, job.layout.dims, run_dir, runtime)
    batches = Batches(source, job.batch, job.layout.dims.dp_rank(runtime.rank))
    state = TrainState(model, optimizer, build_scheduler(optimizer, spec), batches,
                       trainable_only=spec.peft is not None)
    resume_from = choose_resume_checkpoint(spec.checkpoint.resume, run_dir, runtime)
    if resume_from is not None:
        load_checkpoint(state, resume_from, runtime)
        console(runtime, f"resumed from {resume_from} (step {state.step})")
    sink = _open_sink(spec, run_dir, runtime, state.step)
    sink.started(state.step, runtime.world_size, resume_from)
    return Trainer(
        job=job,
        runtime=runtime,
        run_dir=run_dir,
        state=state,
        scaler=build_grad_scaler(spec, runtime.device),
        stop=StopRequest().install(),
        sink=sink,
        flops_per_token=flops_per_token(model, job),
        peak_flops=peak_tflops(spec) * 1e12,
        eval_sequences=eval_sequences,
        cp_mesh=cp_mesh(world, job.layout.dims),
        preference=preference,
    )


def _preference(job: Job, runtime: Runtime, world: DeviceMesh) -> Preference | None:
    """The DPO objective, with its frozen copy when the reference is the model."""
    spec = job.spec
    if spec.train.objective != "dpo":
        return None
    console(runtime, reference_note(spec))
    frozen = (freeze(build_fsdp_model(job, runtime, world, describe=False, reference=True))
              if holds_frozen_copy(spec) else None)
    return build_objective(spec, frozen)


def _data_sources(spec: JobSpec, vocab_size: int | None, run_dir: Path,
                  runtime: Runtime) -> tuple[Any, Any]:
    """The training source and the evaluation sequences; any failure of the data, the
    tokenizer or the template is one EngineError line."""
    try:
        if spec.data.source == "dataset":
            return dataset_sources(spec.data, vocab_size, spec.train.seed, run_dir, runtime)
        return SequenceSource(spec.data, vocab_size, spec.train.seed), None
    except Exception as exc:
        raise as_data_error(exc) from None


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m fsdpspec_runners.engine", description=__doc__)
    parser.add_argument("--spec", required=True, type=Path, help="RUN_DIR/resolved-spec.json")
    return parser.parse_args(argv)


def _read_job(path: Path) -> tuple[Job, Path]:
    """The job the launcher resolved and recorded: every rank runs it, none resolves it
    again."""
    try:
        return read_resolved_job(path)
    except JsonFileError as exc:
        raise EngineError(exc.coded()) from None


def _cause(exc: BaseException) -> str:
    """One line naming the cause of a failure a user can provoke."""
    if isinstance(exc, CheckpointException) and exc.failures:
        rank, (inner, _trace) = next(iter(exc.failures.items()))
        return f"checkpoint on rank {rank}: {_cause(inner)}"
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return first_line(exc)


def _report(runtime: Runtime | None, exc: BaseException) -> str:
    """One line for the job's failure, from the first rank that saw it (see
    first_to_fail): the others are mostly waiting in a collective, or already killed.
    Returns the message."""
    message = str(exc) if isinstance(exc, EngineError) else _cause(exc)
    if isinstance(exc, torch.OutOfMemoryError):
        message = (f"out of device memory: {first_line(exc)}; lower data.micro_batch_size, "
                   "or turn on fsdp.activation_checkpointing or fsdp.cpu_offload "
                   "(`fsdpspec plan` shows the terms)")
    if runtime is None or first_to_fail():
        # No rank in the line: ranks that fail together (a non-finite norm is all-reduced)
        # race for the store, and the cause reads the same from each.
        print(f"fsdpspec engine: error: {message}", file=sys.stderr, flush=True)
    return message


def main(argv: list[str] | None = None) -> int:
    """Run one training job; returns the process exit status."""
    args = _parse_args(argv)
    runtime: Runtime | None = None
    run_dir: Path | None = None
    clean = False
    try:
        faults.injected()  # a bad test setting: one line before anything starts
        job, run_dir = _read_job(args.spec)
        runtime = init_runtime(job)
        trainer = build_trainer(job, run_dir, runtime)
        try:
            finished = train(trainer)
        finally:
            trainer.sink.close()
        teardown(clean=True)  # every rank is done with collectives
        if finished:
            export_final(trainer)
        elif runtime.local_rank == 0:
            tell_stopped(trainer.stop.signal_name)
        clean = True
        return 0
    except (EngineError, torch.OutOfMemoryError, OSError, CheckpointException) as exc:
        message = _report(runtime, exc)  # OSError: a full disk, an unreadable file…
        if run_dir is not None and runtime is not None and runtime.is_main:
            try:
                append_event(run_dir, "end", outcome="failed", message=message)
            except OSError:  # the failure may be that very file; it is reported above
                pass
        return 1
    except KeyboardInterrupt:  # Ctrl-C before the stop handler is installed: nothing to save
        return 128 + signal.SIGINT  # silently: `fsdpspec run` says what stopped and what is kept
    finally:
        teardown(clean=clean)
