"""``python -m runners.engine --spec RUN_DIR/resolved-spec.json``."""

from runners.engine.train import main

raise SystemExit(main())
