"""FS40x: checkpoints and the run directory."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

from fsdpspec.lint.registry import LintContext, diagnostic, rule
from fsdpspec.semantics import checkpoints_written
from fsdpspec.spec.diagnostics import Diagnostic, Severity


@rule("FS401", "no-checkpoint-in-run", Severity.WARNING,
      "checkpoint.interval_steps 0: the run writes no checkpoint",
      "set interval_steps > 0 (a checkpoint is also written at the last step)")
def no_checkpoint_in_run(ctx: LintContext) -> Iterator[Diagnostic]:
    """A checkpoint is written every `interval_steps` steps and at the last step. With
    `interval_steps: 0` none is written unless the run is stopped by a signal, so a
    crash or a preemption loses the whole run, and nothing can resume it. (An interval
    longer than the run is fine: the checkpoint at the last step is written.)

    FAIL:

        train: {max_steps: 100}
        checkpoint: {interval_steps: 0}

    PASS:

        train: {max_steps: 100}
        checkpoint: {interval_steps: 500}
    """
    checkpoint = ctx.spec.checkpoint
    if checkpoints_written(checkpoint.interval_steps, ctx.spec.train.max_steps) == 0:
        yield diagnostic("FS401", "interval_steps 0: no checkpoint is written unless a "
                         "signal stops the run", "/checkpoint/interval_steps")


@rule("FS402", "keep-last-zero", Severity.WARNING,
      "checkpoint.keep_last 0 keeps every checkpoint",
      "keep the few newest checkpoints, e.g. keep_last: 3")
def keep_last_zero(ctx: LintContext) -> Iterator[Diagnostic]:
    """`keep_last: 0` disables rotation: every checkpoint of the run stays on disk. A
    sharded checkpoint holds the parameters and the optimizer state (about 16 bytes per
    parameter with AdamW), so a long run fills the disk.

    FAIL:

        train: {max_steps: 1000}
        checkpoint: {interval_steps: 100, keep_last: 0}

    PASS:

        train: {max_steps: 1000}
        checkpoint: {interval_steps: 100, keep_last: 3}
    """
    checkpoint = ctx.spec.checkpoint
    count = checkpoints_written(checkpoint.interval_steps, ctx.spec.train.max_steps)
    # One checkpoint (the last step's) or none (FS401's case) leaves nothing to rotate.
    if checkpoint.keep_last == 0 and count > 1:
        yield diagnostic("FS402", f"keep_last 0 keeps all {count} checkpoints of the run",
                         "/checkpoint/keep_last")


@rule("FS403", "full-state-dict-multinode", Severity.WARNING,
      "FULL_STATE_DICT checkpoints on a multi-node job",
      "use state_dict_type: SHARDED_STATE_DICT (the final export still writes full weights)")
def full_state_dict_multinode(ctx: LintContext) -> Iterator[Diagnostic]:
    """A full state dict gathers every parameter and optimizer state to rank 0 at each
    checkpoint: across nodes that is slow, and it needs the whole model and optimizer
    in rank 0's host memory. Sharded (DCP) checkpoints write in parallel from every
    rank.

    FAIL:

        resources: {nodes: 2, gpus_per_node: 2}
        fsdp: {state_dict_type: FULL_STATE_DICT}
        launch: {rdzv_endpoint: "node-0:29500"}

    PASS:

        resources: {nodes: 2, gpus_per_node: 2}
        fsdp: {state_dict_type: SHARDED_STATE_DICT}
        launch: {rdzv_endpoint: "node-0:29500"}
    """
    spec = ctx.spec
    if spec.fsdp.state_dict_type == "FULL_STATE_DICT" and spec.resources.nodes > 1:
        yield diagnostic("FS403", f"FULL_STATE_DICT gathers every checkpoint to rank 0 "
                         f"across {spec.resources.nodes} nodes", "/fsdp/state_dict_type")


@rule("FS404", "run-dir-escapes", Severity.WARNING,
      "checkpoint.dir climbs out of the working directory with '..'",
      "use a path below the working directory, or an absolute path")
def run_dir_escapes(ctx: LintContext) -> Iterator[Diagnostic]:
    """The run directory is relative to the directory `fsdpspec` runs in. A `..` that
    climbs out of it puts checkpoints wherever the job happens to be launched from —
    another project's tree, or a directory the job cannot write. Say where runs go with
    an absolute path instead.

    FAIL:

        checkpoint: {dir: "../../runs/{name}"}

    PASS:

        checkpoint: {dir: "runs/{name}"}
    """
    value = ctx.spec.checkpoint.dir
    normal = posixpath.normpath(value.replace("\\", "/"))
    if not posixpath.isabs(normal) and normal.split("/")[0] == "..":
        yield diagnostic("FS404", f"checkpoint.dir {value!r} leaves the working directory",
                         "/checkpoint/dir")


@rule("FS405", "run-dir-shared", Severity.INFO,
      "checkpoint.dir without {name}: jobs can resume from each other's checkpoints",
      "include {name} in checkpoint.dir, e.g. runs/{name}")
def run_dir_shared(ctx: LintContext) -> Iterator[Diagnostic]:
    """With `resume: auto` a job resumes from the newest checkpoint in its run
    directory. A run directory that does not contain `{name}` is shared by every job
    whose spec names it, so one job can resume from another job's weights.

    FAIL:

        checkpoint: {dir: runs/latest}

    PASS:

        checkpoint: {dir: "runs/{name}"}
    """
    checkpoint = ctx.spec.checkpoint
    if "{name}" not in checkpoint.dir and checkpoint.resume == "auto":
        yield diagnostic("FS405", f"checkpoint.dir {checkpoint.dir!r} does not contain "
                         "{name}; resume: auto picks up any job's checkpoints there",
                         "/checkpoint/dir")


@rule("FS406", "restart-without-checkpoints", Severity.WARNING,
      "launch.max_restarts > 0 but a restart has no checkpoint to resume from",
      "set checkpoint.interval_steps > 0 and resume: auto")
def restart_without_checkpoints(ctx: LintContext) -> Iterator[Diagnostic]:
    """torchrun restarts the process group after a failure, and the engine resumes from
    the newest checkpoint. Without periodic checkpoints (`interval_steps: 0`) or with
    `resume: never`, every restart trains again from step 0.

    FAIL:

        checkpoint: {interval_steps: 0}
        launch: {max_restarts: 3}

    PASS:

        checkpoint: {interval_steps: 100}
        launch: {max_restarts: 3}
    """
    spec = ctx.spec
    if spec.launch.max_restarts == 0:
        return
    if spec.checkpoint.interval_steps == 0:
        yield diagnostic("FS406", "restarts start from step 0: interval_steps is 0",
                         "/checkpoint/interval_steps")
    elif spec.checkpoint.resume == "never":
        yield diagnostic("FS406", "restarts start from step 0: resume is never",
                         "/checkpoint/resume")
