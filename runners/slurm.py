"""`fsdpspec export slurm`: an sbatch script that runs `fsdpspec run` on every node.

Pure: JobSpec in, script text out. Each node's `fsdpspec run` gets the pre-flight
checks, the same-job check, the lock, signal relay and resume, exactly as by hand.
The job spec travels inside the script and is written at job start into the run
directory, relative to the directory the job was submitted from (the run root).

Preemption: `--signal=B:USR1@<grace>` warns the batch shell before the time limit; its
trap relays the signal (every node checkpoints and exits) and requeues the job, which
resumes. On `scancel` or `scontrol requeue` Slurm signals every process itself, so the
shell only waits for the checkpoint. A stop that reached some node's processes but not
the batch shell (a node's own stop, Slurm re-sending a lost node's terminate) stops
every node all the same (the ranks agree on it), and the script requeues the job.
Every value from the spec is quoted with shlex.quote; the script's own variables are
the only expansions.

The log is written to the submit directory (the run root), which exists when the job
starts: Slurm opens it before the script runs and fails the job when its directory is
missing, so plain `sbatch THIS_FILE` works on a fresh export.
"""

from __future__ import annotations

import json
import shlex

from fsdpspec import __version__
from fsdpspec.spec.v1 import JobSpec
from fsdpspec_runners.launch_error import LaunchError
from fsdpspec_runners.local.rundir_setup import SCHEDULER_DIR
from fsdpspec_runners.local.supervise import FORWARDED
from fsdpspec_runners.resources import node_cpus, node_memory_mib

# The relayed warning before a time limit.
WARNING_SIGNAL = "USR1"
# `fsdpspec run` exits 128 + N when the run stopped (checkpointed) on signal N.
STOPPED_STATUSES = tuple(sorted(128 + s for s in FORWARDED))
# Rendezvous ports: one per job id, below Linux's ephemeral range (32768 and up).
PORT_BASE = 16384


def time_limit_seconds(time: str) -> int:
    """launch.slurm.time in seconds, read as Slurm reads it: MM:SS and HH:MM:SS, or
    D-HH:MM and D-HH:MM:SS."""
    days, _, clock = time.rpartition("-")
    fields = [int(f) for f in clock.split(":")]
    padding = [0] * (3 - len(fields))
    hours, minutes, seconds = fields + padding if days else padding + fields
    return int(days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds


def log_name(spec: JobSpec) -> str:
    """The job's log in the submit directory, one per job id (a requeued job appends to
    its own): ``<name>-<job id>.out``. The name is [a-z0-9-]: no Slurm pattern in it."""
    return f"{spec.metadata.name}-%j.out"


def sbatch_directives(spec: JobSpec, grace_s: int) -> list[str]:
    """The #SBATCH lines: one task per node (`fsdpspec run` starts the processes)."""
    slurm, resources = spec.launch.slurm, spec.resources
    options = [("job-name", spec.metadata.name), ("nodes", str(resources.nodes)),
               ("ntasks-per-node", "1"), ("cpus-per-task", str(node_cpus(spec))),
               ("mem", f"{node_memory_mib(spec)}M")]
    if spec.device().is_gpu:
        options.append(("gpus-per-node", str(resources.gpus_per_node)))
    for field in ("partition", "account"):
        value = getattr(slurm, field)
        if value is not None:
            options.append((field, value))  # the schema admits only Slurm names
    options += [("time", slurm.time), ("output", log_name(spec)),
                ("error", log_name(spec)), ("open-mode", "append")]
    lines = [f"#SBATCH --{key}={shlex.quote(value)}" for key, value in options]
    if slurm.exclusive:
        lines.append("#SBATCH --exclusive")
    return [*lines, "#SBATCH --requeue", f"#SBATCH --signal=B:{WARNING_SIGNAL}@{grace_s}"]


def _srun(spec: JobSpec) -> list[str]:
    """srun's words: one task per node with the job's CPUs (srun does not inherit
    --cpus-per-task from sbatch in Slurm 22.05+), in the container when there is one."""
    words = ["srun", f"--nodes={spec.resources.nodes}", "--ntasks-per-node=1",
             f"--cpus-per-task={node_cpus(spec)}", "--kill-on-bad-exit=1"]
    if spec.launch.slurm.container:
        words += [shlex.quote(f"--container-image={spec.launch.slurm.container}"),
                  '--container-mounts="$PWD"', '--container-workdir="$PWD"']
    return words


def _launch(spec: JobSpec) -> list[str]:
    """The command every node runs, as script lines (started in the background)."""
    segments = [" ".join(_srun(spec)), '  fsdpspec run "$spec_file"']
    if spec.resources.nodes > 1:
        # Only the task knows its node: a fixed `bash -c` reads it; no spec value in it.
        # The records' directory comes as its first argument (this shell's variable).
        node_rank = shlex.quote('exits=$1; shift; exec "$@" --node-rank "$SLURM_NODEID" '
                                '--exit-record "$exits/$SLURM_NODEID"')
        segments[1:] = [f'  bash -c {node_rank} fsdpspec-node "$exits"',
                        "    fsdpspec run \"$spec_file\"",
                        f"    --nnodes {spec.resources.nodes}",
                        '    --rdzv-endpoint "$head_node:$port"', '    --rdzv-id "$SLURM_JOB_ID"']
    lines = [segment + " \\" for segment in segments[:-1]] + [segments[-1] + " &", "child=$!"]
    if spec.resources.nodes > 1:  # the single quotes are meant: the task's bash expands
        lines.insert(0, "# shellcheck disable=SC2016")
    return lines


def _rendezvous() -> list[str]:
    # No pipe into `head`: under pipefail its early exit would SIGPIPE scontrol.
    return ["# Rendezvous on the allocation's first node, on a port of this job's own.",
            'nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST")',
            "head_node=${nodes%%$'\\n'*}",
            f"port=$(({PORT_BASE} + SLURM_JOB_ID % {PORT_BASE}))", ""]


def _exit_records() -> list[str]:
    """Each node's own exit status (`fsdpspec run --exit-record`), one file a node, in
    the run directory every node shares; emptied for each start of the job."""
    return ["# Each node writes its own exit status here (srun reports only the highest).",
            f'exits="$run_dir/{SCHEDULER_DIR}/exits-$SLURM_JOB_ID"',
            'rm -rf -- "$exits"', 'mkdir -p -- "$exits"', ""]


def _node_failures(statuses: str) -> list[str]:
    """A node that failed on its own (a refusal, an error) makes srun stop the others
    (--kill-on-bad-exit) and report their 128 + SIGTERM: the job failed, and is not
    requeued. A node lost or signalled writes nothing or a stopped status."""
    return [
        "# A node that failed by itself: the others' stop was srun's; not requeued.",
        'for record in "$exits"/*; do',
        '  [ -f "$record" ] || continue',
        '  node_status=$(cat -- "$record")',
        f'  case "$node_status" in {statuses}) ;; *)',
        '    echo "fsdpspec: node ${record##*/} failed (exit $node_status); srun stopped '
        'the others; not requeued" >&2',
        '    exit "$node_status"',
        "  esac",
        "done",
    ]


def _supervision(spec: JobSpec) -> list[str]:
    statuses = "|".join(map(str, STOPPED_STATUSES))
    return [
        "",
        "# Wait for it; a trapped signal ends a wait early, so wait again while it runs.",
        "status=0",
        'wait "$child" || status=$?',
        'while kill -0 "$child" 2>/dev/null; do',
        '  status=0',
        '  wait "$child" || status=$?',
        "done",
        *(_node_failures(statuses) if spec.resources.nodes > 1 else []),
        "# Stopped with a checkpoint, and not by Slurm ending or requeueing the job itself:",
        "# rerun it, and it resumes.",
        f'case "$status" in {statuses})',
        '  if [ "$told" = 0 ]; then',
        '    if [ "$warned" = 1 ]; then',
        '      echo "fsdpspec: stopped ahead of the time limit; requeueing" >&2',
        "    else",
        '      echo "fsdpspec: stopped by a signal to a node (exit $status); requeueing" >&2',
        "    fi",
        '    scontrol requeue "$SLURM_JOB_ID"',
        "  fi",
        "esac",
        'exit "$status"',
    ]


def _traps() -> list[str]:
    return [
        "# The warning before the time limit: relay it (every node checkpoints and exits),",
        "# then requeue. On scancel, requeue or the time limit Slurm signals every process",
        "# itself and ends or requeues the job: TERM only tells this shell so, and it waits",
        "# for the checkpoint.",
        'warned=0 told=0 child=""',
        f"trap 'warned=1; kill -{WARNING_SIGNAL} \"$child\" 2>/dev/null || true' "
        f"{WARNING_SIGNAL}",
        "trap 'told=1' TERM",
        "",
    ]


def _setup(spec: JobSpec) -> list[str]:
    lines = spec.launch.slurm.setup
    if not lines:
        return []
    # Environment scripts (module, conda) often read unset variables.
    return ["# launch.slurm.setup, verbatim.", "set +u", *lines, "set -u", ""]


def check_time(spec: JobSpec, grace_s: int) -> None:
    """A job must train before its warning: the time limit has to exceed twice the
    grace period, or each run would be warned as it starts and requeue forever."""
    if time_limit_seconds(spec.launch.slurm.time) <= 2 * grace_s:
        raise LaunchError(f"launch.slurm.time {spec.launch.slurm.time} leaves no time to "
                          f"train: the job is warned {grace_s} s before its end to "
                          f"checkpoint; set at least {_clock(2 * grace_s + 60)}")


def _clock(seconds: int) -> str:
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def sbatch_script(spec: JobSpec, grace_s: int) -> str:
    """The whole script. ``grace_s``: how long before the time limit the job is warned
    (the planned checkpoint time, fsdpspec.plan.checkpoint)."""
    check_time(spec, grace_s)
    run_dir = shlex.quote(spec.run_dir())
    document = json.dumps(spec.as_written(), indent=2)
    lines = [
        "#!/bin/bash",
        f"# Generated by fsdpspec {__version__} for job {spec.metadata.name}.",
        "# Submit from the run root (checkpoint.dir is relative to it): `sbatch THIS_FILE`",
        f"# (or `bash THIS_FILE`, which calls sbatch). The log: {log_name(spec)} there.",
        *sbatch_directives(spec, grace_s),
        "set -euo pipefail",
        "",
        f"run_dir={run_dir}",
        'if [ -z "${SLURM_JOB_ID:-}" ]; then',
        '  exec sbatch "$0"',
        "fi",
        "",
        *_setup(spec),
        "# The job as its file wrote it. `fsdpspec run` checks it against the run",
        "# directory (the same job resumes, another is refused) and writes resolved-spec.json.",
        f'mkdir -p -- "$run_dir/{SCHEDULER_DIR}"',
        f'spec_file="$run_dir/{SCHEDULER_DIR}/job-$SLURM_JOB_ID.json"',
        f"printf '%s\\n' {shlex.quote(document)} > \"$spec_file.tmp\"",
        'mv -f -- "$spec_file.tmp" "$spec_file"',
        "",
        *(_rendezvous() + _exit_records() if spec.resources.nodes > 1 else []),
        *_traps(),
        "# One `fsdpspec run` per node; node 0 prepares the run directory, the others join.",
        *_launch(spec),
        *_supervision(spec),
    ]
    return "\n".join(lines) + "\n"

