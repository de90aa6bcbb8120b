"""Issue 41's CPU probes against PyTorch (each ``python -m experiments.benchmark.vs_pytorch.NAME``); their outputs
are under ``results/benchmark/vs_pytorch/``."""
