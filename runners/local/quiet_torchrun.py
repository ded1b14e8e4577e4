"""torchrun without its closing traceback: what `fsdpspec run` starts.

When a worker fails, the engine has already printed one line saying why; stock torchrun
then raises ChildFailedError and Python prints a traceback and a failure table that
repeat it at length. This entry point runs the same torchrun (same arguments, same
code) and turns that ending into one line and the failed worker's exit code.
Only `fsdpspec run` starts it, as a child process; nothing imports it.
"""

from __future__ import annotations

import logging
import signal
import sys

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


if __name__ == "__main__":
    # Slurm's warning (SIGUSR1) reaches every process of a step, this one too: the
    # workers checkpoint on it themselves, so torchrun must outlive it, not die of it.
    # A handler, not SIG_IGN: the workers would inherit an ignored signal.
    signal.signal(signal.SIGUSR1, lambda *_: None)
    raise SystemExit(run(sys.argv[1:]))
