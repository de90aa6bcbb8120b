"""The driver: chunking never changes a run, trackers keep each member's best, losses are watched,
checkpoints resume bit-identically, and signals stop a run between steps."""

from __future__ import annotations

import os
import signal
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import driver
from jaxcomm.checkpoint import Checkpointer


def counter_system(step_loop: str = "scan", **kwargs) -> driver.System:
    """A counter and a running sum of ``data * count``: easy to check by hand."""

    def step(state, data):
        count, total = state
        return (count + 1, total + data * count), count

    evaluate = lambda state, infos, done: {"count": int(state[0]), "seen": np.asarray(infos).tolist()}
    return driver.System(lambda key: (jnp.int32(0), jnp.float32(0)), step, evaluate, step_loop=step_loop, **kwargs)


@pytest.mark.parametrize("step_loop", driver.STEP_LOOPS)
@pytest.mark.parametrize("eval_every", [1, 3, 10, 50])
def test_any_chunking_gives_the_same_state(eval_every, step_loop):
    result = driver.train(counter_system(step_loop), jnp.float32(2.0), num_steps=10, eval_every=eval_every,
                          key=jax.random.PRNGKey(0), progress=False)
    assert result["status"] == "complete" and result["steps_done"] == 10
    assert int(result["state"][0]) == 10 and float(result["state"][1]) == 2.0 * sum(range(10))  # 90
    assert [r["step"] for r in result["history"]] == list(range(eval_every, 10, eval_every)) + [10]
    assert sum((r["seen"] for r in result["history"]), []) == list(range(10))


@pytest.mark.parametrize("step_loop", driver.STEP_LOOPS)
def test_the_eager_and_dispatch_loops_hold_the_state_in_its_layout_within_a_chunk(step_loop):
    # The layout (the state held in a one-key dict here) wraps each chunk of the eager and dispatch loops, not a
    # scan's: their steps (the dispatched one jitted for the state so held) see the state apart, evaluations and
    # the result see it together, the run is unchanged.
    calls = []

    def apart(state):
        calls.append("apart")
        return {"apart": state}

    def together(held):
        calls.append("together")
        return held["apart"]

    system = counter_system(step_loop, layout=driver.Layout(apart, together))
    plain_step = system.step
    held_apart = step_loop in ("eager", "dispatch")

    def step(held, data):
        if held_apart:
            assert set(held) == {"apart"}
            state, info = plain_step(held["apart"], data)
            return {"apart": state}, info
        return plain_step(held, data)

    result = driver.train(system._replace(step=step), jnp.float32(2.0), num_steps=10, eval_every=4,
                          key=jax.random.PRNGKey(0), progress=False)
    assert float(result["state"][1]) == 90.0 and [r["count"] for r in result["history"]] == [4, 8, 10]
    assert calls == (["apart", "together"] * 3 if held_apart else [])

    def interrupted_step(held, data):  # a stop within the second chunk, while the state is held apart
        if int(held["apart"][0]) == 6:
            raise KeyboardInterrupt
        return step(held, data)

    if step_loop == "eager":  # (run as it is, the step can look at its values)
        result = driver.train(system._replace(step=interrupted_step), jnp.float32(2.0), num_steps=10, eval_every=4,
                              key=jax.random.PRNGKey(0), progress=False)
        assert result["status"] == "interrupted" and result["steps_done"] == 4
        assert int(result["state"][0]) == 4  # the last whole chunk's state, together


def test_pieces_of_a_long_scan_give_the_same_run():
    """A scanned chunk cut into pieces (a signal waits less) equals the whole chunk.

    The first call of a length is compilation and not judged: chunk 2 is timed, chunk 3 is cut."""
    whole = driver.train(counter_system(), jnp.float32(1.0), num_steps=36, eval_every=12, key=jax.random.PRNGKey(0),
                         progress=False)
    cut = driver.train(counter_system(), jnp.float32(1.0), num_steps=36, eval_every=12, key=jax.random.PRNGKey(0),
                       progress=False, max_block_seconds=0.0)
    assert whole["history"][-1]["seen"] == cut["history"][-1]["seen"] == list(range(24, 36))
    assert float(whole["state"][1]) == float(cut["state"][1])
    assert driver._pieces(12, 1.0, 3.5) == 3 and driver._pieces(7, 0.1, 9) == 7
    # never a scan of one step (compiled without its loop): the smallest other divisor, however slow a step
    assert driver._pieces(12, 1.0, 0.0) == 2 and driver._pieces(7, 10.0, 1.0) == 7 and driver._pieces(1, 1.0, 0.0) == 1


@pytest.mark.parametrize("step_loop", driver.STEP_LOOPS)
def test_interrupt_keeps_completed_chunks(step_loop):
    system = counter_system(step_loop)
    evaluate = system.evaluate

    def interrupting(state, infos, done):
        if done == 8:
            raise KeyboardInterrupt
        return evaluate(state, infos, done)

    result = driver.train(system._replace(evaluate=interrupting), jnp.float32(1.0), num_steps=20, eval_every=4,
                          key=jax.random.PRNGKey(0), progress=False)
    # The chunk whose evaluation was interrupted is not kept: state and records stay in step.
    assert result["status"] == "interrupted" and result["interrupted"] and result["steps_done"] == 4
    assert int(result["state"][0]) == 4 and [r["step"] for r in result["history"]] == [4]


def test_interrupt_before_the_first_evaluation_says_there_is_none():
    system = counter_system()
    system = system._replace(evaluate=lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    result = driver.train(system, jnp.float32(1.0), num_steps=8, eval_every=4, key=jax.random.PRNGKey(0),
                          progress=False)
    assert result["status"] == "interrupted" and result["final"] is None and result["history"] == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_real_signal_stops_a_long_dispatched_chunk_between_steps(signum):
    """One chunk of 100,000 slow steps: the signal is honoured within a fraction of a second."""

    def step(state, data):
        return state + jnp.sum(jnp.tanh(data @ data)), state

    system = driver.System(lambda key: jnp.float32(0), step, lambda s, i, d: {}, step_loop="dispatch")
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signum))
    start = time.perf_counter()
    timer.start()
    try:
        result = driver.train(system, jnp.ones((64, 64)) / 64, num_steps=100_000, eval_every=100_000,
                              key=jax.random.PRNGKey(0), progress=False)
    finally:
        timer.cancel()
    assert result["status"] == "interrupted" and result["steps_done"] == 0 and result["final"] is None
    assert time.perf_counter() - start < 10.0


def test_across_processes_a_signal_to_another_process_stops_this_one_at_the_next_chunk(monkeypatch):
    """Two processes must run the same programs: the between-steps check waits, and the chunk-boundary check
    stops every process once any has a signal (here the other one, SIGTERM before the third chunk)."""
    calls = []

    def allgather(flag):  # [this process, the other]
        calls.append(int(flag))
        return np.asarray([int(flag), signal.SIGTERM if len(calls) >= 3 else 0])

    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(driver.multihost_utils, "process_allgather", allgather)
    system = driver.System(lambda key: jnp.float32(0), lambda state, data: (state + data, state),
                           lambda s, i, d: {"value": float(s)}, step_loop="dispatch")
    result = driver.train(system, jnp.float32(1.0), num_steps=8, eval_every=2, key=jax.random.PRNGKey(0),
                          progress=False)
    assert result["status"] == "interrupted" and result["steps_done"] == 4 and calls == [0, 0, 0]
    assert [record["value"] for record in result["history"]] == [2.0, 4.0]

    stopper = driver._StopOnSignal(processes=2)
    with stopper:
        stopper._handle(signal.SIGINT, None)  # this process's own signal
        stopper.check()  # between steps: no process stops alone
        with pytest.raises(KeyboardInterrupt, match=f"signal {int(signal.SIGINT)}"):
            stopper.check_together()
    assert stopper.acted and calls[-1] == signal.SIGINT


def tracked_system() -> driver.System:
    """Three members whose validation scores follow a fixed table, one row per evaluation."""
    table = np.array([[1.0, 5.0, 2.0], [3.0, 4.0, 2.0], [2.0, 6.0, 2.5], [4.0, 1.0, 9.0]])

    def step(state, data):
        return {"step": state["step"] + 1, "params": state["params"] + 1.0}, state["step"]

    def evaluate(state, infos, done):
        return {"val": table[done // 2 - 1].tolist()}

    init = lambda key: {"step": jnp.int32(0), "params": jnp.zeros(3)}
    return driver.System(init, step, evaluate)


def test_tracker_keeps_each_members_best_by_hand():
    tracker = driver.Tracker(score=lambda r: r["val"], keep=lambda s: s["params"])
    result = driver.train(tracked_system(), None, num_steps=8, eval_every=2, key=jax.random.PRNGKey(0),
                          tracker=tracker, progress=False)
    best = result["best"]
    np.testing.assert_array_equal(best.score, [4.0, 6.0, 9.0])
    np.testing.assert_array_equal(best.step, [8, 6, 8])
    np.testing.assert_array_equal(np.asarray(best.kept), [8.0, 6.0, 8.0])  # params = steps done at the best
    np.testing.assert_array_equal(best.stop, [-1, -1, -1])


def test_tracker_patience_freezes_a_member_and_ends_the_run():
    # patience 2 steps: member 1 peaks at step 2 (5.0) and stops at 4 (its 6.0 at step 6 is never seen);
    # member 2 never beats its 2.0 of step 2 and stops at 4; member 0 improves at 4 and stops at 6, and
    # with every member stopped the run ends there.
    tracker = driver.Tracker(score=lambda r: r["val"], keep=lambda s: s["params"], patience=2)
    result = driver.train(tracked_system(), None, num_steps=8, eval_every=2, key=jax.random.PRNGKey(0),
                          tracker=tracker, progress=False)
    best = result["best"]
    np.testing.assert_array_equal(best.score, [3.0, 5.0, 2.0])
    np.testing.assert_array_equal(best.stop, [6, 4, 4])
    np.testing.assert_array_equal(np.asarray(best.kept), [4.0, 2.0, 2.0])
    assert result["status"] == "stopped" and result["steps_done"] == 6
    stopping = driver.Tracker(score=lambda r: r["val"], keep=lambda s: s["params"], stop_at=2.0)
    early = driver.train(tracked_system(), None, num_steps=8, eval_every=2, key=jax.random.PRNGKey(0),
                         tracker=stopping, progress=False)
    assert early["status"] == "stopped" and early["steps_done"] == 4  # every best >= 2.0 after step 4


def losses_system(blow_up_at: int, value: float, node: int = 2) -> driver.System:
    def step(state, data):
        loss = jnp.ones(4).at[node].set(jnp.where(state == blow_up_at, value, 1.0))
        return state + 1, loss

    return driver.System(lambda key: jnp.int32(0), step, lambda s, i, d: {}, losses=lambda infos: infos)


def test_a_non_finite_loss_names_node_and_step():
    with pytest.raises(driver.NonFiniteLoss, match="node 2 at step 6"):
        driver.train(losses_system(6, np.nan), None, num_steps=12, eval_every=4, key=jax.random.PRNGKey(0),
                     progress=False)


def test_divergence_stops_past_the_bound_only():
    # the first step's mean loss is 1.0: 100x is the default bound
    with pytest.raises(driver.Diverged, match=r"node 2 at step 9.*"):
        driver.train(losses_system(9, 150.0), None, num_steps=12, eval_every=4, key=jax.random.PRNGKey(0),
                     progress=False)
    quiet = driver.train(losses_system(9, 50.0), None, num_steps=12, eval_every=4, key=jax.random.PRNGKey(0),
                         progress=False)
    assert quiet["status"] == "complete"
    unwatched = driver.train(losses_system(9, 1e9), None, num_steps=12, eval_every=4, key=jax.random.PRNGKey(0),
                             progress=False, divergence=None)
    assert unwatched["status"] == "complete"
    with pytest.raises(driver.Diverged, match="above 10"):
        driver.train(losses_system(9, 50.0), None, num_steps=12, eval_every=4, key=jax.random.PRNGKey(0),
                     progress=False, divergence=10.0)


def test_the_bound_is_read_from_the_nodes_that_stepped_first():
    # at their own pace a node that held reports a loss of 0: the reference is the mean of the others' (2.0 here,
    # so 100x is 200, not 100: 150 at step 9 passes, 250 stops)
    def system(value):
        def step(state, data):
            first = jnp.array([2.0, 0.0, 2.0, 0.0])  # two nodes held at the first step
            later = jnp.ones(4).at[2].set(jnp.where(state == 9, value, 1.0))
            return state + 1, jnp.where(state == 0, first, later)

        return driver.System(lambda key: jnp.int32(0), step, lambda s, i, d: {}, losses=lambda infos: infos)

    quiet = driver.train(system(150.0), None, num_steps=12, eval_every=4, key=jax.random.PRNGKey(0), progress=False)
    assert quiet["status"] == "complete"
    with pytest.raises(driver.Diverged, match=r"above 200 \(250\) at node 2 at step 9"):
        driver.train(system(250.0), None, num_steps=12, eval_every=4, key=jax.random.PRNGKey(0), progress=False)


def noisy_system() -> driver.System:
    """Random state: a resumed run only matches if the key, state and tracker all come back exactly."""

    def step(state, data):
        key, sub = jax.random.split(state["key"])
        params = state["params"] + jax.random.normal(sub, (3,))
        return {"key": key, "params": params}, params

    evaluate = lambda s, infos, done: {"val": np.asarray(s["params"]).tolist(), "last": np.asarray(infos)[-1].tolist()}
    return driver.System(lambda key: {"key": key, "params": jnp.zeros(3)}, step, evaluate)


@pytest.mark.parametrize("key", [jax.random.PRNGKey(3), jax.random.key(3)], ids=["raw_key", "typed_key"])
def test_checkpointed_resume_is_bit_identical(tmp_path, key):
    # a typed key (jax.random.key) in the state is checkpointed as its data and comes back typed, bit for bit
    tracker = driver.Tracker(score=lambda r: r["val"], keep=lambda s: s["params"])
    run = lambda **kw: driver.train(noisy_system(), None, num_steps=20, eval_every=4, key=key,  # noqa: E731
                                    tracker=tracker, progress=False, **kw)
    whole = run()
    evaluate = noisy_system().evaluate

    def interrupt_at_12(state, infos, done):
        if done == 12:
            raise KeyboardInterrupt
        return evaluate(state, infos, done)

    with pytest.raises(driver.Interrupted, match="after 8 steps"):
        driver.train(noisy_system()._replace(evaluate=interrupt_at_12), None, num_steps=20, eval_every=4,
                     key=key, tracker=tracker, progress=False, checkpointer=Checkpointer(tmp_path, every=100))
    resumed = run(checkpointer=Checkpointer(tmp_path, every=100, resume=True))
    assert resumed["resumed_from"] == 8
    assert resumed["state"]["key"].dtype == whole["state"]["key"].dtype
    np.testing.assert_array_equal(jax.random.key_data(resumed["state"]["key"]),
                                  jax.random.key_data(whole["state"]["key"]))
    strip = lambda history: [{k: v for k, v in r.items() if k != "seconds"} for r in history]
    assert strip(resumed["history"]) == strip(whole["history"])
    np.testing.assert_array_equal(resumed["best"].score, whole["best"].score)
    np.testing.assert_array_equal(resumed["best"].kept, whole["best"].kept)
    np.testing.assert_array_equal(resumed["state"]["params"], whole["state"]["params"])
    again = run(checkpointer=Checkpointer(tmp_path, every=100, resume=True))  # finished: nothing more to run
    assert again["steps_done"] == 20 and strip(again["history"]) == strip(whole["history"])


def test_a_donated_run_leaves_the_callers_arrays():
    kept, key = jnp.zeros(3), jax.random.PRNGKey(3)  # an init that returns arrays its caller keeps
    system = noisy_system()._replace(init=lambda key: {"key": key, "params": kept})
    run = lambda donate: driver.train(system, None, num_steps=12, eval_every=4, key=key,  # noqa: E731
                                      progress=False, donate=donate)
    plain, donated = run(False), run(None)  # None: donated, on every backend
    assert not kept.is_deleted() and not key.is_deleted()
    np.testing.assert_array_equal(donated["state"]["params"], plain["state"]["params"])


@pytest.mark.parametrize("step_loop", driver.STEP_LOOPS)
def test_donated_chunks_give_the_same_run_with_one_copy_of_the_state(tmp_path, step_loop):
    # The tracker keeps the params themselves (an alias of the state): donation must not take them away.
    tracker = driver.Tracker(score=lambda r: r["val"], keep=lambda s: s["params"])
    system = noisy_system()._replace(step_loop=step_loop)
    run = lambda system=system, **kw: driver.train(system, None, num_steps=20, eval_every=4,  # noqa: E731
                                                   key=jax.random.PRNGKey(3), tracker=tracker, progress=False, **kw)
    plain, donated = run(), run(donate=True)
    strip = lambda history: [{k: v for k, v in r.items() if k != "seconds"} for r in history]  # noqa: E731
    assert strip(donated["history"]) == strip(plain["history"])
    np.testing.assert_array_equal(donated["state"]["params"], plain["state"]["params"])
    np.testing.assert_array_equal(donated["best"].kept, plain["best"].kept)
    # a donated chunk consumes its input state: one copy on the device
    state = noisy_system().init(jax.random.PRNGKey(0))
    runner = driver.scan_steps if step_loop == "scan" else driver.dispatch_steps
    runner(system.step, donate=True)(state, None, 2)
    assert state["params"].is_deleted()
    # interrupted after a donated chunk: the last whole chunk's state is saved and returned, resume is exact
    evaluate = system.evaluate

    def interrupt_at_12(state, infos, done):
        if done == 12:
            raise KeyboardInterrupt
        return evaluate(state, infos, done)

    with pytest.raises(driver.Interrupted, match="after 8 steps"):
        run(system._replace(evaluate=interrupt_at_12), donate=True, checkpointer=Checkpointer(tmp_path, every=100))
    interrupted = run(system._replace(evaluate=interrupt_at_12), donate=True)
    assert interrupted["steps_done"] == 8 and np.all(np.isfinite(np.asarray(interrupted["state"]["params"])))
    resumed = run(donate=True, checkpointer=Checkpointer(tmp_path, every=100, resume=True))
    assert strip(resumed["history"]) == strip(plain["history"])
    np.testing.assert_array_equal(resumed["state"]["params"], plain["state"]["params"])


def test_bad_arguments():
    with pytest.raises(ValueError, match="eval_every >= 1"):
        driver.train(counter_system(), 1.0, num_steps=5, eval_every=0, key=jax.random.PRNGKey(0), progress=False)
    with pytest.raises(ValueError, match="step_loop"):
        driver.train(counter_system("while"), 1.0, num_steps=5, eval_every=1, key=jax.random.PRNGKey(0),
                     progress=False)


def test_a_network_cut_into_its_smallest_pieces_trains_bit_for_bit_as_whole():
    """However slow a machine, the pieces a chunk is cut into leave the run unchanged: 4 MLP nodes sharing outputs,
    every judged chunk of 12 steps cut as far as it goes (pieces of 2), end with the parameters of the uncut run."""
    from jaxcomm import data, network
    from jaxcomm.models import MLP

    dataset = data.load_mnist_sample()
    config = network.NetworkConfig(num_nodes=4, num_steps=36, eval_every=12, backend="vmap", step_loop="scan")
    net = network.make_network(config, MLP(hidden=(16,)), image_shape=dataset.train.images.shape[1:],
                               num_classes=dataset.num_classes)
    runs = [driver.train(network.system(net, lambda *_: {}), network.network_data(dataset, config), num_steps=36,
                         eval_every=12, key=jax.random.PRNGKey(0), progress=False, max_block_seconds=limit)
            for limit in (10.0, 0.0)]
    whole, cut = (jax.tree_util.tree_leaves(run["state"].nodes.params) for run in runs)
    assert all(bool(jnp.array_equal(a, b)) for a, b in zip(whole, cut, strict=True))
