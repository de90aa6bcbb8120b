"""One-off probes of the benchmark (each ``python -m experiments.benchmark.probes.NAME``); their outputs are under
``results/benchmark/``."""
