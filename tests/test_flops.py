"""jaxcomm.flops: matrix-product and convolution FLOPs counted from the jaxpr, by hand and against XLA on CPU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import flops, network
from jaxcomm.data import ImageDataset, ImageSplit
from jaxcomm.models import MLP
from jaxcomm.models.cnn import StridedCNN


def xla_flops(fn, *args) -> float:
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    return float((cost[0] if isinstance(cost, list) else cost)["flops"])


def test_dense_layers_by_hand():
    # [8, 784] @ [784, 32] then [8, 32] @ [32, 10]: 2 x 8 x (784 x 32 + 32 x 10) = 406,528.
    w1, w2 = jnp.ones((784, 32)), jnp.ones((32, 10))
    x = jnp.ones((8, 784))
    forward = lambda w1, w2: jnp.sum(jnp.tanh(x @ w1) @ w2)  # noqa: E731
    assert flops.count(forward, w1, w2) == 2 * 8 * (784 * 32 + 32 * 10)
    # forward + backward: weight gradients of both layers, the hidden layer's input gradient, no image gradient
    assert flops.count(jax.grad(forward, argnums=(0, 1)), w1, w2) == 2 * 8 * (2 * 784 * 32 + 3 * 32 * 10)
    # batched products count every batch: [4, 8, 16] @ [4, 16, 2]
    assert flops.count(lambda a, b: jnp.einsum("bij,bjk->bik", a, b), jnp.ones((4, 8, 16)),
                       jnp.ones((4, 16, 2))) == 2 * 4 * 8 * 16 * 2


def test_convolution_by_hand_and_as_xla_counts_it_on_cpu():
    # NHWC [2, 8, 8, 3] * HWIO [3, 3, 3, 5], stride 2, SAME: out [2, 4, 4, 5], each 3 x 3 x 3 products.
    x, k = jnp.ones((2, 8, 8, 3)), jnp.ones((3, 3, 3, 5))
    conv = lambda x, k: jax.lax.conv_general_dilated(x, k, (2, 2), "SAME",  # noqa: E731
                                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    # SAME pads one row and column at the end: per dimension 4 outputs x 3 taps, 1 of them on padding
    assert flops.count(conv, x, k) == 2 * (2 * 5) * 3 * (4 * 3 - 1) ** 2 == xla_flops(conv, x, k)
    valid = lambda x, k: jax.lax.conv_general_dilated(x, k, (2, 2), "VALID",  # noqa: E731
                                                      dimension_numbers=("NHWC", "HWIO", "NHWC"))
    assert flops.count(valid, x, k) == 2 * (2 * 3 * 3 * 5) * (3 * 3 * 3) == xla_flops(valid, x, k)
    # a transposed convolution (input dilated by 2): only the taps on real elements count
    up = lambda x, k: jax.lax.conv_general_dilated(x, k, (1, 1), ((1, 1), (1, 1)), lhs_dilation=(2, 2),  # noqa: E731
                                                   dimension_numbers=("NHWC", "HWIO", "NHWC"))
    assert flops.count(up, x, k) == xla_flops(up, x, k)
    # grouped (what vmapping a convolution over nodes makes): 2 groups of 4 -> 6 channels, each sums 4 x window
    grouped = lambda x, k: jax.lax.conv_general_dilated(x, k, (1, 1), "VALID",  # noqa: E731
                                                        dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                                        feature_group_count=2)
    xg, kg = jnp.ones((1, 5, 5, 8)), jnp.ones((2, 2, 4, 6))
    assert flops.count(grouped, xg, kg) == 2 * (1 * 4 * 4 * 6) * (2 * 2 * 4) == xla_flops(grouped, xg, kg)
    # forward + backward: the kernel's gradient (a convolution of x with the output's gradient) costs what the
    # forward does; x is not differentiated, so no input gradient
    loss = lambda k, x: jnp.sum(conv(x, k))  # noqa: E731
    assert flops.count(jax.grad(loss), k, x) == 2 * flops.count(conv, x, k)


def test_scan_bodies_count_times_their_length_and_cond_its_costliest_branch():
    a = jnp.ones((6, 6))
    body = lambda c, _: (c @ a, None)  # noqa: E731
    assert flops.count(lambda c: jax.lax.scan(body, c, None, length=5)[0], a) == 5 * 2 * 6 ** 3
    branches = lambda p, c: jax.lax.cond(p, lambda c: c @ a @ a, lambda c: c, c)  # noqa: E731
    assert flops.count(branches, True, a) == 2 * 2 * 6 ** 3
    assert flops.count(jax.jit(lambda c: c @ a), a) == 2 * 6 ** 3


@pytest.mark.parametrize("model", [MLP(hidden=(32, 32), num_classes=10),
                                   StridedCNN(widths=(8, 16), num_classes=10, hidden=16, norm="batch")],
                         ids=["mlp", "cnn"])
def test_a_network_step_counts_n_times_one_node_and_near_xlas_count_on_cpu(model):
    shape = (28, 28, 1)
    rng = np.random.default_rng(0)
    split = ImageSplit(rng.integers(0, 255, (64, *shape)).astype(np.uint8), rng.integers(0, 10, 64).astype(np.int32))
    dataset = ImageDataset("synthetic", split, split._replace(images=split.images[:0], labels=split.labels[:0]),
                           split, 10)

    def step_flops(n: int, xla: bool) -> tuple[int, float | None]:  # XLA's count compiles the step: only for one
        config = network.NetworkConfig(num_nodes=n, num_neighbours=min(1, n - 1), batch_size=16, backend="vmap")
        net = network.make_network(config, model, image_shape=shape, num_classes=10)
        # the state's shapes are all either count reads (nothing runs: no initial state computed)
        state, data = jax.eval_shape(net.init, jax.random.PRNGKey(0)), network.network_data(dataset, config)
        return flops.count(net.step, state, data), xla_flops(net.step, state, data) if xla else None

    one, xla_one = step_flops(1, xla=True)
    four, _ = step_flops(4, xla=False)
    assert four == 4 * one
    # XLA also counts element-wise work (activations, Adam, sampling): more than the products and
    # convolutions, but they dominate a node-step
    assert 0.6 * xla_one <= one <= xla_one
