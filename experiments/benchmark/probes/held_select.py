"""Issue 60: what keeping only the due nodes costs a stacked population, and where it goes.

    python -m experiments.benchmark.probes.held_select > results/benchmark/pace/held_select.md

64 student MLPs (784-32-32-10, Adam), batch 32, vmapped, 200 steps in one ``lax.scan``, 80 % of the nodes due
at each step: the plain step (every node steps) against ways of holding the nodes not due: a select over the
lifted output (:func:`jaxcomm.population.where`, what ``lift_held`` does), a select inside the lift (each node
its own), the parameters moved by a masked update (an add, the moments selected), and the held state passed
through ``lax.optimization_barrier`` first. Interleaved rounds, medians; beside each, the copies of state-shaped
arrays in its compiled program (XLA's copy insertion: a copy is a pass over the population's memory).
"""

from __future__ import annotations

import re
import statistics
import time

import jax
import jax.numpy as jnp
import optax

from jaxcomm import population
from jaxcomm.harness import results
from jaxcomm.models import MLP

N, BATCH, STEPS, ROUNDS, DUE = 64, 32, 200, 7, 0.8


def variants() -> dict:
    """Each way of holding the nodes not due: ``(nodes, t) -> (nodes, loss [N])``, a scan body."""
    model, optimizer = MLP(hidden=(32, 32), dropout=0.0), optax.adam(1e-3)

    def loss_fn(params, model_state, x, y):
        logits, _ = model.apply({"params": params}, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), (model_state, None)

    step = population.make_train_step(loss_fn, optimizer)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    xs = jax.random.normal(keys[0], (STEPS, N, BATCH, 784))
    ys = jax.random.randint(keys[1], (STEPS, N, BATCH), 0, 10)
    dues = jax.random.bernoulli(keys[2], DUE, (STEPS, N))
    lifted = jax.vmap(step)
    keep = lambda d, new, old: jax.tree_util.tree_map(lambda a, b: jnp.where(d, a, b), new, old)

    def plain(nodes, t):
        new, (loss, _) = lifted(nodes, xs[t], ys[t])
        return new, loss

    def select_after(nodes, t):
        new, (loss, _) = lifted(nodes, xs[t], ys[t])
        return population.where(dues[t], new, nodes), jnp.where(dues[t], loss, 0)

    def select_inside(nodes, t):
        def one(d, node, x, y):
            new, (loss, _) = step(node, x, y)
            return keep(d, new, node), jnp.where(d, loss, 0)
        return jax.vmap(one)(dues[t], nodes, xs[t], ys[t])

    def masked_update(nodes, t):
        def one(d, node, x, y):
            grads, model_state, (loss, _) = step.gradients(node, x, y)
            updates, opt_state = optimizer.update(grads, node.opt_state, node.params)
            params = jax.tree_util.tree_map(lambda p, u: p + jnp.where(d, u, 0), node.params, updates)
            return population.NodeState(params, model_state, keep(d, opt_state, node.opt_state)), jnp.where(d, loss, 0)
        return jax.vmap(one)(dues[t], nodes, xs[t], ys[t])

    def barrier(nodes, t):
        new, (loss, _) = lifted(nodes, xs[t], ys[t])
        return population.where(dues[t], new, jax.lax.optimization_barrier(nodes)), jnp.where(dues[t], loss, 0)

    init = lambda key: (lambda p: population.NodeState(p, {}, optimizer.init(p)))(
        model.init(key, jnp.zeros((1, 784)))["params"])
    nodes = jax.vmap(init)(jax.random.split(jax.random.PRNGKey(1), N))
    bodies = {"every node steps": plain, "select after the lift (lift_held)": select_after,
              "select inside the lift": select_inside, "masked update": masked_update,
              "select, held state behind a barrier": barrier}
    return nodes, {name: jax.jit(lambda n, body=body: jax.lax.scan(body, n, jnp.arange(STEPS)))
                   for name, body in bodies.items()}


def state_copies(compiled_text: str, nodes) -> int:
    """Copies, in the compiled program, of arrays shaped as the population's state leaves ``[N, ...]``."""
    shapes = {f"[{','.join(map(str, leaf.shape))}]" for leaf in jax.tree_util.tree_leaves(nodes)}
    found = re.findall(r"= \w+(\[[0-9,]*\])\{[0-9,]*\} copy\(", compiled_text)
    return sum(shape in shapes for shape in found)


def main() -> None:
    nodes, jitted = variants()
    runs = {name: run.lower(nodes).compile() for name, run in jitted.items()}  # compiled once: read, then run
    copies = {name: state_copies(run.as_text(), nodes) for name, run in runs.items()}
    for run in runs.values():
        jax.block_until_ready(run(nodes))
    seconds = {name: [] for name in runs}
    for _ in range(ROUNDS):
        for name, run in runs.items():
            start = time.perf_counter()
            jax.block_until_ready(run(nodes))
            seconds[name].append(time.perf_counter() - start)
    rate = {name: STEPS / statistics.median(times) for name, times in seconds.items()}
    base = rate["every node steps"]
    print(f"Measured on {results.device_description()}, commit {results.git_commit()}: "
          f"`{results.command_line()}`. {N} MLPs, {STEPS} steps a call, {DUE:.0%} due, medians of {ROUNDS} "
          "interleaved rounds.\n")
    print("| step | steps/s | of every node stepping | copies of state-shaped arrays in the program |")
    print("|---|---|---|---|")
    for name in runs:
        print(f"| {name} | {rate[name]:,.0f} | {rate[name] / base:.2f}x | {copies[name]} |")


if __name__ == "__main__":
    main()
