"""Research code makes a method asynchronous with no library edit: FedBuff (Nguyen et al. 2022, buffered
asynchronous aggregation), written here on the kit's population and its timeline, trained at its own pace."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import clock, kit, ledger, local_sgd, methods, network, pace, population
from jaxcomm.models import MLP

MODEL = MLP(hidden=(12,), num_classes=4)


class Server(NamedTuple):
    model: Any  # a population of one: the server's model
    starts: Any  # [N, ...] the server model each client started from
    version: jax.Array  # [N] the round of that model
    rounds: jax.Array  # [] rounds closed


def fedbuff(local_steps: int, buffer: int, server_lr: float = 1.0) -> methods.Method:
    """Clients take ``local_steps`` steps from the server's model at their own pace and report their update; when
    ``buffer`` updates have arrived the server adds their mean, each scaled by 1 / sqrt(1 + staleness in rounds),
    and the clients that reported restart from the new model."""

    def build(config, model, *, image_shape, num_classes):
        n = config.num_nodes
        pop = kit.nodes(config, model, image_shape=image_shape, num_classes=num_classes,
                        waits=pace.Waits(every=local_steps, quorum=buffer))

        def start(nodes, key):
            return Server(population.stack([population.node(nodes, 0)]), nodes.params, jnp.zeros(n), jnp.zeros(()))

        def communicate(state, ctx):  # a closing round: the buffered updates, each scaled by its staleness
            s, merged = state.extra, ctx.tick.members & ctx.tick.closes
            weight = merged / jnp.sqrt(1.0 + s.rounds - s.version) / jnp.maximum(merged.sum(), 1)
            update = jax.tree.map(lambda p, q: jnp.tensordot(weight, p - q, 1), pop.params(state), s.starts)
            params = jax.tree.map(lambda g, u: g + server_lr * u[None], s.model.params, update)
            fresh = jax.tree.map(lambda g: jnp.repeat(g, n, axis=0), params)
            rounds = s.rounds + ctx.tick.closes
            server = Server(s.model._replace(params=params), population.where(merged, fresh, s.starts),
                            jnp.where(merged, rounds, s.version), rounds)
            state = pop.with_params(state, population.where(merged, fresh, pop.params(state)))
            return state._replace(extra=server)

        upload = ledger.Round("allgather", 4.0 * pop.num_params, every=local_steps)  # the clients' updates
        return pop.built_with(kit.Communicator(init=start, communicate=communicate, traffic=(upload,),
                                               same_start=True, models_of=lambda state: state.extra.model))

    return methods.Method(f"fedbuff_k{local_steps}_m{buffer}", build, family="fedbuff", score="model",
                          per_run=methods.KIT_PER_RUN)


def config(**kw) -> network.NetworkConfig:
    return network.NetworkConfig(**({"num_nodes": 3, "batch_size": 8, "num_steps": 12, "eval_every": 6,
                                     "backend": "vmap", "step_loop": "scan", "learning_rate": 0.05} | kw))


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


STRAGGLER = clock.Cluster(clock.Compute(1.0, speed=(1.0, 1.0, 3.0)), clock.INSTANT)


def ticks(method, count, dataset, cluster=STRAGGLER):
    built = methods.build(method, config(), MODEL, dataset)
    paced, timeline = methods.at_own_pace(built, cluster, True)
    step, state = jax.jit(paced.step), paced.init(jax.random.PRNGKey(0))
    data = methods.shard_data(method, dataset, config(), timeline=timeline)
    first = state
    for _ in range(count):
        state, _ = step(state, data)
    return first, state, timeline


def test_fedbuff_buffers_fresh_updates_and_scales_a_stale_one_by_hand(tiny_dataset):
    first, state, timeline = ticks(fedbuff(2, 2), 2, tiny_dataset)  # the two fast clients fill the buffer at 2 s
    _, unmerged, _ = ticks(fedbuff(100, 2), 2, tiny_dataset)  # the same two ticks, nothing reported
    g0 = leaves(first.extra.model.params)
    for g, now, pre in zip(g0, leaves(state.extra.model.params), leaves(unmerged.nodes.params), strict=True):
        np.testing.assert_allclose(now[0], g[0] + ((pre[0] - g[0]) + (pre[1] - g[0])) / 2, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(state.extra.version, [1, 1, 0])
    # at 6 s the straggler reports from the model of round 0, two rounds old: the timeline and the method agree
    _, later, timeline = ticks(fedbuff(2, 2), 6, tiny_dataset)
    assert (5, 6.0, 2) in timeline.staleness and float(later.extra.rounds) == 3
    np.testing.assert_array_equal(later.extra.version, [3, 3, 3])


def test_fedbuff_with_a_full_buffer_at_equal_speeds_is_local_sgd(tiny_dataset):
    equal = clock.Cluster(clock.Compute(1.0), clock.INSTANT)
    _, buffered, _ = ticks(fedbuff(3, 3), 9, tiny_dataset, equal)
    _, averaged, _ = ticks(local_sgd.local_sgd(3), 9, tiny_dataset, equal)
    for a, b in zip(leaves(buffered.extra.model.params), leaves(averaged.extra.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_fedbuff_trains_at_its_own_pace_through_the_public_entry_point(tiny_dataset):
    jittery = clock.Cluster(clock.Compute(1.0, speed=(1.0, 1.0, 3.0), jitter=0.2))
    result = methods.train(fedbuff(2, 2), config(num_steps=24), MODEL, tiny_dataset, progress=False,
                           cluster=jittery, own_pace=True)
    last = result["history"][-1]
    steps = last["pace"]["node_steps"]
    assert steps[2] < steps[0] and steps[2] < steps[1]  # the straggler took fewer steps
    assert 0 < last["pace"]["goodput"] <= 1
    assert last["clock"]["seconds"] == pytest.approx(result["timeline"].time[23])
    assert last["bytes"]["total"] > 0 and np.isfinite(last["loss"])
