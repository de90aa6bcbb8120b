"""Gossip: isolated nodes that average their models with their neighbours', on the kit's communicator.

* :func:`gossip_averaging`: every ``every`` steps each node averages its parameters and BatchNorm statistics with
  its in-neighbours' on a ring (:func:`jaxcomm.topology.mixing_matrix`'s weights): the arithmetic of an isolated
  network with ``gossip_every`` (tested equal).
* :func:`random_peer_gossip`: NoLoCo-style, every ``every`` of its own steps a node averages half and half with one
  peer drawn at random; no fixed graph.

Neither waits for anything: at its own pace (:mod:`jaxcomm.pace`) a node gossips every ``every`` of its own steps,
with the last copies it received (a ring) or its peer's current model (a random peer).

References:
  Boyd et al. (2006), "Randomized gossip algorithms"; Kolehmainen et al. (2025), "NoLoCo".
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxcomm import kit, ledger, methods, population, streams, topology


def gossip_averaging(every: int, *, num_neighbours: int = 2, name: str | None = None) -> methods.Method:
    """Gossip averaging as a method: isolated nodes on a ring of ``num_neighbours`` out-neighbours that average
    their parameters and BatchNorm statistics with their in-neighbours every ``every`` steps; the ledger books one
    copy of a node's model per edge and round.

    At its own pace no node waits: every ``every`` of its own steps a node sends its values to its out-neighbours
    and averages with the last copies it received from its in-neighbours (kept in ``state.extra``, ``[N, D, ...]``
    for in-degree D; a copy arrives within the tick it is sent)."""

    def build(config, model, *, image_shape, num_classes, own_pace=False):
        pop = kit.nodes(config, model, image_shape=image_shape, num_classes=num_classes, static_graph=True)
        senders, weights = topology.in_neighbours(kit.first_graph(config))  # gossip's ring: every seed's

        def communicate(state: kit.NodesState, ctx: kit.Context):
            values, sends = (state.nodes.params, state.nodes.model_state), ctx.tick.steps % every == 0  # [N]
            if state.pace is None:  # lockstep: every node at once, with its in-neighbours' current values
                mixed = population.when_due(sends[0], lambda v: (topology.mix(topology.mixing_matrix(state.graph),
                                                                                v),), values)[0]
                return state._replace(nodes=state.nodes._replace(params=mixed[0], model_state=mixed[1]))
            sends = ctx.tick.due & sends
            arrived = sends[senders]  # [N, D]: the copies that reach each receiver now
            copies = jax.tree.map(lambda copy, value: jnp.where(
                arrived.reshape(arrived.shape + (1,) * (copy.ndim - 2)), value[senders], copy), state.extra, values)
            mixed = jax.tree.map(lambda value, copy: (weights[:, 0].reshape((-1,) + (1,) * (value.ndim - 1)) * value
                                                      + jnp.einsum("nd,nd...->n...", weights[:, 1:], copy)
                                                      ).astype(value.dtype), values, copies)
            params, model_state = population.where(sends, mixed, values)
            return state._replace(nodes=state.nodes._replace(params=params, model_state=model_state), extra=copies)

        first_copies = (lambda nodes, key: jax.tree.map(lambda v: v[senders], (nodes.params, nodes.model_state)))
        traffic = (ledger.Round("neighbours", 4.0 * pop.node_values, every=every, edges=pop.edges),)
        return pop.built_with(kit.Communicator(init=first_copies if own_pace else None, communicate=communicate,
                                               traffic=traffic))

    return methods.Method(name or f"gossip_{every}", build, family="gossip", build_keywords=("own_pace",),
                          configure=lambda c: c.replace(topology="ring", num_neighbours=num_neighbours))


def random_peer_gossip(every: int, *, name: str | None = None) -> methods.Method:
    """NoLoCo-style gossip (Kolehmainen et al. 2025, "NoLoCo"): every ``every`` of its own steps a node fetches the
    current model of one peer drawn at random (stream ``"random_peer"``) and averages with it, parameters and
    BatchNorm statistics, half and half; no all-reduce and no fixed graph. Waits for nothing: at its own pace the
    peer's model is the one after its last completed step. The ledger books one model per node and round."""

    def build(config, model, *, image_shape, num_classes):
        pop, n = kit.nodes(config, model, image_shape=image_shape, num_classes=num_classes), config.num_nodes

        def communicate(state: kit.NodesState, ctx: kit.Context):
            peers = (jnp.arange(n) + jax.random.randint(streams.named(ctx.key, "random_peer"), (n,), 1,
                                                        max(n, 2))) % n  # anyone but itself
            values = (state.nodes.params, state.nodes.model_state)
            mixed = jax.tree.map(lambda v: ((v + v[peers]) / 2).astype(v.dtype), values)
            params, model_state = population.where(ctx.tick.steps % every == 0, mixed, values)
            return state._replace(nodes=state.nodes._replace(params=params, model_state=model_state))

        traffic = (ledger.Round("neighbours", 4.0 * pop.node_values, every=every, edges=n, blocking=False),)
        return pop.built_with(kit.Communicator(communicate=communicate, traffic=traffic))

    return methods.Method(name or f"random_peer_{every}", build, family="gossip")
