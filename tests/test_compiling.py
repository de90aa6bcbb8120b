"""jaxcomm compiles its programs at XLA's -O2 on a CPU (:mod:`jaxcomm.compiling`): the same bits as XLA's default -O3,
and a program that may run inside another's trace still can.

The suite itself runs at -O0 (``XLA_FLAGS``, tests/conftest.py), which :func:`jaxcomm.compiling.options` leaves as it
is; these tests take the level out of the environment, as a user's runs have it."""

from __future__ import annotations

import os

import jax
import numpy as np
import pytest

from jaxcomm import classifier, compiling, data_parallel, decision, kit, methods, network
from jaxcomm.models import MLP, StridedCNN


@pytest.fixture
def users_flags(monkeypatch):
    """XLA_FLAGS without the suite's level; the cached programs built under it dropped, before and after."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "optimization_level" not in f]
    monkeypatch.setenv("XLA_FLAGS", " ".join(flags))
    classifier._model_variables.cache_clear()
    decision._accuracies.cache_clear()
    yield
    classifier._model_variables.cache_clear()
    decision._accuracies.cache_clear()


def test_the_options_leave_a_level_set_in_xla_flags_alone(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=0")
    assert compiling.options() is None
    monkeypatch.setenv("XLA_FLAGS", "")
    assert compiling.options() == {"xla_backend_optimization_level": compiling.CPU_LEVEL}


def _trained(method, config, model, dataset):
    result = methods.train(method, config, model, dataset, progress=False)
    leaves = jax.tree_util.tree_leaves(result["built"].models_of(result["state"]))
    return [np.asarray(leaf) for leaf in leaves], result["final"]


@pytest.mark.parametrize("system", ["sync_sgd_mlp", "outputs_cnn"])  # the README demo test: an MLP network at -O2
def test_a_run_at_the_cpu_level_is_the_same_bits_as_at_xlas_default(system, tiny_dataset, users_flags, monkeypatch):
    cnn = StridedCNN(widths=(4, 8), num_classes=4, hidden=8, norm="batch")
    model = cnn if system.endswith("cnn") else MLP(hidden=(8,), num_classes=4)
    method = data_parallel.sync_sgd() if system.startswith("sync") else network.output_sharing()
    config = kit.RunConfig(num_nodes=3, batch_size=4, num_steps=6, eval_every=3, seed=2)
    runs = []
    for level in (compiling.CPU_LEVEL, 3):  # each build compiles its programs afresh (new closures)
        monkeypatch.setattr(compiling, "CPU_LEVEL", level)
        classifier._model_variables.cache_clear()
        decision._accuracies.cache_clear()
        runs.append(_trained(method, config, model, tiny_dataset))
    (leaves, final), (default_leaves, default_final) = runs
    assert len(leaves) == len(default_leaves)
    for a, b in zip(leaves, default_leaves, strict=True):
        np.testing.assert_array_equal(a, b)
    assert final["avg_accuracy"] == default_final["avg_accuracy"]


def test_a_nestable_program_runs_inside_another_trace_and_equals_its_top_level_call(tiny_dataset, users_flags):
    pop = kit.nodes(kit.RunConfig(num_nodes=2, batch_size=4), MLP(hidden=(8,), num_classes=4),
                    image_shape=tiny_dataset.train.images.shape[1:], num_classes=4)
    nodes, images = pop.init(jax.random.PRNGKey(0)).nodes, tiny_dataset.test.images[:5]
    top = pop.predict(nodes, images)  # compiled at the CPU level
    inside = jax.jit(lambda n, x: pop.predict(n, x) * 1.0)(nodes, images)  # traced in research code's program
    np.testing.assert_array_equal(np.asarray(top), np.asarray(inside))
    with pytest.raises(ValueError, match="top-level"):  # what a plain compiling.jit would do there
        jax.jit(lambda x: compiling.jit(lambda y: y + 1)(x))(np.ones(2))
