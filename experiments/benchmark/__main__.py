"""``python -m experiments.benchmark`` (from the repository root): the benchmark's command line,
:func:`.run.main`."""

import os
import signal
import sys

if __name__ == "__main__":
    # A time limit's SIGTERM (or a Ctrl-C) may come while JAX still imports: held here, it stops the suite as soon
    # as the suite's own handlers are in place, so the summary is still written.
    held: list[int] = []
    for received in (signal.SIGINT, signal.SIGTERM):
        signal.signal(received, lambda signum, frame: held.append(signum))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # The parent's JAX would take 75 % of a GPU's memory before any row's process starts: allocate on demand.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    # The sweep arms build networks with backend="auto": timing the candidates in the first arm and reading the
    # cache in the second would be unfair; the rows time every pair themselves.
    os.environ.setdefault("JAXCOMM_AUTOTUNE", "0")
    from .run import main

    sys.exit(main(held=held))
