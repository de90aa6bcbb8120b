"""Sparse parameter averaging over the neighbour graph (SPARTA, gossiped): a method in one file.

Every node takes its local step (the kit's, :mod:`jaxcomm.kit`) and then averages a random fraction ``p`` of its
parameters with its in-neighbours (gossip weights on the run's graph). The coordinates come from a stream every
node shares (:func:`jaxcomm.streams.named`), so only values travel: ``p x P`` float32 values per out-edge and
step, booked as parameters. ``p = 0`` is an isolated network, ``p = 1`` gossip every step. SPARTA's authors
average over all nodes and name gossip as future work.

References:
  EXO Gym, ``strategy/sparta.py`` (sparse parameter averaging every step, a shared random index set).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxcomm import kit, ledger, methods, streams, topology


def sparse_mix(key: jax.Array, fraction: float | jax.Array, weights: jax.Array, params):
    """``params`` (leaves ``[N, ...]``) with a random ``fraction`` of the coordinates, the same on every node,
    replaced by the mix ``weights [N, N] @ params`` (:func:`jaxcomm.topology.mix`)."""
    leaves, treedef = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(key, len(leaves))
    mixed = jax.tree_util.tree_leaves(topology.mix(weights, params))
    return treedef.unflatten([jnp.where(jax.random.bernoulli(k, fraction, p.shape[1:]), x, p)
                              for k, x, p in zip(keys, mixed, leaves, strict=True)])


def sparta(fraction: float, num_neighbours: int = 0, *, name: str | None = None) -> methods.Method:
    """SPARTA as a method: every step each node averages a random ``fraction`` of its parameters (the same
    coordinates on every node) with its in-neighbours, on a ring of ``num_neighbours`` (0: the config's graph).
    ``fraction`` is data of the step (``hyper``): a sweep may vary it run by run."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction!r}")
    ring = (lambda c: c.replace(topology="ring", num_neighbours=num_neighbours)) if num_neighbours else None

    def build(config, model, *, image_shape, num_classes):
        pop = kit.nodes(config, model, image_shape=image_shape, num_classes=num_classes, static_graph=True)

        def communicate(state: kit.NodesState, ctx: kit.Context):  # the same coordinates on every node
            mask_key, p = streams.named(ctx.key, "sparta"), ctx.settings.hyper["fraction"]
            return pop.with_params(state, sparse_mix(mask_key, p, topology.mixing_matrix(state.graph),
                                                     pop.params(state)))

        def traffic(hyper):  # every step, blocking: p x P float32 values along each edge (the mask's expected count)
            p = hyper.get("fraction", fraction)
            return (ledger.Round("neighbours", 4.0 * round(p * pop.num_params), edges=pop.edges),)

        return pop.built_with(kit.Communicator(communicate=communicate, traffic=traffic))

    label = name or f"sparta_{fraction:g}" + (f"_ring{num_neighbours}" if num_neighbours else "")
    return methods.Method(label, build, family="sparse_averaging", configure=ring, hyper={"fraction": fraction})
