"""FedBuff: buffered asynchronous aggregation, on the kit's communicator. No client ever waits.

Nguyen, Malik, Zhan, Yousefpour, Rabbat, Malek, Huba (2022), "Federated Learning with Buffered Asynchronous
Aggregation", AISTATS (arXiv 2106.06639), Algorithm 1. Every client, at its own pace:

1. downloads the server's model ``x`` (version ``v_i``: the server steps taken when it did) and takes H local steps
   from it (client optimiser default plain SGD at the config's learning rate);
2. uploads its update ``Delta_i = y_i - x_{v_i}``, which the server adds to its buffer scaled by the staleness
   ``s(t - v_i) = 1 / sqrt(1 + t - v_i)`` (the paper's §5 choice; ``t`` the server steps taken now), and at once
   downloads the server's current model and starts again (no waiting: the round it belongs to is its own);
3. when the buffer holds ``buffer_size`` updates the server steps: ``x <- x + server_lr x (buffered sum) / count``
   and empties it.

Where the simulator had to choose:

* **One tick, many reports.** Clients whose H-th step ends in the same tick report in one go (node order does not
  matter: their sum is added); the buffer may then overfill, and the server step divides by the updates it holds
  (``count >= buffer_size``), the mean as the paper's ``1 / K`` with every report counted.
* **What a reporting client restarts from.** The server's model after this tick's step, if one was taken (the
  paper's client downloads the model current at its request), with a fresh client optimiser state.
* **Clients are the nodes.** M = N: every client is always training (the paper's concurrency = M). A cohort of K
  of M clients drawn per report is :mod:`jaxcomm.federated`'s, for synchronous rounds.
* **In lockstep** (no own pace) every client reports at steps H, 2H, ...: with ``buffer_size <= N`` the server steps
  then with the plain mean of the N fresh updates, FedAvg's round to float rounding (``x + mean(y - x)`` against
  ``x - (x - mean y)``; ``tests/test_fedbuff.py``).

Traffic: a client uploads its P float32 parameters and downloads the model once per H of its own steps, a
non-blocking ``"server"`` :class:`jaxcomm.ledger.Round` (booked per each client's own steps at its own pace).
Evaluation reads the server's model (``score="model"``). Memory: the model each client started from and its
version, ``4 P + 4`` bytes per client, and the buffer (P floats).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxcomm import kit, ledger, methods, population
from jaxcomm.validation import is_int, is_real, require


class FedBuffState(NamedTuple):
    """``state.extra`` of a FedBuff run.

    Attributes:
      model: the server's model, a population of one (leaves ``[1, ...]``: parameters and model state).
      starts: ``([N, ...], [N, ...])`` the server parameters and model state each client started from.
      version: ``[N] int32`` the server steps taken when each client started.
      steps: ``[] int32`` server steps taken.
      buffer: ``([1, ...], [1, ...])`` the staleness-scaled updates (parameters and model state: BatchNorm's
        statistics travel and are aggregated like the parameters, as FedAvg's) since the last server step, summed.
      count: ``[] int32`` updates in the buffer.
    """

    model: population.NodeState
    starts: Any
    version: jax.Array
    steps: jax.Array
    buffer: Any
    count: jax.Array


def staleness_weight(staleness: jax.Array) -> jax.Array:
    """``1 / sqrt(1 + staleness)`` (Nguyen et al. 2022, §5), ``staleness [N]`` in server steps."""
    return jax.lax.rsqrt(1.0 + staleness.astype(jnp.float32))


def communicator(pop: kit.Population, local_steps: int, buffer_size: int) -> kit.Communicator:
    """FedBuff's :class:`jaxcomm.kit.Communicator` on ``pop`` (its N nodes the clients, its optimiser theirs): the
    server's model and buffer in ``state.extra`` (:class:`FedBuffState`), ``hyper["server_lr"]`` its rate."""
    n, h = pop.config.num_nodes, local_steps

    def init(nodes, key):  # every client starts from the server's model, version 0, the buffer empty
        server = population.stack([population.node(nodes, 0)])
        zeros = jax.tree.map(jnp.zeros_like, (server.params, server.model_state))
        return FedBuffState(server, (nodes.params, nodes.model_state), jnp.zeros(n, jnp.int32),
                            jnp.zeros((), jnp.int32), zeros, jnp.zeros((), jnp.int32))

    def communicate(state, ctx):
        s, nodes = state.extra, state.nodes
        reports = ctx.tick.due & (ctx.tick.steps % h == 0)  # [N] the clients whose H-th step ended now
        weight = jnp.where(reports, staleness_weight(s.steps - s.version), 0.0)
        clients = (nodes.params, nodes.model_state)  # what a client reports: parameters and model state
        added = jax.tree.map(lambda y, x: jnp.tensordot(weight, y - x, 1)[None], clients, s.starts)
        buffered = jax.tree.map(jnp.add, s.buffer, added)
        count = s.count + jnp.sum(reports, dtype=jnp.int32)
        full = count >= buffer_size
        rate = ctx.settings.hyper["server_lr"] / jnp.maximum(count, 1)
        model = jax.tree.map(lambda x, b: jnp.where(full, x + rate * b, x), (s.model.params, s.model.model_state),
                             buffered)
        steps = s.steps + full.astype(jnp.int32)
        fresh = jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *x.shape[1:])), model)
        params, model_state = population.where(reports, fresh, clients)  # who reported restarts from the server
        optimizer = pop.node_step.step_for(ctx.settings.learning_rate).optimizer
        opt_state = population.where(reports, jax.vmap(optimizer.init)(params), nodes.opt_state)
        server = FedBuffState(
            s.model._replace(params=model[0], model_state=model[1]), population.where(reports, fresh, s.starts),
            jnp.where(reports, steps, s.version), steps,
            jax.tree.map(lambda b: jnp.where(full, jnp.zeros_like(b), b), buffered), jnp.where(full, 0, count))
        return state._replace(nodes=population.NodeState(params, model_state, opt_state), extra=server)

    upload = ledger.Round("server", 4.0 * pop.num_params, every=h, blocking=False)  # per H of a client's own steps
    return kit.Communicator(init=init, communicate=communicate, traffic=(upload,), same_start=True,
                            models_of=lambda state: state.extra.model)


def fedbuff(local_steps: int, buffer_size: int, *, server_lr: float = 1.0, client_optimizer=None,
            name: str | None = None) -> methods.Method:
    """FedBuff (Nguyen et al. 2022, Algorithm 1) as a method: every client takes ``local_steps`` steps at its own
    pace, uploads its staleness-scaled update into the server's buffer and restarts from the current model; every
    ``buffer_size`` updates the server adds their mean times ``server_lr``. No client waits for another.

    Args:
      local_steps: H >= 1, a client's steps per report.
      buffer_size: updates per server step, >= 1.
      server_lr: the server's rate, > 0 (data of the step: ``hyper["server_lr"]``, swept per run).
      client_optimizer: a function of the learning rate (default ``optax.sgd``: the config's rate, swept as data)
        or a transformation used as it is; a client's state starts afresh at every download.
      name: default ``fedbuff_h<H>_z<buffer_size>``.

    Returns:
      The :class:`jaxcomm.methods.Method` (family "federated", scored by the server's model).
    """
    require(is_int(local_steps) and local_steps >= 1, "local_steps", "an integer >= 1", local_steps)
    require(is_int(buffer_size) and buffer_size >= 1, "buffer_size", "an integer >= 1", buffer_size)
    require(is_real(server_lr) and 0 < server_lr < float("inf"), "server_lr", "a finite number > 0", server_lr)

    def build(config, model, *, image_shape, num_classes):
        pop = kit.nodes(config, model, image_shape=image_shape, num_classes=num_classes,
                        optimizer=client_optimizer or optax.sgd)
        return pop.built_with(communicator(pop, local_steps, buffer_size))

    return methods.Method(name or f"fedbuff_h{local_steps}_z{buffer_size}", build, family="federated",
                          score="model", hyper={"server_lr": server_lr})
