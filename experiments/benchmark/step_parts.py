"""One node-step of a population split into its parts, each timed apart against its floor (issue 41).

A step of a classifier node is: draw a minibatch (rows of its own shard, a gather of uint8 images, one-hot
targets), forward and backward, and the optimizer's update. Each part is jitted alone over the whole population
(lifted by one backend, as the engine lifts it) and timed; its floor is what the machine could not beat:

* forward + backward: the FLOPs of its matrix products and convolutions (counted from its jaxpr,
  :func:`jaxcomm.flops.count`) at the measured float32 matmul rate;
* the optimizer (Adam): the bytes it must move (parameters, gradients and both moments read; parameters and
  moments written: 7 float32 per parameter) at the measured memory bandwidth;
* the draw: the gathered images read and written once, at the same bandwidth.

``of floor`` = floor / measured: 100 % is the floor. The parts need not add up to the engine's step (XLA fuses
across them in one program); they say where the time goes. Beside them, the engine's whole step (a network of the
same nodes sharing nothing, one jitted call per step, its state donated) against the parts' summed floors: what it
takes beyond its parts is the engine's own cost (slicing, stacking, scheduling). The machine (CPU model and vector
extensions, matmul rate, bandwidth) is stated with them, since machines differ by 3x between sessions.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from typing import NamedTuple

MIN_SECONDS = 1.0  # timed per part, after compilation
ROUNDS = 3  # best of, per part
VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "asimd", "sve")
ADAM_FLOATS_MOVED = 7  # per parameter: read params, grads, mu, nu; write params, mu, nu


def machine() -> dict:
    """The CPU (model, cores, vector extensions) and the JAX device the parts ran on."""
    import jax

    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() in ("flags", "Features"):
                    flags = set(value.split())
    except OSError:
        pass
    device = jax.devices()[0]
    return {"cpu": model, "cores": os.cpu_count(), "vector_extensions": [f for f in VECTOR_FLAGS if f in flags],
            "device": f"{device.platform} {device.device_kind}", "jax": jax.__version__}


def best_seconds(fn: Callable, *args, seconds: float, rounds: int = ROUNDS) -> float:
    """Seconds per call of ``fn(*args)`` (compiled first), the best of ``rounds`` rounds of >= ``seconds`` / rounds."""
    import jax

    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(rounds):
        calls, start = 0, time.perf_counter()
        while calls == 0 or time.perf_counter() - start < seconds / rounds:
            jax.block_until_ready(fn(*args))
            calls += 1
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def memory_gbs(megabytes: int = 256) -> float:
    """The machine's memory bandwidth, GB/s: a jitted float32 pass over ``megabytes`` (read + written) in place
    (donated: a fresh output buffer each call would time the page faults of its allocation)."""
    import jax
    import jax.numpy as jnp

    x = jnp.ones((megabytes * 2**20 // 4,), jnp.float32)
    nbytes = x.nbytes
    scale = jax.jit(lambda v: v * 1.0001, donate_argnums=0)

    def in_place():
        nonlocal x
        x = scale(x)
        return x

    return 2 * nbytes / best_seconds(in_place, seconds=0.5) / 1e9


class Keys(NamedTuple):  # what :func:`jaxcomm.classifier.minibatch` reads of a step's keys
    sample: object
    augment: object = None


def measure_parts(model, dataset, num_nodes: int, *, batch_size: int = 32, backend: str = "vmap",
                  matmul_gflops: float, bandwidth_gbs: float, seconds: float | None = None) -> dict:
    """The parts of one step of ``num_nodes`` classifier nodes of ``model`` on ``dataset``, lifted by ``backend``.

    Returns: ``{"backend", "parts": {name: {"seconds", "floor_seconds", "floor"}}}``, seconds per step of the
    whole population; ``floor`` names the rate the floor is measured against ("matmul" or "memory"; for
    "step", the engine's whole step, "parts": the parts' floors summed).
    """
    import jax
    import optax

    from jaxcomm import classifier, driver, flops, network, population

    seconds = MIN_SECONDS if seconds is None else seconds
    config = network.NetworkConfig(num_nodes=num_nodes, content="none", batch_size=batch_size)
    data = classifier.shard_data(dataset, config, settings=None)
    image_shape, num_classes = dataset.train.images.shape[1:], dataset.num_classes
    optimizer = optax.adam(1e-3)
    nodes = population.init_population(classifier.classifier_init(model, optimizer, image_shape),
                                       jax.random.PRNGKey(0), num_nodes, backend=backend)
    loss = classifier.classifier_loss(model)
    draw = jax.jit(lambda key: classifier.minibatch(Keys(key), data, batch_size, num_classes))
    batch = draw(jax.random.PRNGKey(1))
    keys = jax.random.split(jax.random.PRNGKey(2), num_nodes)

    def grads_of(params, model_state, images, targets, key):  # one node: forward and backward, no update
        return jax.grad(loss, has_aux=True)(params, model_state, images, targets, key)[0]

    def adam(params, opt_state, grads):  # one node's update
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    forward_backward = jax.jit(population.lift(grads_of, backend=backend))
    # as the engine runs it (population.lift_train): under "unrolled" the optimiser updates the stack at once
    update = jax.jit(population.lift(adam, backend=population.update_backend(backend)), donate_argnums=(0, 1))
    grads = forward_backward(nodes.params, nodes.model_state, batch.images, batch.targets, keys)

    params, opt_state = driver.own_buffers((nodes.params, nodes.opt_state))

    def updated():  # donated: each call's output feeds the next, as in training
        nonlocal params, opt_state
        params, opt_state = update(params, opt_state, grads)
        return params

    # the engine's whole step: the same nodes as a network that shares nothing, one jitted call per step
    engine = config.replace(backend=backend, step_loop="dispatch")
    net = network.make_network(engine, model, image_shape=image_shape, num_classes=num_classes)
    net_data, net_state = network.network_data(dataset, engine), driver.own_buffers(net.init(jax.random.PRNGKey(4)))
    net_step = jax.jit(net.step, donate_argnums=0)

    def stepped():
        nonlocal net_state
        net_state, _ = net_step(net_state, net_data)
        return net_state

    one = lambda tree: jax.tree.map(lambda x: x[0], tree)  # noqa: E731
    node_flops = flops.count(grads_of, one(nodes.params), one(nodes.model_state), batch.images[0],
                             batch.targets[0], keys[0])
    num_params = sum(x.size for x in jax.tree_util.tree_leaves(nodes.params))
    image_bytes = batch.images.size * batch.images.dtype.itemsize
    measured = {
        "draw": (best_seconds(draw, jax.random.PRNGKey(3), seconds=seconds), 2 * image_bytes / bandwidth_gbs / 1e9,
                 "memory"),
        "forward_backward": (best_seconds(forward_backward, nodes.params, nodes.model_state, batch.images,
                                          batch.targets, keys, seconds=seconds),
                             node_flops * num_nodes / matmul_gflops / 1e9, "matmul"),
        "optimizer": (best_seconds(updated, seconds=seconds),
                      ADAM_FLOATS_MOVED * 4 * num_params / bandwidth_gbs / 1e9, "memory"),
    }
    measured["step"] = (best_seconds(stepped, seconds=seconds), sum(floor for _, floor, _ in measured.values()),
                        "parts")
    return {"backend": backend, "num_nodes": num_nodes, "batch_size": batch_size, "matmul_gflops": matmul_gflops,
            "bandwidth_gbs": bandwidth_gbs,
            "params_per_node": num_params // num_nodes, "flops_per_node_step": node_flops,
            "parts": {name: {"seconds": s, "floor_seconds": f, "floor": kind} for name, (s, f, kind) in
                      measured.items()}}
