"""The torchrun invocation of a job: the one argv every runner (local, Slurm, Kubernetes)
starts. Pure: a JobSpec and a run directory in, an argv list and an environment out.

The argv is a list handed to exec, never a shell string: spec values reach torchrun as
single arguments whatever characters they hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePath

from fsdpspec.runfiles.resolved import FILENAME
from fsdpspec.spec.v1 import JobSpec

ENGINE_MODULE = "fsdpspec_runners.engine"
TORCHRUN: tuple[str, ...] = ("torchrun",)


def engine_argv(run_dir: PurePath) -> list[str]:
    """The module torchrun starts in each process, and the one file it reads."""
    return ["-m", ENGINE_MODULE, "--spec", str(run_dir / FILENAME)]


def _rendezvous_args(spec: JobSpec, node_rank: int | None, endpoint: str | None,
                     rdzv_id: str | None) -> list[str]:
    nodes = spec.resources.nodes
    if nodes == 1:
        return ["--standalone", "--nnodes", "1"]
    endpoint = endpoint or spec.launch.rdzv_endpoint
    assert endpoint is not None, "validation (FS025) requires rdzv_endpoint when nodes > 1"
    args = ["--nnodes", str(nodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
            "--rdzv-id", rdzv_id or spec.metadata.name]
    if node_rank is not None:
        args += ["--node-rank", str(node_rank)]
    return args


def build_torchrun_argv(
    spec: JobSpec,
    run_dir: PurePath,
    *,
    node_rank: int | None = None,
    rdzv_endpoint: str | None = None,
    rdzv_id: str | None = None,
    launcher: Sequence[str] = TORCHRUN,
) -> list[str]:
    """torchrun's argv: `--standalone` on one node, c10d rendezvous on several.

    ``rdzv_endpoint`` replaces the spec's (Slurm learns its host only at run time);
    ``rdzv_id`` replaces the job name as the rendezvous id (Slurm's job id);
    ``launcher`` replaces the `torchrun` executable (`fsdpspec run` uses this Python's
    ``-m torch.distributed.run`` so the child is the installed torch, whatever PATH says).
    """
    return [
        *launcher,
        *_rendezvous_args(spec, node_rank, rdzv_endpoint, rdzv_id),
        "--nproc-per-node", str(spec.resources.gpus_per_node),
        "--max-restarts", str(spec.launch.max_restarts),
        *engine_argv(run_dir),
    ]


def spec_env(spec: JobSpec) -> dict[str, str]:
    """What every process gets from the spec, under every launcher: launch.env (its names
    are checked by the schema), plus what restarts need."""
    env = {}
    if spec.launch.max_restarts:
        # torchrun hands the workers its rendezvous store, whose keys outlive a restart:
        # the restarted group then reads the dead group's addresses and hangs in init
        # (pytorch/pytorch#135712). Opting out gives each restart a fresh store.
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    return env | spec.launch.env


def launch_env(
    spec: JobSpec, base: Mapping[str, str] | None = None, cpu_count: int | None = None
) -> dict[str, str]:
    """The processes' environment: ``base``, then defaults it lacks, then launch.env.

    On CPU each process gets an equal share of ``cpu_count`` threads (torchrun would
    otherwise force 1, or every process would spawn one thread per core and thrash).
    """
    env = dict(base or {})
    env.setdefault("PYTHONUNBUFFERED", "1")  # progress lines stream as they happen
    if cpu_count is not None and not spec.device().is_gpu:
        threads = max(1, cpu_count // spec.resources.gpus_per_node)
        env.setdefault("OMP_NUM_THREADS", str(threads))
    env.update(spec_env(spec))
    return env
