"""A lever for the CNN's backward (issue 41): the input gradient of a stride-2 convolution without dilation.

XLA differentiates a 4x4 stride-2 convolution's input as a convolution of the output gradient dilated by 2 (zeros
between its pixels: `lhs_dilate=2`, run by XLA's own Eigen emitter, not YNNPACK; 20 such ops in a 10-node step).
Written by phases, each output pixel parity is a stride-1 2x2 convolution of the undilated gradient (a quarter of
the multiply-adds), the four interleaved; or one stride-1 3x3 convolution to 4 C channels and a depth-to-space.
Timed alone, jitted, for the chapter-2 benchmark CNN's second and third layers (batch 32), best of 7 x 20 calls,
three interleaved rounds. From the repository root:

    python -m experiments.benchmark.vs_pytorch.strided_input_grad
"""
import time

import jax
import jax.numpy as jnp
import numpy as np

B = 32
DN = ("NHWC", "HWIO", "NHWC")
LAYERS = (((16, 16, 64), 128), ((8, 8, 128), 256))  # (input H, W, C), output channels


def conv(x, k):
    return jax.lax.conv_general_dilated(x, k, (2, 2), "SAME", dimension_numbers=DN)


def best_ms(f, *args, reps: int = 20) -> float:
    jax.block_until_ready(f(*args))
    out = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(reps):
            r = f(*args)
        jax.block_until_ready(r)
        out.append((time.perf_counter() - start) / reps * 1e3)
    return min(out)


# 1-D, pad 1 before: dx[2m] = g[m] K[1] + g[m-1] K[3]; dx[2m+1] = g[m+1] K[0] + g[m] K[2]
PHASE_TAPS = {0: ((3, 1), (1, 0)), 1: ((2, 0), (0, 1))}  # parity: (kernel taps by ascending offset, padding)


def dgrad_phases(g, k):
    """``g [B, Ho, Wo, O]``, ``k [4, 4, C, O]`` -> ``dx [B, 2 Ho, 2 Wo, C]``: four stride-1 2x2 convolutions."""
    kt = jnp.swapaxes(k, 2, 3)  # [4, 4, O, C]: g's channels in, x's out
    rows = []
    for rh in (0, 1):
        cols = []
        for rw in (0, 1):
            (th, ph), (tw, pw) = PHASE_TAPS[rh], PHASE_TAPS[rw]
            sub = kt[jnp.array(th)][:, jnp.array(tw)]  # [2, 2, O, C]
            cols.append(jax.lax.conv_general_dilated(g, sub, (1, 1), (ph, pw), dimension_numbers=DN))
        rows.append(jnp.stack(cols, axis=3))  # [B, Ho, Wo, 2 (column parity), C]
    out = jnp.stack(rows, axis=2)  # [B, Ho, 2 (row parity), Wo, 2, C]
    b, ho, _, wo, _, c = out.shape
    return out.reshape(b, 2 * ho, 2 * wo, c)


def dgrad_3x3(g, k):
    """The same as one stride-1 3x3 convolution (pad 1) to 4 C channels, each parity's taps in its corner."""
    kt = jnp.swapaxes(k, 2, 3)
    o, c = kt.shape[2], kt.shape[3]
    big = jnp.zeros((3, 3, o, 2, 2, c), k.dtype)
    taps = {0: {0: 3, 1: 1}, 1: {1: 2, 2: 0}}  # parity: {3x3 index (offset + 1): kernel tap}
    for rh in (0, 1):
        for ih, th in taps[rh].items():
            for rw in (0, 1):
                for iw, tw in taps[rw].items():
                    big = big.at[ih, iw, :, rh, rw, :].set(kt[th, tw])
    y = jax.lax.conv_general_dilated(g, big.reshape(3, 3, o, 4 * c), (1, 1), ((1, 1), (1, 1)), dimension_numbers=DN)
    b, ho, wo, _ = y.shape
    return y.reshape(b, ho, wo, 2, 2, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, 2 * ho, 2 * wo, c)


def main() -> None:
    rng = np.random.default_rng(0)
    print(f"jax {jax.__version__}; ms per call, best of 3 interleaved rounds")
    for (h, w, c), o in LAYERS:
        x = jnp.asarray(rng.standard_normal((B, h, w, c)), jnp.float32)
        k = jnp.asarray(rng.standard_normal((4, 4, c, o)) * 0.05, jnp.float32)
        g = jnp.asarray(rng.standard_normal((B, h // 2, w // 2, o)), jnp.float32)
        ways = {"XLA (dilated)": jax.jit(lambda x, k, g: jax.vjp(lambda x: conv(x, k), x)[1](g)[0]),
                "phases": jax.jit(lambda x, k, g: dgrad_phases(g, k)),
                "3x3 + depth to space": jax.jit(lambda x, k, g: dgrad_3x3(g, k))}
        ref = ways["XLA (dilated)"](x, k, g)
        errors = {name: float(jnp.abs(f(x, k, g) - ref).max() / jnp.abs(ref).max()) for name, f in ways.items()}
        rounds = [{name: best_ms(f, x, k, g) for name, f in ways.items()} for _ in range(3)]  # interleaved
        ms = {name: min(r[name] for r in rounds) for name in ways}
        print(f"layer {c}->{o} on {h}x{w}: " + ", ".join(f"{name} {ms[name]:.2f} ms (rel. error {errors[name]:.0e})"
                                                      for name in ways))


if __name__ == "__main__":
    main()
