"""Entry point: read the resolved spec, set up, train, tear down.

Anticipated failures (``EngineError``) print one line on rank 0 and exit 1; a clean
finish, or a stop by SIGTERM / SIGINT after checkpointing, exits 0.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import torch
from pydantic import ValidationError

from fsdpspec.spec.v1 import JobSpec
from fsdpspec_runners.engine.checkpoint import TrainState, find_resume_checkpoint, load_checkpoint
from fsdpspec_runners.engine.data import Batches, SequenceSource
from fsdpspec_runners.engine.datasource import dataset_sources
from fsdpspec_runners.engine.dist import Runtime, build_mesh, console, init_runtime, teardown
from fsdpspec_runners.engine.errors import EngineError, first_line
from fsdpspec_runners.engine.loop import Trainer, export_final, train
from fsdpspec_runners.engine.metrics import (
    MetricsSink,
    count_parameters,
    flops_per_token,
    peak_tflops,
)
from fsdpspec_runners.engine.model import build_model, load_weights, materialise, model_geometry
from fsdpspec_runners.engine.optim import build_grad_scaler, build_optimizer, build_scheduler
from fsdpspec_runners.engine.signals import StopRequest
from fsdpspec_runners.engine.wrap import (
    apply_activation_checkpointing,
    choose_units,
    compile_layers,
    find_layers,
    fsdp1_syncs_states,
    shard_fsdp2,
    wrap_fsdp1,
)
from fsdpspec_runners.local.resolved import read_resolved_spec


def build_fsdp_model(spec: JobSpec, runtime: Runtime) -> torch.nn.Module:
    """The model, checkpointed, sharded and initialised (or loaded) as the spec says."""
    if spec.fsdp.version == 2:
        model = build_model(spec, on_meta=True)
        layers = _prepare_layers(model, spec)
        units = choose_units(model, layers, spec.fsdp)
        _describe(spec, runtime, len(units))
        shard_fsdp2(model, units, spec.fsdp, build_mesh(spec, runtime), runtime.device)
        materialise(model, runtime.device, spec.train.seed)
        if spec.model.weights:
            load_weights(model, spec, runtime, sharded=True)
        return model
    # FSDP1 shards a built model: rank 0 holds it and the others start on meta when
    # FSDP1 can broadcast (GPU); on the CPU every rank builds the same seeded model.
    on_meta = (
        fsdp1_syncs_states(spec.fsdp, runtime.device)
        and spec.fsdp.cpu_ram_efficient_loading
        and not runtime.is_main
    )
    model = build_model(spec, on_meta=on_meta)
    if spec.model.weights:
        load_weights(model, spec, runtime, sharded=False)
    layers = _prepare_layers(model, spec)
    units = choose_units(model, layers, spec.fsdp)
    _describe(spec, runtime, len(units))
    return wrap_fsdp1(model, units, spec.fsdp, build_mesh(spec, runtime), runtime.device)


def _describe(spec: JobSpec, runtime: Runtime, num_units: int) -> None:
    fsdp = spec.fsdp
    console(
        runtime,
        f"fsdp{fsdp.version} {fsdp.sharding_strategy}: {num_units} units + root "
        f"({fsdp.auto_wrap_policy} policy), "
        f"activation checkpointing {fsdp.activation_checkpointing}, "
        f"params {fsdp.mixed_precision.param_dtype}, {runtime.world_size} processes on "
        f"{runtime.device.type}",
    )


def _prepare_layers(model: torch.nn.Module, spec: JobSpec) -> list[torch.nn.Module]:
    """Find the transformer layers, then checkpoint and compile them (before FSDP)."""
    layers = find_layers(model, spec, model_geometry(spec))
    layers = apply_activation_checkpointing(model, layers, spec.fsdp)
    if spec.train.compile:
        compile_layers(layers)
    return layers


def build_trainer(spec: JobSpec, run_dir: Path, runtime: Runtime) -> Trainer:
    """Model, optimizer, schedule, data, and the state resumed from a checkpoint."""
    geometry = model_geometry(spec)
    model = build_fsdp_model(spec, runtime)
    torch.manual_seed(spec.train.seed)
    optimizer = build_optimizer(model.parameters(), spec.optimizer)
    vocab_size = geometry["vocab_size"] if geometry else None
    if spec.data.source == "dataset":
        source, eval_sequences = dataset_sources(
            spec.data, vocab_size, spec.train.seed, run_dir, runtime
        )
    else:
        source, eval_sequences = SequenceSource(spec.data, vocab_size, spec.train.seed), None
    batches = Batches(source, spec.data, runtime.rank, runtime.world_size)
    state = TrainState(model, optimizer, build_scheduler(optimizer, spec), batches)
    resume_from = find_resume_checkpoint(spec.checkpoint.resume, run_dir)
    if resume_from is not None:
        full = spec.fsdp.state_dict_type == "FULL_STATE_DICT"
        load_checkpoint(state, resume_from, runtime, full_state_dict=full)
        console(runtime, f"resumed from {resume_from} (step {state.step})")
    return Trainer(
        spec=spec,
        runtime=runtime,
        run_dir=run_dir,
        state=state,
        scaler=build_grad_scaler(spec, runtime.device),
        stop=StopRequest().install(),
        sink=MetricsSink(spec, run_dir, runtime.is_main, resumed_step=state.step),
        flops_per_token=flops_per_token(
            count_parameters(model, geometry), geometry, spec.data.seq_len),
        peak_flops=peak_tflops(spec) * 1e12,
        eval_sequences=eval_sequences,
    )


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m fsdpspec_runners.engine", description=__doc__)
    parser.add_argument("--spec", required=True, type=Path, help="RUN_DIR/resolved-spec.json")
    return parser.parse_args(argv)


def _read_spec(path: Path) -> tuple[JobSpec, Path]:
    try:
        spec, run_dir, _ = read_resolved_spec(path)
    except OSError as exc:
        raise EngineError(f"cannot read {path}: {exc.strerror}") from None
    except (ValueError, KeyError, ValidationError) as exc:
        raise EngineError(f"{path} is not a resolved spec: {first_line(exc)}") from None
    return spec, run_dir


def _report(runtime: Runtime | None, exc: BaseException) -> None:
    """One line per failure: from rank 0, and from the first rank of every other node (a
    node-local path missing on node 2 must not fail in silence)."""
    if runtime is not None and runtime.local_rank != 0:
        return
    message = str(exc)
    if isinstance(exc, torch.OutOfMemoryError):
        message = (f"out of device memory: {first_line(exc)}; lower data.micro_batch_size, "
                   "or turn on fsdp.activation_checkpointing or fsdp.cpu_offload "
                   "(`fsdpspec plan` shows the terms)")
    prefix = "" if runtime is None or runtime.is_main else f"rank {runtime.rank}: "
    print(f"fsdpspec engine: error: {prefix}{message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run one training job; returns the process exit status."""
    args = _parse_args(argv)
    runtime: Runtime | None = None
    clean = False
    try:
        spec, run_dir = _read_spec(args.spec)
        runtime = init_runtime(spec)
        trainer = build_trainer(spec, run_dir, runtime)
        try:
            finished = train(trainer)
        finally:
            trainer.sink.close()
        teardown(clean=True)  # every rank is done with collectives
        if finished:
            export_final(trainer)
        clean = True
        return 0
    except (EngineError, torch.OutOfMemoryError) as exc:
        _report(runtime, exc)
        return 1
    except KeyboardInterrupt:  # Ctrl-C before the stop handler is installed: nothing to save
        if runtime is None or runtime.is_main:
            print("fsdpspec engine: stopped during set-up", file=sys.stderr, flush=True)
        return 128 + signal.SIGINT
    finally:
        teardown(clean=clean)
