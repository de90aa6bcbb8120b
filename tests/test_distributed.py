"""Two processes joined by jax.distributed train the same network as one process does."""

from __future__ import annotations

import importlib.util
import pathlib

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "experiments" / "distributed.py"


def test_two_processes_match_single_process():
    spec = importlib.util.spec_from_file_location("distributed", SCRIPT)
    distributed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(distributed)
    result = distributed.compare(distributed.parse(["--processes", "2", "--devices-per-process", "2",
                                                    "--nodes", "4", "--steps", "20"]))
    assert result["processes"] == 2 and result["global_devices"] == 4
    assert result["matches_single_process"], result
    assert result["avg_accuracy"]["sharded"] == result["avg_accuracy"]["single"]
