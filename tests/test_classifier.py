"""The classifier kit's one-node functions (jaxcomm.classifier)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxcomm import classifier, population
from jaxcomm.models import MLP, StridedCNN


@pytest.mark.parametrize("model, shape", [(MLP(hidden=(16, 8), dropout=0.5), (8, 8, 1)),
                                          (StridedCNN(), (32, 32, 3))], ids=["mlp", "cnn"])
def test_a_compiled_init_equals_the_init_called_eagerly(model, shape):
    optimizer, key = optax.adam(1e-3), jax.random.PRNGKey(7)
    compiled = classifier.classifier_init(model, optimizer, shape)(key)
    # as classifier_init was before it compiled: each call dispatched eagerly (jax's own jitted pieces, e.g. the
    # truncated normal, as they are; jax.disable_jit would unroll those too and round differently)
    variables = dict(model.init(key, jnp.zeros((1, *shape), jnp.float32)))
    params = variables.pop("params")
    eager = population.NodeState(params, variables, optimizer.init(params))
    assert jax.tree_util.tree_structure(eager) == jax.tree_util.tree_structure(compiled)
    for a, b in zip(jax.tree_util.tree_leaves(eager), jax.tree_util.tree_leaves(compiled), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # bit for bit: committed runs redraw alike


def test_equal_models_share_one_compiled_init_and_an_unhashable_one_still_inits():
    key = jax.random.PRNGKey(0)
    before = classifier._model_variables()._cache_size()
    first = classifier.classifier_init(MLP(hidden=(12,)), optax.adam(1e-3), (8, 8, 1))(key)
    again = classifier.classifier_init(MLP(hidden=(12,)), optax.sgd(0.1), (8, 8, 1))(key)  # a build of its own
    assert classifier._model_variables()._cache_size() == before + 1  # one build per run, one by one: one compile
    np.testing.assert_array_equal(first.params["Dense_0"]["kernel"], again.params["Dense_0"]["kernel"])
    listed = classifier.classifier_init(MLP(hidden=[12]), optax.adam(1e-3), (8, 8, 1))(key)  # a list: not hashable
    np.testing.assert_array_equal(first.params["Dense_0"]["kernel"], listed.params["Dense_0"]["kernel"])
