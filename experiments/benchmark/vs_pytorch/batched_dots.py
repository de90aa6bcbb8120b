"""Issue 41 probe: the student row's forward + backward is its first layer's two batched GEMMs; how fast each library
runs them on this CPU, against one large GEMM of the same FLOPs.

    python -m experiments.benchmark.vs_pytorch.batched_dots     # needs the `peer` extra for the PyTorch lines

64 nodes, B = 32, layer 784 -> 32 (the student MLP's first layer): forward x_n @ W_n and weight gradient
x_n^T @ g_n, each 2 * 64 * 32 * 784 * 32 = 103 MFLOP. Best of 5 rounds of 50 calls, jitted (jax) or eager (torch, 2
threads). Each line names whether XLA ran the dot through its YNNPACK fusion or its own dot emitter.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

N, B, K, OUT = 64, 32, 784, 32
FLOPS = 2 * N * B * K * OUT


def best_ms(call, reps: int = 50) -> float:
    call()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(reps):
            out = call()
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - start) / reps)
    return best * 1e3


def line(name: str, ms: float, how: str = "") -> None:
    print(f"| {name} | {ms:.2f} | {FLOPS / ms / 1e6:.0f} | {how} |", flush=True)


def main() -> None:
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.random((N, B, K), np.float32))
    w = jnp.asarray(rng.random((N, K, OUT), np.float32))
    g = jnp.asarray(rng.random((N, B, OUT), np.float32))
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}")
    print("| GEMM | ms | GFLOP/s | how |\n|---|---|---|---|")
    cases = {
        "jax forward `nbi,nio->nbo` (vmap's)": lambda x, w, g: jnp.einsum("nbi,nio->nbo", x, w),
        "jax weight gradient `nbi,nbo->nio` (vmap's)": lambda x, w, g: jnp.einsum("nbi,nbo->nio", x, g),
        "jax weight gradient transposed `nbo,nbi->noi`": lambda x, w, g: jnp.einsum("nbo,nbi->noi", g, x),
        "jax one GEMM [2048, 784] x [784, 32]": lambda x, w, g: x.reshape(N * B, K) @ w[0],
    }
    for name, f in cases.items():
        jf = jax.jit(f)
        text = jf.lower(x, w, g).compile().as_text()
        how = ("YNNPACK fusion" if "__ynn_fusion" in text else "oneDNN fusion" if "__onednn_fusion" in text
               else "XLA dot")
        line(name, best_ms(lambda jf=jf: jf(x, w, g)), how)
    try:
        import torch
    except ImportError:
        print("| PyTorch | not installed | | |")
        return
    torch.set_num_threads(2)
    tx, tw, tg = (torch.from_numpy(np.array(a)) for a in (x, w, g))
    line(f"torch {torch.__version__} forward `bmm(x, W)`", best_ms(lambda: torch.bmm(tx, tw)), "MKL/oneDNN bmm")
    line("torch weight gradient `bmm(x^T, g)`", best_ms(lambda: torch.bmm(tx.transpose(1, 2), tg)), "MKL/oneDNN bmm")


if __name__ == "__main__":
    main()
