"""Run under torchrun by engine_jobs.torchrun_jobs: several engine jobs in one launch.

argv: OUT_DIR SPEC... [--probe (TRAINED_SPEC WEIGHTS_SPEC)...]. Each job is the engine's
own ``main`` (it joins the process group, trains, exports and leaves it), one after
another in the same processes, so each process imports torch and transformers once for
all of them: that import, not the training, is most of a tiny job's cost (about 4 CPU-s
a process). Rank 0's output of job i goes to OUT_DIR/i.out and its exit status to
OUT_DIR/i.status. A failed job ends the launch, so that torchrun stops the other ranks
(they may be waiting in a collective). After the jobs, the pairs after ``--probe`` are
probed (engine_logits_probe.py) in the same processes.

Each job meets at a store of its own (rank 0 hosts it, on a port it tells the others
through torchrun's store): torchrun's store keeps the keys of the previous job's process
group, under the names the next one would use. The jobs of one launch share one mesh
shape: DTensor keeps what it derived from a mesh past that mesh's process group, so a
job on another shape after a TP job fails on the first job's destroyed groups
("Could not resolve the process group registered under the name 4").
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from datetime import timedelta
from pathlib import Path

from engine_logits_probe import probe
from torch.distributed import TCPStore

from fsdpspec_runners.engine.dist import leave
from fsdpspec_runners.engine.train import main

AGENT = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))


def meet_afresh(index: int) -> None:
    """Point this process's next process group at a new store, for job ``index``."""
    agent = TCPStore(*AGENT, is_master=False, timeout=timedelta(minutes=5))
    key = f"engine_batch/{index}/port"
    if os.environ["RANK"] == "0":
        with socket.socket() as sock:
            sock.bind((AGENT[0], 0))
            agent.set(key, str(sock.getsockname()[1]))
    os.environ.update(TORCHELASTIC_USE_AGENT_STORE="False", MASTER_PORT=agent.get(key).decode())


def run_one(spec: str, out: Path) -> int:
    rank0 = os.environ["RANK"] == "0"
    with open(out if rank0 else os.devnull, "w") as sink:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            status = main(["--spec", spec])
    if rank0:
        out.with_suffix(".status").write_text(f"{status}\n")
    return status


def run_all(out_dir: Path, args: list[str]) -> int:
    cut = args.index("--probe") if "--probe" in args else len(args)
    specs, pairs = args[:cut], args[cut + 1:]
    for index, spec in enumerate(specs):
        meet_afresh(index)
        status = run_one(spec, out_dir / f"{index}.out")
        if status != 0:
            return status
    if pairs:
        meet_afresh(len(specs))
        probe(out_dir, [Path(p) for p in pairs])
    return 0


if __name__ == "__main__":
    leave(run_all(Path(sys.argv[1]), sys.argv[2:]))
