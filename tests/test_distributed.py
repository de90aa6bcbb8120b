"""Two processes joined by jax.distributed train the same network as one process does."""

from __future__ import annotations

from experiments import distributed


def test_two_processes_match_single_process():
    result = distributed.compare(distributed.parse(["--processes", "2", "--devices-per-process", "2",
                                                    "--nodes", "4", "--steps", "20"]))
    assert result["processes"] == 2 and result["global_devices"] == 4
    assert result["matches_single_process"], result
    assert result["avg_accuracy"]["sharded"] == result["avg_accuracy"]["single"]
