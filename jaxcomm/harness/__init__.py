"""The experiment harness: command line, results envelope, report helpers.

Kept apart from the modules that train: research code importing :mod:`jaxcomm` for
training never pulls in flag parsing or plotting (``tests/test_harness.py`` checks).

- :mod:`jaxcomm.harness.cli`: ``--preset``, ``--out``, ``--resume``, ``field=value``;
  where runs go, the refusals that protect results and checkpoints, exit statuses.
- :mod:`jaxcomm.harness.results`: the ``summary.json`` envelope and curves beside it.
- :mod:`jaxcomm.harness.report`: table cells, ``table.md``, plots that may fail.
- :mod:`jaxcomm.harness.frontier`: the bandwidth frontier two experiments share (library API: research code
  calls ``frontier.run``).

Each experiment's config, run and report live beside the package, in ``experiments/<name>/``
(``python -m experiments.<name>`` from the repository root).
"""
