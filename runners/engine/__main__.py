"""``python -m fsdpspec_runners.engine --spec RUN_DIR/resolved-spec.json``."""

import os
import sys

from fsdpspec_runners.engine.train import main

status = main()
# Leave without C++ static destructors: once the process group is destroyed, a gloo
# thread torn down at interpreter exit can abort the process ("terminate called without
# an active exception", SIGABRT) and turn a finished run into a failed one.
sys.stdout.flush()
sys.stderr.flush()
os._exit(status)
