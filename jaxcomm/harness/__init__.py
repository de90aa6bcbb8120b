"""The experiment harness: command line, results envelope, report helpers.

Kept apart from the modules that train: research code importing :mod:`jaxcomm` for
training never pulls in flag parsing or plotting (``tests/test_harness.py`` checks).

- :mod:`jaxcomm.harness.cli`: ``--preset``, ``--out``, ``--resume``, ``field=value``;
  where runs go, the refusals that protect results and checkpoints, exit statuses.
- :mod:`jaxcomm.harness.results`: the ``summary.json`` envelope and curves beside it.
- :mod:`jaxcomm.harness.report`: table cells, ``table.md``, plots that may fail.
- :mod:`jaxcomm.harness.reports`: each experiment's tables, plots and generated reading.
- :mod:`jaxcomm.harness.frontier`: the bandwidth frontier two experiments share.
- :mod:`jaxcomm.harness.bench`: the benchmark's measurement machinery (rows, sweeps, scale).
"""
