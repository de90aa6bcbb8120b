"""Stochastic Gradient Push (SGP) and Overlap SGP (OSGP): push-sum gossip after every local step, on the kit's
communicator.

Assran, Loizou, Ballas, Rabbat (2019), "Stochastic Gradient Push for Distributed Deep Learning", ICML (arXiv
1811.10792). Every node i keeps a push-sum weight ``w_i`` (1 at the start) and a numerator ``x_i``; the model it
is evaluated with and takes its gradients at is the de-biased ``z_i = x_i / w_i``. Every step (§3, Algorithm 1):

1. the local step on the numerator: ``x_i <- x_i - lr grad F_i(z_i)``;
2. push-sum with uniform weights: node i keeps half of ``(x_i, w_i)``, pushes the other half to its one out-peer of
   the step, ``(i + 2**(t mod ceil(log2 N))) mod N`` (:func:`jaxcomm.topology.one_peer_exponential`), and adds what
   it received;
3. ``z_i <- x_i / w_i``.

Where the simulator had to choose, and what each choice follows:

* **What is kept.** The node parameters are ``z`` (what Algorithm 1 evaluates and differentiates); ``state.extra``
  holds ``w [N]`` and the mass in flight; ``x = w z`` is rebuilt within the step, never stored.
* **The local step.** The kit's update acts on ``z``; with ``z'`` its result the numerator becomes ``x + (z' - z)``:
  Algorithm 1's ``x - lr grad F(z)`` exactly under SGD, and under Adam (the kit's default) or momentum the
  optimiser's step applied to the numerator, as the reference code does (``gossip/distributed.py``: its backward
  hook turns the parameters into the numerator before ``optimizer.step()``). The ``gradients`` hook keeps ``z``
  from before the update for this, within the step.
* **Mixing.** 1/2 kept and 1/2 to one peer, cycling through the peers 2^0, 2^1, ... hops away (§5 and the
  appendix; the reference's ``UniformMixing``, ``1 / (1 + out-degree)``, on ``NPeerDynamicDirectedExponentialGraph``
  with one peer per iteration).
* **What travels.** The parameters and the weight, ``4 P + 4`` bytes to one peer per node and step (the reference
  appends ``ps_weight`` to the flattened parameters). BatchNorm statistics (the model state) stay each node's own:
  the paper is silent, and the reference gossips ``module.parameters()``, never the buffers.
* **Blocking.** SGP: a node mixes its in-peer's message of step k before its step k + 1 (Algorithm 1; the
  reference's next forward pass waits for it), so each step pays one transfer: a blocking "neighbours" round
  every step. No node waits for a collective of the others, so it states no ``waits``; at their own pace each node
  waits its push's transfer (:func:`jaxcomm.clock.round_seconds` of the round) after every step before its next
  (:func:`jaxcomm.pace.of_run`), as the lockstep clock charges it. OSGP: the transfer overlaps the next steps'
  compute (§3, "Overlap SGP"): a non-blocking round.
* **Overlap.** τ-OSGP (§3): a message sent at step t enters its receiver's mix at step t + τ. The sender keeps its
  half at once (the reference's ``transfer_params``), so the weights and those in flight sum to N at every step.
  ``overlap=1`` is the reference's OSGP (a message is mixed in at the next iteration); ``overlap=None`` takes each
  edge's delay from the run's cluster (:func:`jaxcomm.clock.delivery_steps` of ``4 P + 4`` bytes, at least 1).
  The mass in flight is a fixed buffer, per receiver and steps to go (sums: push-sum is linear, so what is bound
  for the same receiver and step adds up): ``(max delay + 1) x P`` floats per node.
* **Order within a step.** The push, then the absorption of what has arrived (Algorithm 1's
  ``x^(k+1) = sum_j p_ij x_j^(k+1/2)``), for both: OSGP with no delay is SGP.
* **At their own pace** (the paper's nodes step together: this is the simulator's choice). A node pushes only on
  its own steps, to the peer of its own step count; what reaches a node that is not due waits in its buffer until
  its next step (its parameters, held by the kit, do not move); delays count the receiver's own steps. Push-sum
  mass is conserved through all of it (``tests/test_sgp.py``).

References:
  Assran et al. (2019), §3 (Algorithm 1, Overlap SGP), §5 and the appendix (graph and mixing);
  facebookresearch/stochastic_gradient_push, ``gossip/`` (``distributed.py``, ``gossiper.py``,
  ``graph_manager.py``, ``mixing_manager.py``); Kempe, Dobra, Gehrke (2003) (push-sum).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxcomm import clock, kit, ledger, methods, streams, topology


def push_sum(x: jax.Array, w: jax.Array, inflight: tuple[jax.Array, jax.Array], peers: jax.Array,
             delays: jax.Array, due: jax.Array) -> tuple[jax.Array, jax.Array, tuple[jax.Array, jax.Array]]:
    """One push-sum step of the nodes due: each keeps half of its numerator and weight and pushes the other half to
    its peer, to arrive ``delays`` of the receiver's steps later; then every node due adds what has arrived for it
    and moves its buffer one step on. ``x.sum(0) + inflight[0].sum((0, 1))`` and ``w.sum() + inflight[1].sum()`` do
    not change.

    Args:
      x: ``[N, P]`` the push-sum numerators (after the local step).
      w: ``[N]`` the push-sum weights.
      inflight: ``(x [N, S, P], w [N, S])`` the mass on its way to each node: slot s enters its mix s of its own
        steps from now (slot 0 at its next step: this one where it is due).
      peers: ``[N] int32`` each node's out-peer, -1 for none (it keeps everything).
      delays: ``[N] int32`` in ``[0, S)``, the receiver steps each node's message spends in flight.
      due: ``[N] bool`` the nodes that step now; the others neither send nor absorb.

    Returns:
      ``(x [N, P], w [N], inflight)`` after the step; ``x / w`` are the de-biased parameters of the nodes due.
    """
    sends = due & (peers >= 0)
    half_x, half_w = jnp.where(sends[:, None], 0.5 * x, 0.0), jnp.where(sends, 0.5 * w, 0.0)
    to = jnp.maximum(peers, 0)
    in_x, in_w = inflight[0].at[to, delays].add(half_x), inflight[1].at[to, delays].add(half_w)
    x = x - half_x + jnp.where(due[:, None], in_x[:, 0], 0.0)
    w = w - half_w + jnp.where(due, in_w[:, 0], 0.0)

    def on(buffer):  # the nodes due: one step closer
        moved = jnp.concatenate([buffer[:, 1:], jnp.zeros_like(buffer[:, :1])], axis=1)
        return jnp.where(due.reshape((-1,) + (1,) * (buffer.ndim - 1)), moved, buffer)

    return x, w, (on(in_x), on(in_w))


def _delays(n: int, nbytes: float, overlap: int | None, cluster: clock.Cluster | None) -> np.ndarray:
    """``[N, N] int32`` receiver steps from the push to the mix: ``overlap`` on every edge, or (None) the cluster's
    delivery (at least 1; 1 without a cluster)."""
    if overlap is not None or cluster is None:
        return np.full((n, n), 1 if overlap is None else overlap, np.int32)
    steps = clock.delivery_steps(cluster, topology.full(n), nbytes, copies=np.ones(n, np.int32))
    return np.maximum(steps, 1).astype(np.int32)


def _push_sum_method(name: str, overlap: int | None) -> methods.Method:
    def build(config, model, *, image_shape, num_classes, cluster=None):
        pop, n = kit.nodes(config, model, image_shape=image_shape, num_classes=num_classes), config.num_nodes
        graph, nbytes = topology.one_peer_exponential(n), 4.0 * pop.num_params + 4  # the parameters and w
        delays = jnp.asarray(_delays(n, nbytes, overlap, cluster))
        slots, nodes = int(delays.max()) + 1, jnp.arange(n)

        def init(initial, key):  # w = 1, nothing in flight
            return jnp.ones(n), (jnp.zeros((n, slots, pop.num_params)), jnp.zeros((n, slots)))

        def communicate(state, ctx):
            w, inflight = state.extra
            z, updated = pop.flat_params(ctx.before), pop.flat_params(state)  # [N, P]: z before the update
            key = streams.named(ctx.key, "sgp")
            rows = jax.vmap(lambda i, t: graph(key, t)[i])(nodes, ctx.tick.steps - 1)  # each node's own step
            peers = jnp.where(rows.any(1), jnp.argmax(rows, 1), -1)
            x, w, inflight = push_sum(w[:, None] * z + (updated - z), w, inflight, peers,
                                      delays[nodes, jnp.maximum(peers, 0)], ctx.tick.due)
            mixed = jnp.where(ctx.tick.due[:, None], x / w[:, None], updated)  # the others: held by the kit
            return pop.with_flat_params(state, mixed)._replace(extra=(w, inflight))

        sent = (ledger.Round("neighbours", nbytes, edges=n if n > 1 else 0, blocking=overlap == 0),)
        return pop.built_with(kit.Communicator(init=init, communicate=communicate, traffic=sent))

    return methods.Method(name, build, family="gossip", per_run=methods.KIT_PER_RUN, build_keywords=("cluster",),
                          configure=lambda c: c.replace(topology="exponential"))


def sgp(*, name: str = "sgp") -> methods.Method:
    """Stochastic Gradient Push (Assran et al. 2019, Algorithm 1) as a method: after its local step every node
    pushes half of its push-sum numerator and weight to one peer of the one-peer exponential graph and mixes in what
    it received; it is evaluated with ``z = x / w``. The ledger books ``4 P + 4`` bytes per node and step, a blocking
    round (each node waits for its in-peer's message, never for a collective).

    Args:
      name: how tables call it.

    Returns:
      The :class:`jaxcomm.methods.Method` (family "gossip"; the config's topology set to "exponential", the union
      of its graphs, for the tables).
    """
    return _push_sum_method(name, 0)


def osgp(overlap: int | None = 1, *, name: str | None = None) -> methods.Method:
    """Overlap SGP (Assran et al. 2019, §3): SGP whose messages enter their receiver's mix ``overlap`` of its steps
    after they are sent, the transfer overlapping the compute (a non-blocking round of ``4 P + 4`` bytes per node
    and step). Push-sum weight is conserved counting the mass in flight.

    Args:
      overlap: τ >= 1, the receiver steps a message spends in flight; None: each edge's from the run's cluster
        (:func:`jaxcomm.clock.delivery_steps`, at least 1; 1 without a cluster).
      name: how tables call it (default ``"osgp_<overlap>"``, ``"osgp_links"`` for None).

    Returns:
      The :class:`jaxcomm.methods.Method`.

    Raises:
      ValueError: if ``overlap`` is not None or an integer >= 1.
    """
    if overlap is not None and not (isinstance(overlap, int) and not isinstance(overlap, bool) and overlap >= 1):
        raise ValueError(f"overlap must be an integer >= 1 or None, got {overlap!r}")
    return _push_sum_method(name or f"osgp_{'links' if overlap is None else overlap}", overlap)
