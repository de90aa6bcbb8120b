"""run_in_chunks: chunking does not change the result, and Ctrl-C keeps finished chunks."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from jaxcomm import runner


def step(state, data):
    """A counter and a running sum: easy to check by hand."""
    count, total = state
    return (count + 1, total + data * count), count


@pytest.mark.parametrize("scan", [True, False], ids=["scan", "dispatch"])
@pytest.mark.parametrize("chunk_size", [1, 3, 10, 50])
def test_any_chunking_gives_the_same_state(chunk_size, scan):
    result = runner.run_in_chunks(step, (jnp.int32(0), jnp.float32(0)), jnp.float32(2.0), num_steps=10,
                                  chunk_size=chunk_size, progress=False, scan=scan)
    assert result.steps_done == 10 and not result.interrupted
    assert int(result.state[0]) == 10
    assert float(result.state[1]) == 2.0 * sum(range(10))  # 90


@pytest.mark.parametrize("scan", [True, False], ids=["scan", "dispatch"])
def test_interrupt_keeps_completed_chunks(scan):
    seen = []

    def on_chunk(done, state, infos):
        seen.append((done, infos.tolist()))
        if done == 8:
            raise KeyboardInterrupt

    result = runner.run_in_chunks(step, (jnp.int32(0), jnp.float32(0)), jnp.float32(1.0), num_steps=20,
                                  chunk_size=4, on_chunk=on_chunk, progress=False, scan=scan)
    # The chunk whose on_chunk was interrupted is not kept: state and records stay in step.
    assert result.interrupted and result.steps_done == 4 and int(result.state[0]) == 4
    assert seen == [(4, [0, 1, 2, 3]), (8, [4, 5, 6, 7])]


def test_bad_arguments():
    with pytest.raises(ValueError, match="chunk_size >= 1"):
        runner.run_in_chunks(step, (0, 0.0), 1.0, num_steps=5, chunk_size=0, progress=False)
