"""Two processes joined by jax.distributed train the same network as one process does, and resume it from
their checkpoints bit for bit."""

from __future__ import annotations

from experiments import distributed


def test_two_processes_match_single_process():
    result = distributed.compare(distributed.parse(["--processes", "2", "--devices-per-process", "2",
                                                    "--nodes", "4", "--steps", "20"]))
    assert result["processes"] == 2 and result["global_devices"] == 4
    assert result["matches_single_process"], result
    assert result["avg_accuracy"]["sharded"] == result["avg_accuracy"]["single"]


def test_a_preempted_multi_process_run_resumes_bit_identically():
    # 2 processes x 4 CPU devices each write their own shards; the last checkpoint is deleted (the hosts died
    # before it was written) and new processes resume from the half-way one.
    result = distributed.preemption(distributed.parse(["--preemption", "--processes", "2",
                                                       "--devices-per-process", "4", "--nodes", "8",
                                                       "--steps", "4"]))
    assert result["processes"] == 2 and result["global_devices"] == 8
    assert result["deleted_checkpoints"] == [4] and result["resumed_from"] == 2
    assert result["arrays_identical"] and result["records_identical"], result["final"]
