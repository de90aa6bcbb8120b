"""Each experiment's report: its tables, plots and generated reading, drawn from a run's ``summary.json`` and
curves (``python experiments/<name>.py report DIR`` calls them). Kept apart from the experiments' configs and runs so
an experiment file holds its presets, ``run`` and command line only."""
