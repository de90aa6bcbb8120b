"""``python -m experiments.chapter2_recipe`` (from the repository root):
the experiment's command line, :func:`.run.main`."""

import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
