"""Convolutions as patches: equal to XLA's convolution, and the "patches" backend equal to the per-node loop."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxcomm import network, network_sweep, population, speed
from jaxcomm.models import StridedCNN
from jaxcomm.models.patches import conv_as_patches, patch_convs, supported


def convs_in(fn, *args) -> int:
    """How many convolutions the program of ``fn(*args)`` computes (sub-programs included)."""
    return sum(e.primitive.name == "conv_general_dilated" for e in speed._walk(jax.make_jaxpr(fn)(*args).jaxpr))


@pytest.mark.parametrize("x_shape,k_shape,strides,padding", [
    ((2, 9, 9, 3), (3, 3, 3, 4), 1, "SAME"),
    ((2, 16, 16, 3), (4, 4, 3, 5), 2, "SAME"),  # the StridedCNN's layer
    ((3, 8, 7, 2), (3, 2, 2, 4), (2, 1), "VALID"),
    ((1, 9, 8, 3), (3, 3, 3, 2), 3, "SAME_LOWER"),
    ((2, 8, 8, 3), (3, 3, 3, 4), 2, [(1, 0), (2, -1)]),  # explicit pads, one of them a crop
    ((2, 5, 5, 4), (1, 1, 4, 3), 1, "VALID"),  # a 1x1 convolution: one slice, no concatenation
])
def test_conv_as_patches_equals_xla_convolution_and_its_gradients(x_shape, k_shape, strides, padding):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=x_shape), jnp.float32)
    kernel = jnp.asarray(rng.normal(size=k_shape), jnp.float32)
    pair = (strides, strides) if isinstance(strides, int) else strides
    xla = lambda x, k: jax.lax.conv_general_dilated(x, k, pair, padding,  # noqa: E731
                                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))
    patches = lambda x, k: conv_as_patches(x, k, strides, padding)  # noqa: E731
    cotangent = jnp.asarray(rng.normal(size=xla(x, kernel).shape), jnp.float32)

    @jax.jit  # one program each: run op by op, the slices would compile one by one
    def output_and_gradients(x, k):  # gradients wrt the input and the kernel
        return [(out, vjp(cotangent)) for out, vjp in (jax.vjp(f, x, k) for f in (patches, xla))]

    got, want = output_and_gradients(x, kernel)
    # float32 sums in another order: a few ulps of the result's magnitude (values reach ~15 here)
    jax.tree_util.tree_map(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5), got, want)


N, B = 3, 4
CNN = StridedCNN(widths=(4, 8, 8), num_classes=5, hidden=6, norm="batch")  # convolutions with and without bias


def cnn_nodes():
    """N nodes' variables and batches of 16x16x3 images."""
    rng = np.random.default_rng(1)
    images = jnp.asarray(rng.normal(size=(N, B, 16, 16, 3)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, 5, (N, B)), jnp.int32)
    variables = population.init_population(lambda key: CNN.init(key, images[0]), jax.random.PRNGKey(0), N,
                                           backend="loop")
    return variables, images, labels


def cnn_loss(variables, images, labels):
    """One node's loss in training mode, its logits and its new batch statistics."""
    (logits, _), updates = CNN.apply(variables, images, train=True, mutable=["batch_stats"])
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), (logits, updates)


def cnn_step(variables, images, labels):
    """One node's forward pass (loss, logits, statistics) and the gradient of its loss."""
    return jax.value_and_grad(cnn_loss, has_aux=True)(variables, images, labels)


@pytest.mark.parametrize("jit", [False, True])
def test_a_strided_cnn_under_patches_equals_the_loop(jit):
    variables, images, labels = cnn_nodes()
    lifted = {b: population.lift(cnn_step, backend=b) for b in ("loop", "patches")}
    if jit:
        lifted = {b: jax.jit(f) for b, f in lifted.items()}
    want, got = lifted["loop"](variables, images, labels), lifted["patches"](variables, images, labels)
    jax.tree_util.tree_map(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5), got, want)
    assert convs_in(population.lift(cnn_step, backend="patches"), variables, images, labels) == 0
    assert convs_in(population.lift(cnn_step, backend="vmap"), variables, images, labels) > 0


class Unsupported(nn.Module):
    """One supported convolution among three it cannot compute (groups, dilation, circular padding)."""

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(4, (3, 3), strides=2)(x)
        x = nn.Conv(4, (3, 3), feature_group_count=2)(x)
        x = nn.Conv(4, (2, 2), kernel_dilation=2)(x)
        return nn.Conv(2, (3, 3), padding="CIRCULAR")(x).mean()


def test_unsupported_convolutions_fall_back_and_init_is_untouched():
    assert supported(nn.Conv(4, (3, 3), padding=((1, 1), (0, 2)), strides=(2, 1)))
    assert not supported(nn.Conv(4, (3,))) and not supported(nn.ConvTranspose(4, (3, 3)))
    x = jnp.asarray(np.random.default_rng(2).normal(size=(N, 2, 8, 8, 3)), jnp.float32)
    model = Unsupported()
    with patch_convs():  # init: no parameters yet, every layer as usual
        params = population.init_population(lambda key: model.init(key, x[0]), jax.random.PRNGKey(0), N)
    plain = population.init_population(lambda key: model.init(key, x[0]), jax.random.PRNGKey(0), N)
    jax.tree_util.tree_map(np.testing.assert_array_equal, params, plain)
    assert convs_in(population.lift(model.apply, backend="patches"), params, x) == 3  # the unsupported ones
    assert convs_in(population.lift(model.apply, backend="vmap"), params, x) == 4
    value_and_grad = jax.value_and_grad(model.apply)
    patched = population.lift(value_and_grad, backend="patches")
    jax.tree_util.tree_map(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6),
                           patched(params, x), population.lift(value_and_grad, backend="loop")(params, x))


def net_config(**kw) -> network.NetworkConfig:
    base = dict(num_nodes=3, num_neighbours=1, batch_size=8, inbox_capacity=4, num_steps=4, eval_every=2,
                content="logits", seed=0)
    return network.NetworkConfig(**(base | kw))


NET_CNN = StridedCNN(widths=(4, 8), num_classes=4)
PAIRS = {"patches": "dispatch", "vmap": "dispatch", "loop": "eager"}


@pytest.fixture(scope="module")
def trained(tiny_dataset):
    """Seed 0's network trained under each backend of :data:`PAIRS`."""
    return {b: network.train_network(net_config(backend=b, step_loop=s), NET_CNN, tiny_dataset, progress=False)
            for b, s in PAIRS.items()}


def assert_same_run(got: dict, want: dict) -> None:
    for a, b in zip(got["history"], want["history"], strict=True):
        assert a["step"] == b["step"] and a["counters"] == b["counters"]
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-5)
        np.testing.assert_allclose(a["node_accuracies"], b["node_accuracies"], atol=1e-6)
    jax.tree_util.tree_map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5,
                                                                   atol=1e-5),
                           population.restack(got["state"].nodes), population.restack(want["state"].nodes))


def test_a_network_of_conv_nodes_trains_alike_under_patches_vmap_and_the_loop(trained):
    assert trained["patches"]["network"].backend == "patches" and trained["patches"]["network"].family == "conv"
    for backend in ("vmap", "loop"):
        assert_same_run(trained["patches"], trained[backend])


def test_patches_is_a_candidate_of_conv_models_only_and_never_runs_eagerly():
    assert {("patches", "scan"), ("patches", "dispatch")} <= set(speed.candidates(4, devices=1, family="conv"))
    assert "patches" not in {b for b, _ in speed.candidates(4, devices=1, family="mlp")}  # it would be vmap
    assert speed.candidates(4, devices=1, backend="patches") == [("patches", "scan"), ("patches", "dispatch")]
    # unranked by the shipped table: the rule of thumb's step loop, one call per step where it says "eager"
    assert speed.choose("conv", 128, platform="cpu", backend="patches") == ("patches", "dispatch")


def test_a_sweep_of_conv_nodes_under_patches_runs_as_one_population(tiny_dataset, trained):
    runs = [net_config(backend="patches", step_loop="dispatch", seed=s) for s in (0, 1)]
    results = network_sweep.train_networks(runs, NET_CNN, tiny_dataset, progress=False, mode="population")
    assert [r["sweep"] for r in results] == [{"runs": 2, "mode": "population"}] * 2
    assert_same_run(results[0], trained["patches"])
    assert not np.allclose(results[1]["history"][-1]["loss"], results[0]["history"][-1]["loss"])  # another seed
