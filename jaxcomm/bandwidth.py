"""Bytes a real network would move, and the parameter counts they are made of.

Every figure is per node and step. A dense ring all-reduce of float32
gradients moves ``2 (N - 1) / N x 4 x P`` bytes per node (reduce-scatter then
all-gather, each sending ``(N - 1) / N`` of the vector); DiLoCo moves the same
once every H steps; gossip averaging sends a node's whole model to each
neighbour.

References:
  Patarasuk & Yuan (2009), "Bandwidth optimal all-reduce algorithms for
  clusters of workstations"; Lacaille (2018), §1.3.2.2.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

__all__ = ["allreduce_bytes", "num_params", "model_num_params", "bytes_per_node_step", "gossip_bytes"]


def allreduce_bytes(num_nodes: int, num_params: int, *, bytes_per_value: int = 4) -> float:
    """Bytes each node sends per step in a ring all-reduce of ``num_params`` values: ``2 (N-1)/N x 4 x P``.

    Args:
      num_nodes: N >= 1 (N = 1 sends nothing).
      num_params: P, the values all-reduced (a model's parameters).
      bytes_per_value: 4 for float32.
    """
    return 2.0 * (num_nodes - 1) / num_nodes * bytes_per_value * num_params


def num_params(tree: Any) -> int:
    """The number of values in a pytree of arrays or of ``jax.ShapeDtypeStruct`` (e.g. from ``jax.eval_shape``)."""
    return sum(math.prod(np.shape(leaf)) for leaf in jax.tree_util.tree_leaves(tree))


def model_num_params(model: Any, input_shape: tuple[int, ...], *, all_variables: bool = False) -> int:
    """A Flax model's parameter count, from ``jax.eval_shape`` of ``model.init`` (nothing is allocated).

    Args:
      model: a Flax module, initialised as ``model.init(key, x)``.
      input_shape: one example's shape, e.g. ``(32, 32, 3)``; ``x`` is a float32 batch of one.
      all_variables: count every collection (e.g. BatchNorm's ``batch_stats`` too: all a node holds,
        what gossip averaging sends), not only ``params``.
    """
    dummy = jax.ShapeDtypeStruct((1, *input_shape), np.float32)
    variables = jax.eval_shape(lambda x: model.init(jax.random.PRNGKey(0), x), dummy)
    return num_params(variables if all_variables else variables["params"])


def bytes_per_node_step(sent_copies: int, message_bytes: int, *, num_nodes: int, steps: int) -> float:
    """Measured message bytes per node and step: ``sent_copies x message_bytes / (N x steps)``.

    Args:
      sent_copies: messages sent over the run, one copy per receiver (the inbox ``sent`` counter).
      message_bytes: bytes of one message (:func:`jaxcomm.exchange.message_bytes`; 0 when nothing is sent).
      num_nodes: N.
      steps: steps trained (0 steps: 0 bytes).
    """
    if steps == 0:
        return 0.0
    return sent_copies * message_bytes / (num_nodes * steps)


def gossip_bytes(num_neighbours: int, num_values: int, every: int, *, bytes_per_value: int = 4) -> float:
    """Bytes each node sends per step in gossip averaging: ``p x 4 x V / k``.

    Every ``every`` = k steps a node sends all it holds (``num_values`` = V: parameters and model state
    such as BatchNorm statistics, :func:`model_num_params` with ``all_variables=True``) to each of its
    ``num_neighbours`` = p out-neighbours.
    """
    return num_neighbours * bytes_per_value * num_values / every
