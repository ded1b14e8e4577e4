"""Process group, device and rank-0 console output.

The same code path runs on CPU (gloo) and GPU (nccl); only the device differs.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
import warnings
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from fsdpspec.job.job import Job
from fsdpspec_runners.engine.errors import EngineError


@dataclass(frozen=True)
class Runtime:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def choose_backend(requested: str) -> str:
    """``auto`` is nccl when CUDA is present, else gloo."""
    if requested == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    if requested == "nccl" and not torch.cuda.is_available():
        raise EngineError("launch.backend is nccl but no CUDA device is visible; use auto or gloo")
    return requested


def _default_single_process_env() -> None:
    """Let ``python -m fsdpspec_runners.engine`` run as one process without torchrun."""
    if "RANK" in os.environ:
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(
        RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )


def init_runtime(job: Job) -> Runtime:
    """Join the process group and pick this rank's device."""
    spec, world = job.spec, job.layout.world_size
    _default_single_process_env()
    backend = choose_backend(spec.launch.backend)
    local_rank = int(os.environ["LOCAL_RANK"])
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(
        backend=backend,
        timeout=timedelta(minutes=spec.launch.timeout_minutes),
        device_id=device if backend == "nccl" else None,
    )
    runtime = Runtime(dist.get_rank(), dist.get_world_size(), local_rank, device)
    if not runtime.is_main:
        warnings.simplefilter("ignore")  # library warnings once (rank 0), not N times
    if runtime.world_size != world:
        raise EngineError(
            f"the spec asks for {world} processes (resources.nodes × gpus_per_node) "
            f"but {runtime.world_size} were started"
        )
    return runtime


_FIRST_FAILURE_KEY = "fsdpspec/failures"


@functools.cache
def first_to_fail() -> bool:
    """Whether this rank is the job's first to fail, and so the one that says why. Counted
    in the process group's store, which every rank reaches: the reason is printed before
    torchrun kills the others, whichever rank saw it. Without a store, every rank says.
    Asked once per process (a process fails once): `fail_together` claims the place
    before the ranks learn of the failure, and the report later reads the same answer."""
    if not dist.is_initialized():
        return True
    try:
        store = dist.distributed_c10d._get_default_store()
        store.set_timeout(timedelta(seconds=10))
        return store.add(_FIRST_FAILURE_KEY, 1) == 1
    except Exception:  # the store went with its host: better twice than never
        return True


def teardown(*, clean: bool) -> None:
    """Leave the process group; safe to call on every exit path. After a clean finish
    the ranks first meet, so none tears down a connection a peer is still using."""
    if not dist.is_initialized():
        return
    if clean:
        dist.barrier()
    dist.destroy_process_group()


def leave(status: int) -> None:
    """Exit without C++ static destructors: once the process group is destroyed, a gloo
    thread torn down at interpreter exit can abort the process ("terminate called without
    an active exception", SIGABRT) and turn a finished run into a failed one."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def console(runtime: Runtime, message: str) -> None:
    """Print on rank 0 only, so N processes do not repeat every line."""
    if runtime.is_main:
        print(message, file=sys.stdout, flush=True)


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    """Sum a few floats over all ranks in one collective."""
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def all_reduce_max(values: list[float], device: torch.device) -> list[float]:
    """Maximum of a few floats over all ranks."""
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.tolist()


def fail_together(failure: EngineError | None, runtime: Runtime, elsewhere: str) -> None:
    """Raise on every rank if any rank failed (its own error here, ``elsewhere`` on the
    others), so no rank is left waiting in a collective for one that stopped. The failing
    rank claims the first failure before the others hear of it, so the line the user
    reads is its cause, not an echo of it."""
    if failure is not None:
        first_to_fail()
    (failed,) = all_reduce_max([float(failure is not None)], runtime.device)
    if failure is not None:
        raise failure
    if failed:
        raise EngineError(elsewhere)
