"""torchrun without its closing traceback: what `fsdpspec run` starts.

When a worker fails, the engine has already printed one line saying why; stock torchrun
then raises ChildFailedError and Python prints a traceback and a failure table that
repeat it at length. This entry point runs the same torchrun (same arguments, same
code) and turns that ending into one line and the failed worker's exit code.
Only `fsdpspec run` starts it, as a child process; nothing imports it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from types import FrameType

from fsdpspec_runners.local.supervise import FORWARDED, children

try:
    from torch.distributed.elastic.multiprocessing import api as _api
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun
except KeyboardInterrupt:  # Ctrl-C while torch loads: nothing has started; `fsdpspec run` says so
    raise SystemExit(128 + signal.SIGINT) from None


# Exit codes of workers that stopped on a signal `fsdpspec run` forwarded, and report.
_STOPPED = {128 + signal.SIGINT, 128 + signal.SIGTERM}


def run(argv: list[str]) -> int:
    """torchrun's exit status for ``argv`` (its arguments, without the program)."""
    # Its per-worker log lines ("failed (exitcode: 1) local_rank: 0 …", "Sending process
    # … closing signal") repeat what the one line below says.
    logging.getLogger(_api.__name__).setLevel(logging.CRITICAL)
    try:
        torchrun(argv)
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        code = failure.exitcode if failure.exitcode > 0 else 128 - failure.exitcode
        if code in _STOPPED:  # stopped as asked (Ctrl-C, SIGTERM): `fsdpspec run` says so
            return code
        how = (f"exit code {failure.exitcode}" if failure.exitcode > 0
               else f"killed by {signal.Signals(-failure.exitcode).name}")
        print(f"torchrun: {len(exc.failures)} worker(s) failed; first: rank {rank}, {how}",
              file=sys.stderr)
        return code
    except SignalException as exc:  # signalled itself: it stopped its workers first
        print(f"torchrun: stopped by {exc.sigval.name}", file=sys.stderr)
        return 128 + exc.sigval.value
    return 0


_relayed = False  # whether a stop has reached workers of this torchrun


def _relay_to_workers(signum: int, _frame: FrameType | None) -> None:
    """Pass a stop on to the workers (they checkpoint and exit 0) and keep running, to
    the exit barrier too; before there are workers, stop at once (nothing to save)."""
    global _relayed
    workers = children(os.getpid())
    if not workers:
        if not _relayed:
            raise SystemExit(128 + signum)
        return
    _relayed = True
    relayed = signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM
    for pid in workers:
        try:
            os.kill(pid, relayed)
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    # A scheduler signals every process of a step, this one too (SIGTERM on requeue or
    # preemption, SIGUSR1 before a time limit). Stock torchrun dies of SIGTERM: it kills
    # its workers and skips the exit barrier, where the other nodes' torchrun then wait
    # (300 s) for it, and the job ends killed instead of stopped. So torchrun handles
    # only SIGQUIT itself; the stop signals reach the workers, which agree on the stop
    # with every node's, checkpoint and exit 0, and every torchrun ends normally.
    # A handler, not SIG_IGN: the workers would inherit an ignored signal.
    for stop in FORWARDED:
        signal.signal(stop, _relay_to_workers)
    raise SystemExit(run(["--signals-to-handle", "SIGQUIT", *sys.argv[1:]]))
