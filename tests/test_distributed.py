"""Two processes joined by jax.distributed train the same network as one process does, and resume it from
their checkpoints bit for bit."""

from __future__ import annotations

from experiments import distributed


def test_a_preempted_multi_process_run_resumes_bit_identically_and_matches_one_process():
    # 2 processes x 4 CPU devices each write their own shards; the last checkpoint is deleted (the hosts died
    # before it was written) and new processes resume from the half-way one. The whole run also equals the same
    # network trained by one process on one device. (One test: each launch of processes costs half a minute.)
    result = distributed.preemption(distributed.parse(["--preemption", "--processes", "2",
                                                       "--devices-per-process", "4", "--nodes", "8",
                                                       "--steps", "10"]))
    assert result["processes"] == 2 and result["global_devices"] == 8
    assert result["deleted_checkpoints"] == [10] and result["resumed_from"] == 5
    assert result["arrays_identical"] and result["records_identical"], result["final"]
    assert result["matches_single_process"], result["max_abs_difference"]
    assert result["avg_accuracy"]["sharded"] == result["avg_accuracy"]["single"]
