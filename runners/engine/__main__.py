"""``python -m fsdpspec_runners.engine --spec RUN_DIR/resolved-spec.json``."""

import os
import signal

try:
    from fsdpspec_runners.engine.dist import leave
    from fsdpspec_runners.engine.train import main
except KeyboardInterrupt:  # Ctrl-C while torch loads: nothing to save; `fsdpspec run` says so
    os._exit(128 + signal.SIGINT)

leave(main())
