"""``python -m experiments.peers`` (from the repository root): the benchmark's command line, :func:`.run.main`."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from .run import main

    sys.exit(main())
