"""Two levers for the student MLP's forward + backward (issue 41), 64 nodes under `vmap`, interleaved rounds, the best
of each: kernels stored [out, in] (PyTorch's `Linear`) against [in, out] (Flax's `nn.Dense`), the same arithmetic;
and the matrix products in bfloat16 (float32 parameters, cast at each product). From the repository root:

    python -m experiments.benchmark.vs_pytorch.kernel_layout
"""
import time

import jax
import jax.numpy as jnp
import numpy as np

N, B, SIZES = 64, 32, (784, 32, 32, 10)


def loss(weights, biases, x, y, layout):
    h = x
    for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
        if layout == "bf16":
            h = (h.astype(jnp.bfloat16) @ w.astype(jnp.bfloat16)).astype(jnp.float32) + b
        else:
            h = (h @ w if layout == "in_out" else h @ w.T) + b
        if i < len(weights) - 1:
            h = jax.nn.relu(h)
    return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(h), -1))


def main() -> None:
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.random((N, B, SIZES[0])), jnp.float32)
    y = jax.nn.one_hot(rng.integers(0, 10, (N, B)), 10)
    shapes = zip(SIZES[:-1], SIZES[1:], strict=True)
    w_in = [jnp.asarray(rng.normal(size=(N, a, b)) * 0.05, jnp.float32) for a, b in shapes]
    biases = [jnp.zeros((N, b), jnp.float32) for b in SIZES[1:]]
    args = {"in_out": (w_in, biases, x, y), "out_in": ([jnp.swapaxes(w, 1, 2) for w in w_in], biases, x, y),
            "bf16": (w_in, biases, x, y)}
    grads = {layout: jax.jit(jax.vmap(jax.grad(lambda *a, layout=layout: loss(*a, layout), argnums=(0, 1))))
             for layout in args}
    same = zip(grads["in_out"](*args["in_out"])[0], grads["out_in"](*args["out_in"])[0], strict=True)
    print("largest gradient difference between layouts:", max(float(jnp.max(jnp.abs(a - jnp.swapaxes(b, 1, 2))))
                                                             for a, b in same))

    def timed(layout, reps=200):
        jax.block_until_ready(grads[layout](*args[layout]))
        start = time.perf_counter()
        for _ in range(reps):
            out = grads[layout](*args[layout])
        jax.block_until_ready(out)
        return (time.perf_counter() - start) / reps * 1e3

    rounds = {layout: [] for layout in grads}
    for _ in range(5):
        for layout in grads:
            rounds[layout].append(timed(layout))
    best = {layout: min(times) for layout, times in rounds.items()}
    for layout, times in rounds.items():
        print(f"{layout}: best {best[layout]:.2f} ms, rounds {[round(t, 2) for t in times]}")
    print(f"[in, out] time / [out, in] time {best['in_out'] / best['out_in']:.3f}; "
          f"float32 time / bfloat16 time {best['in_out'] / best['bf16']:.3f}")


if __name__ == "__main__":
    main()
