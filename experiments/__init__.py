"""The thesis' experiments and the benchmarks, a package each: ``experiments/<name>/`` holds its presets, its run
and its report, and ``python -m experiments.<name> --preset cpu [...]`` runs it from the repository root
(``python -m experiments.<name> report DIR`` redraws a run's table)."""
