"""Tools of the chapter-2 experiment's long runs (each ``python -m experiments.outputs_exchange.tools.NAME``)."""
