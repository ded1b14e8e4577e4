"""Run by tests/test_warm_ranks.py as torchrun runs a rank script: says how it started
(forked warm or cold, with what directory, arguments, environment and path), then ends
as argv asks: ``exit N``, ``signal NAME`` or ``sleep``."""

import json
import os
import signal
import sys
import time

print(json.dumps({
    "pid": os.getpid(), "warm": "fsdpspec_runners.engine.train" in sys.modules,
    "cwd": os.getcwd(), "argv": sys.argv, "path0": sys.path[0],
    "probe": os.environ.get("FSDPSPEC_TEST_PROBE"), "stdin": sys.stdin.readline().strip(),
}), flush=True)
print("to stderr", file=sys.stderr, flush=True)
how, what = sys.argv[1:3]
if how == "exit":
    sys.exit(int(what))
if how == "signal":
    os.kill(os.getpid(), getattr(signal, what))
time.sleep(float(what))
