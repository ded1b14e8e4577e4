"""``python -m fsdpspec_runners.engine --spec RUN_DIR/resolved-spec.json``."""

import os
import signal
import sys

try:
    from fsdpspec_runners.engine.train import main
except KeyboardInterrupt:  # Ctrl-C while torch loads: nothing to save; `fsdpspec run` says so
    os._exit(128 + signal.SIGINT)

status = main()
# Leave without C++ static destructors: once the process group is destroyed, a gloo
# thread torn down at interpreter exit can abort the process ("terminate called without
# an active exception", SIGABRT) and turn a finished run into a failed one.
sys.stdout.flush()
sys.stderr.flush()
os._exit(status)
