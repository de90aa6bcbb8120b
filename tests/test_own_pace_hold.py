"""The kit's guarantee at their own pace: a node that is neither due nor in a closing round does not change.

Every built-in method and the research methods of the tutorials (CHOCO-SGD, FedBuff) train tick by tick on 3 nodes
at speeds 1/1/3 (the third node 3x slower) on instant links; at every tick each held node's parameters, model and
optimiser state are bit-identical before and after. A communicator that moves every node (the escape hatch too)
cannot break it: the kit holds them (``kit.Population.hold``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxcomm import (
    clock,
    codistillation,
    compression,
    data_parallel,
    exchange,
    fedbuff,
    federated,
    gossip,
    kit,
    leader_sgd,
    lgc,
    local_sgd,
    methods,
    network,
    pace,
    population,
    powersgd,
    sgp,
    sparta,
)
from jaxcomm.models import MLP

MODEL = MLP(hidden=(8,), num_classes=4)
STRAGGLER = clock.Cluster(clock.Compute(1.0, speed=(1.0, 1.0, 3.0)), clock.INSTANT)
TICKS = 9


def _research(name: str):
    spec = importlib.util.spec_from_file_location(f"_research_{name}", Path(__file__).parent / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _everything_moves():
    """A communicator that moves every node after the update, held or not: the kit must hold them."""

    def build(config, model, *, image_shape, num_classes):
        pop = kit.nodes(config, model, image_shape=image_shape, num_classes=num_classes)
        push = lambda state, ctx: pop.with_params(state, jax.tree.map(lambda p: p + 1.0, pop.params(state)))  # noqa: E731
        return pop.built_with(kit.Communicator(communicate=push))

    return methods.Method("moves_everything", build)


def _escape_hatch_moves():
    """The same through ``pop.built(step)``, a step of its own."""

    def build(config, model, *, image_shape, num_classes):
        pop = kit.nodes(config, model, image_shape=image_shape, num_classes=num_classes)

        def step(state, data):
            state, info = pop.local_step(state, data)
            return pop.with_params(state, jax.tree.map(lambda p: p * 0.5, pop.params(state))), info

        return pop.built(step)

    return methods.Method("escape_hatch", build)


METHODS = {
    "isolated": lambda: network.output_sharing(exchange.none()),
    "true_labels": lambda: network.output_sharing(exchange.true_labels()),
    "gossip": lambda: gossip.gossip_averaging(2, num_neighbours=1),
    "random_peer": lambda: gossip.random_peer_gossip(1),
    "sync_sgd": lambda: data_parallel.sync_sgd(),
    "top_k": lambda: data_parallel.sync_sgd(compression.make("top_k", fraction=0.1)),
    "powersgd": lambda: data_parallel.sync_sgd(powersgd.power_sgd(1)),
    "local_sgd": lambda: local_sgd.local_sgd(2),
    "diloco": lambda: local_sgd.diloco(2),
    "diloco_quorum": lambda: local_sgd.diloco(2, quorum=2),
    "codistillation": lambda: codistillation.codistillation(2),
    "sparta": lambda: sparta.sparta(0.5),
    "sgp": lambda: sgp.sgp(),
    "leader_sgd": lambda: leader_sgd.leader_sgd(0.5, 2),
    "lgc_ps": lambda: lgc.lgc_parameter_server(0.3, 3, width=8),  # an 8-wide autoencoder: what it holds is the same
    "lgc_ring": lambda: lgc.lgc_ring(0.3, 3, width=8),
    "lgc_ps_retrained": lambda: lgc.lgc_parameter_server(0.3, 2, 3, width=8),  # stage one again at ticks 3 and 6
    "osgp": lambda: sgp.osgp(1),
    "adacomp": lambda: data_parallel.sync_sgd(compression.make("adacomp")),
    "fedavg": lambda: federated.fedavg(2),
    "fedprox": lambda: federated.fedprox(2, 0.1),
    "scaffold": lambda: federated.scaffold(2),
    "fednova": lambda: federated.fednova(2),
    "fednova_unequal": lambda: federated.fednova(2, (2, 1, 2)),  # a client past its steps holds though due
    "fedavg_available": lambda: federated.fedavg(2, available=np.array([[1, 1, 0], [0, 1, 1], [0, 0, 0]] * TICKS,
                                                                          bool)),  # off slots train, weigh 0
    "fedbuff": lambda: fedbuff.fedbuff(2, 2),
    "choco": lambda: _research("test_research_method").choco_gossip(0.3),
    "fedbuff_quorum": lambda: _research("test_research_async").fedbuff(2, 2),  # research code: a quorum
    "moves_everything": _everything_moves,
    "escape_hatch": _escape_hatch_moves,
}


IDLE_WHEN_DUE = {"fednova_unequal": {1}}
"""The nodes of a method that may take no step though due, by design (FedNova's client 1, past its one step of the
round); every other node that is due must move."""


def _config():
    return network.NetworkConfig(num_nodes=3, num_neighbours=1, batch_size=8, num_steps=TICKS, eval_every=TICKS,
                                 backend="vmap", step_loop="scan", learning_rate=0.05)


def _nodes(state) -> list[np.ndarray]:
    nodes = state.nodes
    if isinstance(nodes, population.Unstacked):
        nodes = population.stack(list(nodes.trees))
    return [np.asarray(x) for x in jax.tree.leaves(nodes)]


@pytest.mark.parametrize("name", list(METHODS))
def test_a_node_neither_due_nor_in_a_closing_round_is_bit_identical_after_the_tick(name, tiny_dataset):
    method = METHODS[name]()
    built = methods.build(method, method.config_for(_config()), MODEL, tiny_dataset, cluster=STRAGGLER,
                          own_pace=True)
    paced, timeline = methods.at_own_pace(built, STRAGGLER, True)
    step = jax.jit(paced.step)
    key = jax.random.PRNGKey(paced.config.seed)
    state = method.own.initial(paced, paced.config, 0) if method.own else paced.init(key)
    data = methods.shard_data(method, tiny_dataset, paced.config, timeline=timeline)
    assert np.all(np.diff(timeline.time) >= 0), f"{name}: virtual time ran backwards"  # issue 72 item 2
    held_ticks = 0
    for t in range(TICKS):
        before = _nodes(state)
        state, _ = step(state, data)
        after = _nodes(state)
        kept = timeline.due[t] | (timeline.closes[t] & timeline.members[t])
        own = [(b, a) for b, a in zip(before, after, strict=True) if b.ndim and b.shape[0] == len(kept)]
        for i in np.flatnonzero(~kept):
            held_ticks += 1
            for leaf_before, leaf_after in own:
                np.testing.assert_array_equal(leaf_after[i], leaf_before[i], err_msg=f"{name}: node {i}, tick {t}")
        idle = IDLE_WHEN_DUE.get(name, set())
        stepped = [i for i in np.flatnonzero(timeline.due[t]) if i not in idle] if own else ()
        for i in stepped:  # a node that steps does move
            assert any(not np.array_equal(b[i], a[i]) for b, a in own), f"{name}: node {i} due at tick {t} held"
    # synchronous SGD's compiled step is a whole round (every node due every tick); every other method held the
    # straggler at some tick
    assert held_ticks > 0 or getattr(paced, "waits", None) == pace.LOCKSTEP, f"{name}: the straggler never held"
