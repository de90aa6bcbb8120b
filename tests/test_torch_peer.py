"""The PyTorch peer (experiments/torch_peer/) trains the benchmark's workloads: the same parameters, the same
logits and the same Adam step as the Flax models and optax, and a measurement of every recipe."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

torch = pytest.importorskip("torch")

from experiments import torch_peer  # noqa: E402
from jaxcomm.exchange import cross_entropy  # noqa: E402
from jaxcomm.models import MLP, StridedCNN  # noqa: E402

NODES, BATCH = 2, 8


def flax_model(workload: str):
    return MLP(hidden=(32, 32)) if workload == "student" else StridedCNN()


@pytest.fixture(scope="module", params=torch_peer.WORKLOADS)
def workload(request):
    """``(name, model, [params of node i], images [N, B, H, W, C] float32, labels [N, B] int)``."""
    name = request.param
    model = flax_model(name)
    dummy = jnp.zeros((1, *torch_peer.IMAGE_SHAPES[name]), jnp.float32)
    params = [model.init(jax.random.PRNGKey(i), dummy)["params"] for i in range(NODES)]
    # Flax's default bias init is 0: random biases, so a transposed or misplaced bias cannot go unseen.
    params = [jax.tree_util.tree_map_with_path(
        lambda path, a, i=i: a + 0.1 * jax.random.normal(jax.random.PRNGKey(100 + i), a.shape)
        if path[-1].key == "bias" else a, p) for i, p in enumerate(params)]
    data = torch_peer.shards(name, NODES)
    images, labels = torch_peer.draw(data, BATCH)
    return name, model, params, images.numpy(), labels.numpy()


def test_available_reports_the_torch_version():
    assert torch_peer.available() == torch.__version__
    assert torch_peer.available().startswith("2.")


def test_every_recipe_holds_the_flax_models_parameter_count(workload):
    name, _, params, _, _ = workload
    flax_count = sum(a.size for a in jax.tree_util.tree_leaves(params[0]))
    assert flax_count == {"student": 26_506, "cnn": 699_850}[name]
    for recipe_name, build in torch_peer.recipes(name, NODES).items():
        recipe = build()
        total = sum(torch_peer.num_params(m) for m in recipe.modules)
        assert total == NODES * flax_count, recipe_name


def test_every_recipe_computes_the_flax_logits_on_the_same_weights(workload):
    name, model, params, images, _ = workload
    expected = np.stack([model.apply({"params": p}, x)[0] for p, x in zip(params, images, strict=True)])
    for recipe_name, build in torch_peer.recipes(name, NODES).items():
        recipe = build()
        recipe.load(params)
        with torch.no_grad():
            got = recipe.logits(torch.from_numpy(images)).numpy()
        np.testing.assert_allclose(got, expected, atol=1e-4, err_msg=recipe_name)


def optax_step(model, params, x, labels):
    """``(gradients, parameters after one optax.adam(1e-3) step)`` of one node on its mean cross-entropy (the
    engine's loss, one-hot targets)."""
    loss = lambda p: cross_entropy(model.apply({"params": p}, x)[0], jax.nn.one_hot(labels, 10))
    optimizer = optax.adam(torch_peer.LEARNING_RATE)
    grads = jax.grad(loss)(params)
    updates, _ = optimizer.update(grads, optimizer.init(params), params)
    return grads, optax.apply_updates(params, updates)


def in_layout(build, trees) -> list[np.ndarray]:
    """Flax trees (one per node) as a fresh recipe's parameters, in its modules' order: ``[array]``."""
    recipe = build()
    recipe.load(trees)
    return [p.detach().numpy().copy() for m in recipe.modules for p in m.parameters()]


def test_one_adam_step_of_every_recipe_is_optax_adam_on_the_flax_model(workload):
    name, model, params, images, labels = workload
    grads, stepped = zip(*(optax_step(model, p, x, y) for p, x, y in zip(params, images, labels, strict=True)),
                         strict=True)
    lr = torch_peer.LEARNING_RATE
    for recipe_name, build in torch_peer.recipes(name, NODES).items():
        recipe = build()
        recipe.load(params)
        recipe.forward_backward(torch.from_numpy(images), torch.from_numpy(labels))
        got_grads = [p.grad.numpy().copy() for m in recipe.modules for p in m.parameters()]
        recipe.optimizer_step()
        got = [p.detach().numpy() for m in recipe.modules for p in m.parameters()]
        want_grads, want = in_layout(build, grads), in_layout(build, stepped)
        for i, (g, wg, p, wp) in enumerate(zip(got_grads, want_grads, got, want, strict=True)):
            # to float rounding of the tensor's largest gradient: convolutions sum in another order than XLA's
            scale = float(np.abs(wg).max())
            np.testing.assert_allclose(g, wg, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{recipe_name} gradient {i}")
            # Adam's first step is lr * g / (|g| + eps), about lr (1e-3) each: a missed step fails by far. Its
            # change with g is lr * eps / (|g| + eps)^2: where |g| < 1e-5 (1,000 eps), a rounding of g (1e-5 of the
            # largest, up to 1e-6) moves it by a fraction of lr; there it is only bounded by lr.
            sensitive = np.abs(wg) < 1e-5
            np.testing.assert_allclose(p[~sensitive], wp[~sensitive], rtol=1e-4, atol=1e-6,
                                       err_msg=f"{recipe_name} parameter {i}")
            assert np.all(np.abs(p - wp)[sensitive] <= 2 * lr), f"{recipe_name} parameter {i}"


def test_padding_same_of_a_4x4_stride_2_convolution_is_one_on_each_side():
    conv = StridedCNN(widths=(5,))
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 8, 8, 3))
    params = conv.init(jax.random.PRNGKey(1), x)["params"]
    h = jax.lax.conv_general_dilated(x, params["Conv_0"]["kernel"], (2, 2), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC")) + params["Conv_0"]["bias"]
    got = torch.nn.functional.conv2d(torch.from_numpy(np.array(x)).permute(0, 3, 1, 2),
                                     torch_peer._conv_weight(params["Conv_0"]["kernel"]),
                                     torch_peer._t(params["Conv_0"]["bias"]), stride=2, padding=1)
    np.testing.assert_allclose(got.permute(0, 2, 3, 1).numpy(), np.asarray(h), atol=1e-5)


def test_draw_takes_each_nodes_rows_from_its_own_shard_as_unit_floats():
    data = torch_peer.shards("student", 4)
    images, labels = torch_peer.draw(data, 16)
    assert images.shape == (4, 16, 28, 28, 1) and images.dtype == torch.float32 and labels.shape == (4, 16)
    assert 0 <= float(images.min()) and float(images.max()) <= 1
    shard = data.shard_size
    for node in range(4):  # every drawn image is one of the node's own rows
        own = data.images[node * shard:(node + 1) * shard].float() / 255
        for x in images[node, :3]:
            assert (own == x).flatten(1).all(1).any()


def test_measure_times_every_recipe_and_the_best_ones_parts():
    result = torch_peer.measure("student", 2, seconds=0.05, threads=1)
    assert result["torch"] == torch.__version__ and result["threads"] == 1
    assert set(result["recipes"]) == {"stacked_bmm", "stacked_vmap", "loop"}
    assert all(rate > 0 for rate in result["recipes"].values())
    assert result["best_recipe"] in result["recipes"]
    assert result["best_node_steps_per_s"] == max(result["recipes"].values())
    assert set(result["parts"]) == {"draw", "forward_backward", "optimizer"}
    assert all(seconds > 0 for seconds in result["parts"].values())


def test_measure_rejects_an_unknown_workload():
    with pytest.raises(ValueError, match="workload"):
        torch_peer.measure("teacher", 2, seconds=0.01)
