"""The "sharded" backend on 8 CPU devices trains a network exactly as "vmap" does on one.

XLA_FLAGS must be set before jax starts, so the check runs in a fresh interpreter.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import jax, numpy as np, chex
    assert jax.device_count() == 8, jax.devices()
    from jaxcomm import network
    from jaxcomm.data import ImageDataset, ImageSplit
    from jaxcomm.models import MLP

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, 320).astype(np.int32)
    images = (rng.random((320, 8, 8, 1)) * 255).astype(np.uint8)
    split = ImageSplit(images, labels)
    dataset = ImageDataset("synthetic", split, split, split, 4)
    states = {}
    for backend in ("vmap", "sharded"):
        config = network.NetworkConfig(num_nodes=8, num_neighbours=3, batch_size=4, content="logits",
                                       backend=backend, num_steps=6, eval_every=3)
        out = network.train_network(config, MLP(hidden=(8,), num_classes=4), dataset, progress=False)
        states[backend] = out["state"]
        leaf = jax.tree_util.tree_leaves(out["state"].nodes.params)[0]
        print(backend, leaf.sharding)
    chex.assert_trees_all_close(states["sharded"].nodes, states["vmap"].nodes, rtol=1e-5, atol=1e-6)
    chex.assert_trees_all_close(states["sharded"].inbox, states["vmap"].inbox, rtol=1e-5, atol=1e-6)
    print("SHARDED_MATCHES_VMAP")
""")


def test_sharded_on_8_cpu_devices_equals_vmap():
    # the suite's other XLA flags (faster compilation, conftest.py) are kept
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8".strip()
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                            cwd=pathlib.Path(__file__).parent, timeout=600)
    assert "SHARDED_MATCHES_VMAP" in result.stdout, result.stdout + result.stderr
