"""Leader SGD (LSGD): isolated local steps, and every ``tau`` steps a pull of every node toward the leader, the node
of lowest training loss.

Teng, Gao, Chalus, Choromanska, Goldfarb, Weller (2019), "Leader Stochastic Gradient Descent for Distributed
Training of Deep Learning Models", NeurIPS (arXiv 1905.10395). The objective adds ``lambda / 2 ||x_i - x~||^2`` to
every worker's loss, ``x~`` the leader (eq. 1); the update is the local gradient step plus the pull
``- lambda (x_i - x~)`` (eq. 2). The LSGD algorithm (Algorithm 1, "asynchronous") applies the pull every ``tau``
steps: each worker takes its step and, when the workers' steps together reach a multiple of ``N tau``, the leader is
chosen, ``x~ = argmin_i E f(x_i; xi_i)``, and every worker moves ``x_i <- x_i - lambda (x_i - x~)``.

Where the simulator had to choose, and what each choice follows:

* **One leader.** The single-group case of the multi-leader algorithm (one group: the local leader is the global
  one, the reference code's ``is_lcomm = False``); ``pull`` is lambda (``lambda_G``), ``every`` is tau.
* **Defaults.** ``pull = 0.1`` and ``every = 16``: the reference's pulling strengths (``options.py`` and
  ``train.sh``: ``c1 = c2 = 0.1``) and the middle of the communication periods its script sweeps (4, 16, 64).
* **Order.** The gradient step, then the leader and the pull, within the same step (Algorithm 1): the pull moves
  the parameters after this step's update toward the leader's after its own.
* **The leader.** The node of lowest mean training loss (the minibatch losses of the step, at the parameters before
  each update) over its steps since the last refresh: the algorithm's ``argmin E f`` estimated, as the paper's
  analysis of a stochastic leader allows (the lowest realized estimate) and as the reference code does (a running
  mean of its last ``avg_size`` losses, ``avg_size = l_comm``, tau, in ``train.sh``). Ties: the lowest index.
* **What moves.** The parameters only: BatchNorm statistics and the optimiser state stay each node's own (the
  reference mixes the parameter vector; its buffer synchronisation is commented out).
* **What is evaluated.** Every node's model (the kit's default, as for the other methods); the paper reports its
  center variable, the workers' mean (the reference's ``dist_lsgd_test``), which this method does not build.
* **What travels, blocking.** Per refresh, an all-gather of every node's loss (4 bytes each, booked as payload) and
  the leader's parameters broadcast to the N - 1 others (``4 P`` bytes along N - 1 edges, parameters); both
  blocking, as the reference's collectives and barrier (``async_op=False``). The reference's message also carries
  the sender's rank and learning rate (12 bytes); only the loss is booked.
* **Counting steps.** A refresh is a round of every node (:func:`jaxcomm.pace.rounds_of`): in lockstep every
  ``every`` ticks; at their own pace (:mod:`jaxcomm.pace`) once every node has taken ``every`` of its own steps,
  the fast ones waiting for the slow, so each leader is chosen from ``every`` losses of every node. The paper
  counts the steps of all workers together (a round every ``N tau`` of them, the fast workers taking more); in
  lockstep the two are the same.

The kit's communicate hook does not see the step's loss, so the step is the kit's local step (an isolated
network's draws and update, :meth:`jaxcomm.kit.Population.local_step`) with the loss passed on
(:meth:`jaxcomm.kit.Population.built`); at their own pace the kit holds the nodes that are neither due nor in a
closing round, and their running losses with them.

References:
  Teng et al. (2019): the objective and update (eq. 1-2), Algorithm 1 (LSGD, asynchronous) and the analysis of a
  stochastic leader, as the authors' NeurIPS 2019 poster states them (yunfei-teng/LSGD,
  ``docs/LSGD_Poster_NeurIPS2019.pdf``); the reference code, ``codes/worker_dist_optim.py`` (``dist_lsgd_train``),
  ``codes/worker_local_optim.py`` (the running loss), ``codes/options.py``, ``train.sh``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxcomm import kit, ledger, methods, pace, population
from jaxcomm.validation import is_int, is_real, require


def pull_toward(params, leader: jax.Array, strength: float | jax.Array):
    """Every node moved a fraction ``strength`` of the way to the leader: ``x_i - strength (x_i - x_leader)``.

    Args:
      params: every node's values, leaves ``[N, ...]``.
      leader: ``[] int32`` the leader's index (it stays where it is).
      strength: lambda, ``[]``: 0 changes nothing, 1 makes every node the leader.

    Returns:
      The pulled values, leaves ``[N, ...]`` of the same dtypes.
    """
    return jax.tree.map(lambda x: (x - strength * (x - x[leader])).astype(x.dtype), params)


def leader_of(loss_sum: jax.Array, steps: jax.Array, members: jax.Array) -> jax.Array:
    """The leader: the member of lowest mean training loss, ``loss_sum / steps`` (the lowest index among equals).

    Args:
      loss_sum: ``[N]`` each node's training losses summed since the last refresh.
      steps: ``[N] int32`` the steps they came from (a node of none is never the leader).
      members: ``[N] bool`` the nodes that may lead.

    Returns:
      ``[] int32`` the leader's index.
    """
    mean = jnp.where(members & (steps > 0), loss_sum / jnp.maximum(steps, 1), jnp.inf)
    return jnp.argmin(mean).astype(jnp.int32)


def leader_sgd(pull: float = 0.1, every: int = 16, *, name: str | None = None) -> methods.Method:
    """LSGD as a method: local steps on every node and, every ``every`` steps, every node pulled a fraction
    ``pull`` of the way toward the node of lowest mean training loss over those steps (module docstring).

    ``pull`` is data of the step (``hyper``): a sweep may vary it run by run. ``pull = 0`` is an isolated network.
    The ledger books, per refresh, every node's loss (an all-gather, payload) and the leader's parameters to the
    N - 1 others (parameters); at their own pace the nodes wait for each other at every refresh."""
    require(is_real(pull) and 0.0 <= pull <= 1.0, "pull", "a number in [0, 1]", pull)
    require(is_int(every) and every >= 1, "every", "an integer >= 1", every)

    def build(config, model, *, image_shape, num_classes):
        n = config.num_nodes
        pop = kit.nodes(config, model, image_shape=image_shape, num_classes=num_classes,
                        waits=pace.rounds_of(every))

        def communicate(state: kit.NodesState, ctx: kit.Context) -> kit.NodesState:
            tick, (total, steps) = ctx.tick, state.extra  # the tick's loss [N]: 0 where a node held
            total, steps = total + jnp.where(tick.due, ctx.info.loss, 0.0), steps + tick.due
            refresh = tick.closes & tick.members  # [N]: the nodes of a round closing now
            leader = leader_of(total, steps, refresh)
            pulled = pull_toward(pop.params(state), leader, ctx.settings.hyper["pull"])
            reset = lambda v: jnp.where(refresh, jnp.zeros_like(v), v)  # noqa: E731
            return pop.with_params(state, population.where(refresh, pulled, pop.params(state)))._replace(
                extra=(reset(total), reset(steps)))

        traffic = (ledger.Round("allgather", 4.0, every=every, kind="payload"),  # every node's loss
                   ledger.Round("neighbours", 4.0 * pop.num_params, every=every, edges=n - 1))  # the leader's
        return pop.built_with(kit.Communicator(
            init=lambda nodes, key: (jnp.zeros(n), jnp.zeros(n, jnp.int32)), communicate=communicate,
            traffic=traffic, extra_per_node=True))

    return methods.Method(name or f"lsgd_{pull:g}_t{every}", build, family="leader", hyper={"pull": pull})
