"""The network step: Algorithm 2 end to end, its invariants and its configuration errors."""

from __future__ import annotations

import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import driver, network, population
from jaxcomm.models import MLP
from jaxcomm.models.cnn import StridedCNN

MODEL = MLP(hidden=(12,), num_classes=4)


def build(dataset, **overrides):
    config = network.NetworkConfig(num_nodes=4, num_neighbours=2, batch_size=5, inbox_capacity=3,
                                   num_steps=6, eval_every=3, **overrides)
    net = network.make_network(config, MODEL, image_shape=dataset.train.images.shape[1:], num_classes=4)
    return net, network.network_data(dataset, config)


def run_steps(net, data, steps, seed=0, jit=True):
    step = jax.jit(net.step) if jit else net.step
    state, infos = net.init(jax.random.PRNGKey(seed)), []
    for _ in range(steps):
        state, info = step(state, data)
        infos.append(info)
    return state, infos


@pytest.mark.parametrize("content", ["true_labels", "logits", "features"])
def test_no_node_reads_another_shard_except_through_its_inbox(tiny_dataset, content):
    net, data = build(tiny_dataset, content=content, topology="time_varying", redraw_every=4,
                      broadcast_prob=0.6, consume_prob=0.5)
    shards = [set(np.asarray(data.shard_indices[n, : data.shard_sizes[n]]).tolist()) for n in range(4)]
    assert not set.intersection(*shards) and sum(map(len, shards)) == 240
    known = [set(s) for s in shards]  # what node n may legitimately train on
    state, step = net.init(jax.random.PRNGKey(3)), jax.jit(net.step)
    consumed_any = False
    for _ in range(30):
        adj = np.asarray(state.adj)
        new_state, info = step(state, data)
        adj = np.asarray(new_state.adj)  # the graph this step's broadcasts used
        for n in range(4):
            used = set(np.asarray(info.indices[n]).tolist())
            if bool(info.consumed[n]):
                consumed_any = True
                assert int(info.source[n]) != n and int(info.source[n]) >= 0
            else:
                assert used <= shards[n], f"node {n} trained on local data outside its shard"
            assert used <= known[n], f"node {n} read data it never received"
        for i in np.flatnonzero(np.asarray(info.broadcast)):
            for j in np.flatnonzero(adj[i]):
                known[j] |= set(np.asarray(info.indices[i]).tolist())
        state = new_state
    assert consumed_any


def test_inbox_counters_add_up_and_isolated_nodes_have_none(tiny_dataset):
    net, data = build(tiny_dataset, content="true_labels", topology="full", broadcast_prob=0.9)
    state, infos = run_steps(net, data, 20)
    c = state.inbox.counters
    np.testing.assert_array_equal(c.received, c.consumed + c.dropped + state.inbox.count)
    assert int(c.sent.sum()) == int(c.received.sum()) > 0
    consumed = np.sum([np.asarray(i.consumed) for i in infos], axis=0)
    np.testing.assert_array_equal(c.consumed, consumed)
    assert int(c.dropped.sum()) > 0  # 0.9 x 3 senders into capacity 3 overflows

    net, data = build(tiny_dataset, content="none")
    state, infos = run_steps(net, data, 5)
    assert state.inbox is None and not any(bool(i.consumed.any()) for i in infos)


def test_without_rebroadcast_only_own_shard_travels(tiny_dataset):
    net, data = build(tiny_dataset, content="true_labels", topology="full", broadcast_prob=1.0, rebroadcast=False)
    _, infos = run_steps(net, data, 12)
    assert any(bool(i.consumed.any()) for i in infos)
    for info in infos:
        np.testing.assert_array_equal(info.broadcast, ~info.consumed)


def test_same_seed_same_result_and_seeds_differ(tiny_dataset):
    net, data = build(tiny_dataset, content="logits", temperature=2.0)
    a, _ = run_steps(net, data, 5, seed=1)
    b, _ = run_steps(net, data, 5, seed=1)
    c, _ = run_steps(net, data, 5, seed=2)
    chex.assert_trees_all_equal(a, b)
    assert not np.allclose(a.nodes.params["Dense_0"]["kernel"], c.nodes.params["Dense_0"]["kernel"])


@pytest.mark.parametrize("content", ["none", "true_labels", "features"])
def test_backends_and_jit_agree(tiny_dataset, content):
    results = {}
    for backend in ("vmap", "loop"):
        for jit in (True, False):
            net, data = build(tiny_dataset, content=content, backend=backend)
            results[backend, jit], _ = run_steps(net, data, 3, jit=jit)
    reference = results["loop", False]
    for state in results.values():
        chex.assert_trees_all_close(state.nodes, reference.nodes, rtol=1e-5, atol=1e-6)
        chex.assert_trees_all_close(state.inbox, reference.inbox, rtol=1e-5, atol=1e-6)


def test_unrolled_nodes_update_at_once_and_failed_nodes_keep_their_state(tiny_dataset):
    """Under "unrolled" the optimiser updates the stacked nodes in one pass (population.lift_train): the same
    training as the other lifts (to float32 rounding), and a node that is down keeps its state exactly."""
    schedule = ((1, 0, 4),)  # node 1 down for the first 4 steps
    unrolled, data = build(tiny_dataset, content="true_labels", backend="unrolled", failure_schedule=schedule)
    vmapped, _ = build(tiny_dataset, content="true_labels", backend="vmap", failure_schedule=schedule)
    start = unrolled.init(jax.random.PRNGKey(0))
    (a, infos), (b, _) = run_steps(unrolled, data, 3), run_steps(vmapped, data, 3)
    assert not any(bool(info.alive[1]) for info in infos)
    chex.assert_trees_all_equal(population.node(a.nodes, 1), population.node(start.nodes, 1))
    chex.assert_trees_all_close(a.nodes, b.nodes, rtol=1e-5, atol=1e-6)
    assert not np.allclose(a.nodes.params["Dense_0"]["kernel"][0], start.nodes.params["Dense_0"]["kernel"][0])


def test_dispatched_unrolled_nodes_are_held_apart_within_a_chunk_and_train_as_vmap(tiny_dataset, monkeypatch):
    """Under "unrolled" with the "dispatch" loop the driver holds node states apart within a chunk (one jitted step
    on N separate sets of buffers, no slice or stack of the population): the same run as vmap's, gossip and a
    node down included; a scan keeps them stacked."""
    unstacks = []
    unstack = population.unstack
    monkeypatch.setattr(population, "unstack", lambda tree: unstacks.append(1) or unstack(tree))
    base = network.NetworkConfig(num_nodes=3, num_neighbours=1, batch_size=5, num_steps=6, eval_every=3,
                                 content="true_labels", gossip_every=2, failure_schedule=((1, 0, 4),))
    run = lambda backend, step_loop: network.train_network(  # noqa: E731
        base.replace(backend=backend, step_loop=step_loop), MODEL, tiny_dataset, progress=False)
    vmapped = run("vmap", "dispatch")
    scanned = run("unrolled", "scan")
    assert unstacks == []
    apart = run("unrolled", "dispatch")
    assert apart["network"].layout is network.NODES_APART
    assert len(unstacks) >= 2  # at each chunk's start (and around each gossip round, inside the jitted step)
    for other in (scanned, apart):
        assert not isinstance(other["state"].nodes, population.Unstacked)  # evaluated and returned together
        chex.assert_trees_all_close(other["state"].nodes, vmapped["state"].nodes, rtol=1e-5, atol=1e-6)
        chex.assert_trees_all_close(other["state"].inbox, vmapped["state"].inbox, rtol=1e-5, atol=1e-6)


def test_chunked_scan_equals_step_by_step(tiny_dataset):
    net, data = build(tiny_dataset, content="true_labels")
    expected, _ = run_steps(net, data, 7)
    system = network.system(net, lambda *args: {})
    result = driver.train(system, data, num_steps=7, eval_every=3, key=jax.random.PRNGKey(0), progress=False)
    assert result["steps_done"] == 7 and result["status"] == "complete"
    chex.assert_trees_all_close(result["state"], expected, rtol=1e-6, atol=1e-6)


def test_cosine_schedule_starts_at_the_rate_and_ends_at_zero(tiny_dataset):
    schedule = network.learning_rate(network.NetworkConfig(learning_rate=0.01, lr_schedule="cosine", num_steps=6))
    # 0.01 x (1 + cos(pi t / 6)) / 2 at t = 0, 3, 6
    np.testing.assert_allclose([schedule(0), schedule(3), schedule(6)], [0.01, 0.005, 0.0], atol=1e-9)
    # the first step equals the constant rate's; after num_steps = 6 updates the nodes stop moving
    constant, data = build(tiny_dataset, content="true_labels")
    cosine, _ = build(tiny_dataset, content="true_labels", lr_schedule="cosine")
    first_constant, first_cosine = run_steps(constant, data, 1)[0], run_steps(cosine, data, 1)[0]
    chex.assert_trees_all_close(first_constant.nodes.params, first_cosine.nodes.params)
    at_end, _ = run_steps(cosine, data, 6)
    after, _ = run_steps(cosine, data, 8)
    chex.assert_trees_all_close(after.nodes.params, at_end.nodes.params)


def test_train_network_records_history(tiny_dataset):
    config = network.NetworkConfig(num_nodes=3, num_neighbours=1, batch_size=8, num_steps=40, eval_every=20)
    out = network.train_network(config, MODEL, tiny_dataset, progress=False)
    assert [h["step"] for h in out["history"]] == [20, 40] and out["steps_done"] == 40
    final = out["final"]
    assert len(final["node_accuracies"]) == 3
    assert final["avg_accuracy"] == pytest.approx(np.mean(final["node_accuracies"]))
    assert set(final["collective_accuracy"]) == {"negentropy", "entropy", "mean", "vote"}
    assert final["collective_accuracy"]["mean"] > 40  # 4 classes, learnable: well above chance


@pytest.mark.parametrize("gossip_every", [0, 3])
def test_eager_per_node_loop_trains_like_one_program_and_compiles_one_node(tiny_dataset, monkeypatch, gossip_every):
    # The thesis' way (one compiled call per node, the step itself not jitted, node states held apart within a
    # chunk) against one jitted program of all nodes: the same run, failures, the inbox and gossip included; the
    # node's step is traced once for 4 nodes x 8 steps, and the states are taken apart once per chunk.
    config = network.NetworkConfig(num_nodes=4, num_neighbours=2, batch_size=5, inbox_capacity=3, num_steps=8,
                                   eval_every=4, content="logits", consume_prob=0.6, broadcast_prob=0.6,
                                   failure_prob=0.3, failure_steps=2, gossip_every=gossip_every)
    unstacks = []
    unstack = population.unstack
    monkeypatch.setattr(population, "unstack", lambda tree: unstacks.append(1) or unstack(tree))
    image_shape = tiny_dataset.train.images.shape[1:]
    program = network.classifier_program(config, MODEL, image_shape=image_shape, num_classes=4)
    traced = []

    def train(*args):
        traced.append(1)
        return program.train(*args)

    counting = program._replace(train=train, family="mlp")
    run = lambda backend, step_loop: network.train_network(  # noqa: E731
        config.replace(backend=backend, step_loop=step_loop), counting, tiny_dataset, progress=False)
    jitted = run("vmap", "dispatch")
    traced.clear()
    eager = run("loop", "eager")
    assert len(traced) == 1 and eager["network"].step_loop == "eager"
    assert len(unstacks) == 2 + (8 // gossip_every if gossip_every else 0)  # 8 steps in chunks of 4, and each mix
    for a, b in zip(eager["history"], jitted["history"], strict=True):
        assert a["node_accuracies"] == pytest.approx(b["node_accuracies"], abs=1e-4)
        assert a["reachable"] == b["reachable"]
    for name in ("nodes", "inbox", "up", "alive"):
        chex.assert_trees_all_close(getattr(eager["state"], name), getattr(jitted["state"], name), rtol=1e-5,
                                    atol=1e-6)
    assert int(eager["state"].inbox.counters.consumed.sum()) > 0


def test_a_vmapped_step_run_eagerly_keeps_its_nodes_stacked(tiny_dataset):
    # Both fixed by the caller, vmap with the eager step loop runs op by op on stacked nodes (only the "loop" lift
    # takes them apart): the same run as one jitted step.
    config = network.NetworkConfig(num_nodes=3, num_neighbours=1, batch_size=5, num_steps=4, eval_every=2,
                                   content="true_labels")
    run = lambda step_loop: network.train_network(config.replace(backend="vmap", step_loop=step_loop), MODEL,  # noqa: E731
                                                  tiny_dataset, progress=False)
    eager, jitted = run("eager"), run("dispatch")
    assert eager["network"].layout is None and network.make_network(
        config.replace(backend="loop", step_loop="eager"), MODEL, image_shape=(8, 8, 1), num_classes=4
    ).layout is network.NODES_APART
    chex.assert_trees_all_close(eager["state"].nodes, jitted["state"].nodes, rtol=1e-5, atol=1e-6)


def test_several_eval_splits_are_each_split_evaluated_alone(tiny_dataset):
    # One prediction pass over test + validation gives each split's metrics exactly as evaluating it alone.
    dataset = tiny_dataset._replace(validation=tiny_dataset.train._replace(images=tiny_dataset.train.images[:37],
                                                                           labels=tiny_dataset.train.labels[:37]))
    config = network.NetworkConfig(num_nodes=3, num_neighbours=1, batch_size=8, num_steps=20, eval_every=10)
    out = network.train_network(config, MODEL, dataset, eval_split=("test", "validation"), progress=False)
    for name in ("test", "validation"):
        alone = network.accuracy_evaluator(getattr(dataset, name))(out["network"], out["state"], 20)
        got = out["final"] if name == "test" else out["final"]["validation"]
        assert {k: got[k] for k in alone} == alone, name
    assert out["final"]["validation"]["avg_accuracy"] != out["final"]["avg_accuracy"]
    # an empty split is left out; a name that is no split is refused
    empty = network.split_evaluator(tiny_dataset, ("test", "validation"))(out["network"], out["state"], 20)
    assert "validation" not in empty and empty["avg_accuracy"] == out["final"]["avg_accuracy"]
    with pytest.raises(ValueError, match="'valid' is not a split"):
        network.split_evaluator(dataset, ("test", "valid"))


@pytest.mark.parametrize("model", [MODEL, StridedCNN(widths=(4, 8), num_classes=4, hidden=8, norm="batch")],
                         ids=["mlp", "cnn_batchnorm"])
def test_bfloat16_compute_trains_like_float32_with_float32_state(tiny_dataset, model):
    config = network.NetworkConfig(num_nodes=3, num_neighbours=1, batch_size=16, num_steps=60, eval_every=20,
                                   learning_rate=3e-3)
    f32 = network.train_network(config, model, tiny_dataset, progress=False)
    bf16 = network.train_network(config.replace(compute_dtype="bfloat16"), model, tiny_dataset, progress=False)
    # parameters, model state and Adam's moments stay float32; the matmuls and convolutions run in bfloat16
    for leaf in jax.tree.leaves(bf16["state"].nodes):
        assert leaf.dtype != jnp.bfloat16
    assert {leaf.dtype for leaf in jax.tree.leaves(bf16["state"].nodes.params)} == {jnp.dtype(jnp.float32)}
    net, data = bf16["network"], network.network_data(tiny_dataset, config)
    jaxpr = str(jax.make_jaxpr(net.step)(net.init(jax.random.PRNGKey(0)), data))
    assert "bf16" in jaxpr and "bf16" not in str(jax.make_jaxpr(f32["network"].step)(
        f32["network"].init(jax.random.PRNGKey(0)), data))
    # the same run within bfloat16's tolerance: losses at every evaluation, final accuracies
    for a, b in zip(f32["history"], bf16["history"], strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=0.1, abs=0.05)
        assert abs(b["avg_accuracy"] - a["avg_accuracy"]) <= 6.0
    assert bf16["final"]["avg_accuracy"] > 40  # it learns (4 classes)
    program = network.classifier_program(config, model, image_shape=(8, 8, 1), num_classes=4)
    with pytest.raises(ValueError, match="compute_dtype='bfloat16' applies to Flax classifiers"):
        network.make_network(config.replace(compute_dtype="bfloat16"), program, image_shape=(8, 8, 1), num_classes=4)


@pytest.mark.parametrize("overrides,match", [
    ({"num_neighbours": 4}, r"num_neighbours must be an integer in \[0, num_nodes - 1\] = \[0, 3\]"),
    ({"num_neighbours": -1}, "num_neighbours"),
    ({"num_nodes": 0}, "num_nodes must be an integer >= 1"),
    ({"broadcast_prob": 1.5}, r"broadcast_prob must be a probability in \[0, 1\]"),
    ({"consume_prob": -0.1}, r"consume_prob must be a probability in \[0, 1\]"),
    ({"temperature": 0.0}, "temperature must be a number > 0"),
    ({"inbox_capacity": 0}, "inbox_capacity must be an integer >= 1"),
    ({"content": "gradients"}, r"content must be one of \('none', 'true_labels', 'logits', 'features'\)"),
    ({"topology": "star"}, "topology must be one of"),
    ({"overflow": "drop_random"}, "overflow must be one of"),
    ({"partition": "sorted"}, "partition must be one of"),
    ({"backend": "pmap"}, "backend must be one of"),
    ({"batch_size": 0}, "batch_size must be an integer >= 1"),
    ({"redraw_every": 0}, "redraw_every"),
    ({"eval_every": 0}, "eval_every"),
    ({"rebroadcast": "yes"}, "rebroadcast must be True or False"),
    ({"lr_schedule": "step"}, r"lr_schedule must be one of \('constant', 'cosine'\)"),
    ({"compute_dtype": "float16"}, r"compute_dtype must be one of \('float32', 'bfloat16'\)"),
])
def test_bad_config_fails_on_construction(overrides, match):
    fields = {"num_nodes": 4, "num_neighbours": 2} | overrides
    with pytest.raises(ValueError, match=match):
        network.NetworkConfig(**fields)


def test_full_topology_ignores_num_neighbours():
    assert network.NetworkConfig(num_nodes=3, topology="full", num_neighbours=10).num_nodes == 3


def test_flip_and_crop_by_hand():
    image = jnp.arange(16, dtype=jnp.int32).reshape(1, 4, 4, 1)
    for seed in range(20):
        out = np.asarray(network.flip_and_crop(jax.random.PRNGKey(seed), image, pad=1))[0, ..., 0]
        candidates = []
        for flipped in (np.arange(16).reshape(4, 4), np.arange(16).reshape(4, 4)[:, ::-1]):
            padded = np.pad(flipped, 1)
            candidates += [padded[i:i + 4, j:j + 4] for i in range(3) for j in range(3)]
        assert any(np.array_equal(out, c) for c in candidates)  # a flip, then a shift of at most 1 pixel


def test_augmentation_changes_the_images_not_the_minibatches(tiny_dataset):
    net, data = build(tiny_dataset, content="true_labels", augment=True)
    plain, _ = build(tiny_dataset, content="true_labels")
    (state, infos), (plain_state, plain_infos) = run_steps(net, data, 5), run_steps(plain, data, 1)
    chex.assert_tree_all_finite(state.nodes)
    # Augmentation draws from its own key: the first step samples the same indices...
    np.testing.assert_array_equal(infos[0].indices, plain_infos[0].indices)
    # ...but trains on other pixels.
    assert not np.allclose(np.asarray(jax.tree_util.tree_leaves(run_steps(net, data, 1)[0].nodes.params)[0]),
                           np.asarray(jax.tree_util.tree_leaves(plain_state.nodes.params)[0]))


@pytest.mark.parametrize("entry", ["train_network", "train_networks"])
def test_a_resumed_run_goes_on_under_the_lift_its_checkpoints_recorded(tiny_dataset, tmp_path, monkeypatch, entry):
    # The chooser picks vmap/scan on the first day; the run is interrupted after 3 of 6 steps. On the day it
    # resumes the chooser would pick unrolled/dispatch: the run goes on under vmap/scan, bit-identical to the run
    # never interrupted; a new run takes the chooser's pick.
    from jaxcomm import network_sweep, speed  # noqa: PLC0415
    from jaxcomm.checkpoint import LIFT_FILE, Checkpointer  # noqa: PLC0415

    pick = ["vmap", "scan"]
    monkeypatch.setattr(speed, "choose", lambda family, n, *, backend="auto", step_loop="auto", **_: (
        pick[0] if backend == "auto" else backend, pick[1] if step_loop == "auto" else step_loop))
    config = network.NetworkConfig(num_nodes=4, num_neighbours=2, batch_size=5, inbox_capacity=3, num_steps=6,
                                   eval_every=3)  # backend and step loop "auto"
    plain = network.split_evaluator(tiny_dataset, "test")

    def interrupt_at_6(net, state, done):
        if done == 6:
            raise KeyboardInterrupt
        return plain(net, state, done)

    def train(checkpointer=None, evaluator=None):
        if entry == "train_network":
            return network.train_network(config, MODEL, tiny_dataset, progress=False, checkpointer=checkpointer,
                                         evaluator=evaluator)
        return network_sweep.train_networks([config], MODEL, tiny_dataset, progress=False, mode="sequential",
                                            checkpointer=checkpointer, evaluator=evaluator)[0]

    whole = train()
    with pytest.raises(driver.Interrupted, match="after 3 steps"):
        train(Checkpointer(tmp_path, every=100), interrupt_at_6)
    assert json.loads((tmp_path / LIFT_FILE).read_text()) == {"backend": "vmap", "step_loop": "scan"}
    pick[:] = ["unrolled", "dispatch"]
    resumed = train(Checkpointer(tmp_path, every=100, resume=True))
    assert (resumed["network"].backend, resumed["network"].step_loop) == ("vmap", "scan")
    assert resumed["resumed_from"] == 3
    strip = lambda history: [{k: v for k, v in r.items() if k != "seconds"} for r in history]  # noqa: E731
    assert strip(resumed["history"]) == strip(whole["history"])
    chex.assert_trees_all_equal(resumed["state"].nodes.params, whole["state"].nodes.params)
    fresh = train(Checkpointer(tmp_path / "new", every=100))
    assert (fresh["network"].backend, fresh["network"].step_loop) == ("unrolled", "dispatch")
    assert json.loads((tmp_path / "new" / LIFT_FILE).read_text()) == {"backend": "unrolled", "step_loop": "dispatch"}
