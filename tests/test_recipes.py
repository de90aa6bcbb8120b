"""Chapter 2's recipe (jaxcomm.recipes): the networks and models it builds, its description, the per-run numbers."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest

from jaxcomm import bandwidth, exchange, network, recipes
from jaxcomm.models import MLP
from jaxcomm.models.cnn import StridedCNN


def chapter2_network(**changes) -> network.NetworkConfig:
    """The cpu recipe's 10 fully connected nodes sharing true labels, written out field by field."""
    fields = dict(num_nodes=10, topology="full", num_neighbours=1, content="true_labels", consume_prob=0.5,
                  broadcast_prob=0.5 / 9, temperature=1.0, inbox_capacity=16, batch_size=32, learning_rate=3e-3,
                  lr_schedule="cosine", augment=False, num_steps=5000, eval_every=500, backend="auto", seed=0)
    return network.NetworkConfig(**(fields | changes))


def test_the_cpu_recipe_builds_the_chapters_networks():
    recipe = recipes.cpu()
    assert recipe.network(10, "true_labels", eval_every=500) == chapter2_network()
    # Logits at another temperature, a shorter run, a 20-node network: p_b = 0.5 / 19.
    assert recipe.network(10, "logits", eval_every=100, steps=1000, temperature=4.0) == chapter2_network(
        content="logits", temperature=4.0, num_steps=1000, eval_every=100)
    assert recipe.network(20, "true_labels", eval_every=500) == chapter2_network(num_nodes=20, broadcast_prob=0.5 / 19)
    # A ring of 3 out-neighbours: p_b = 0.5 / 3; twice the equilibrium on the full graph: 2 x 0.5 / 9.
    assert recipe.network(10, "true_labels", eval_every=500, topology="ring", num_neighbours=3) == chapter2_network(
        topology="ring", num_neighbours=3, broadcast_prob=0.5 / 3)
    assert recipe.network(10, "true_labels", eval_every=500, broadcast_factor=2.0).broadcast_prob == 1 / 9
    assert recipe.network(10, "true_labels", eval_every=500, consume_prob=0.25).broadcast_prob == 0.25 / 9
    # Nothing shared: no consumption, no broadcast, whatever the recipe's p_c.
    assert recipe.network(10, "none", eval_every=500) == chapter2_network(content="none", consume_prob=0.0,
                                                                          broadcast_prob=0.0)
    assert recipe.network(1, "true_labels", eval_every=500) == chapter2_network(
        num_nodes=1, num_neighbours=0, content="none", consume_prob=0.0, broadcast_prob=0.0)


def test_augmentation_and_seed_reach_the_network_on_cifar10_only():
    augmented = recipes.Chapter2Recipe(augment=True, seed=3, learning_rate=1e-3, lr_schedule="constant")
    assert augmented.network(10, "logits", eval_every=10) == chapter2_network(
        content="logits", augment=True, seed=3, learning_rate=1e-3, lr_schedule="constant", eval_every=10)
    mnist = recipes.Chapter2Recipe(dataset="mnist", augment=True)
    assert mnist.network(10, "logits", eval_every=10).augment is False


def test_presets_build_the_chapters_models():
    assert recipes.cpu().model(10) == StridedCNN(widths=(16, 32, 64), num_classes=10, hidden=128, norm="batch")
    assert recipes.cpu().model(10, widths=(8,)) == StridedCNN(widths=(8,), num_classes=10, hidden=128, norm="batch")
    assert recipes.thesis().model(10) == StridedCNN(widths=(64, 128, 256), num_classes=10, hidden=256, norm="batch")
    assert recipes.Chapter2Recipe(hidden=0).model(10).hidden is None  # the flattened convolution is the feature
    assert recipes.smoke().model(10) == MLP(hidden=(16,), num_classes=10)
    assert bandwidth.model_num_params(recipes.smoke().model(10), (28, 28, 1)) == 784 * 16 + 16 + 16 * 10 + 10
    assert set(recipes.PRESETS) == {"smoke", "cpu", "thesis"}
    thesis = recipes.thesis()
    assert (thesis.learning_rate, thesis.lr_schedule, thesis.augment, thesis.num_steps) == (1e-3, "constant", False,
                                                                                            5000)
    assert recipes.smoke().dataset == "mnist_sample" and recipes.smoke().num_steps == 20


def test_describe_in_words():
    assert recipes.cpu().describe() == ("strided CNN, channels (16, 32, 64), dense 128, norm batch, augmentation "
                                        "False; batch 32, Adam 0.003 (cosine)")
    assert recipes.smoke().describe() == "MLP, hidden (16,); batch 32, Adam 0.003 (cosine)"
    # A summary's config dict (tuples as lists), written before lr_schedule existed: "constant".
    old = {"dataset": "cifar10", "widths": [16, 32, 64], "hidden": 128, "norm": "batch", "augment": True,
           "batch_size": 32, "learning_rate": 0.001}
    assert recipes.describe(old) == ("strided CNN, channels (16, 32, 64), dense 128, norm batch, augmentation True; "
                                     "batch 32, Adam 0.001 (constant)")


def test_steps_to_target_is_the_first_evaluation_reaching_it():
    history = [{"step": 10, "a": 40.0}, {"step": 20, "a": 55.0}, {"step": 30, "a": 60.0}]
    assert recipes.steps_to_target(history, 50.0, lambda h: h["a"]) == 20
    assert recipes.steps_to_target(history, 55.0, lambda h: h["a"]) == 20  # reaching counts
    assert recipes.steps_to_target(history, 61.0, lambda h: h["a"]) is None
    assert recipes.steps_to_target([], 1.0, lambda h: h["a"]) is None


def test_summarize_by_hand():
    # 10 nodes sent 90 copies of 168-byte messages in 100 steps: 90 x 168 / (10 x 100) = 15.12 B per node and step;
    # a ring all-reduce of 1,000 parameters: 2 x 9/10 x 4 x 1,000 = 7,200 B. With shared data the same true-label
    # messages are 32 int32 indices + 32 uint8 labels + 8 = 168 B too (here the network's bytes are given).
    config = chapter2_network()
    final = {"avg_accuracy": 50.0, "collective_accuracy": {"negentropy": 60.0, "entropy": 58.0, "mean": 59.0,
                                                           "vote": 57.0},
             "node_accuracies": [40.0, 55.0, 62.5], "counters": {"sent": 90, "received": 90}, "loss": 1.25}
    net = types.SimpleNamespace(config=config, message_bytes=168, exchange=exchange.true_labels(), payload_dim=10,
                                backend="vmap", step_loop="scan")
    out = {"network": net, "final": final,
           "history": [{"consumed_fraction": 0.25}, {"consumed_fraction": 0.75}], "steps_done": 100,
           "train_seconds": 12.345}
    summary = recipes.summarize(out, num_params=1000)
    assert summary == {
        "nodes": 10, "content": "true_labels", "topology": "full", "num_neighbours": 9, "consume_prob": 0.5,
        "broadcast_prob": 0.5 / 9, "temperature": 1.0, "avg_accuracy": 50.0, "collective_accuracy": 60.0,
        "collective_accuracy_by_weighting": final["collective_accuracy"], "node_accuracy_min_max": [40.0, 62.5],
        "steps": 100, "bytes_sent_per_node_step": pytest.approx(15.12), "message_bytes": 168,
        "data_model": "private", "message_bytes_shared": 168, "bytes_sent_per_node_step_shared": pytest.approx(15.12),
        "allreduce_bytes_per_node_step": pytest.approx(7200.0), "num_params": 1000,
        "counters": final["counters"], "consumed_fraction": 0.5, "final_loss": 1.25, "seconds": 12.3,
        "lift": "vmap/scan"}
    ring = dataclasses.replace(config, topology="ring", num_neighbours=3)
    assert recipes.summarize(out | {"network": net.__class__(**(vars(net) | {"config": ring}))},
                             num_params=1000)["num_neighbours"] == 3


def test_validation_accuracies_are_summarised_and_averaged_over_seeds():
    config = chapter2_network()
    final = {"avg_accuracy": 50.0, "collective_accuracy": {"negentropy": 60.0}, "node_accuracies": [40.0, 60.0],
             "counters": {"sent": 90}, "loss": 1.0,
             "validation": {"avg_accuracy": 52.0, "collective_accuracy": {"negentropy": 61.0}}}
    net = types.SimpleNamespace(config=config, message_bytes=168, exchange=exchange.true_labels(), payload_dim=10,
                                backend="vmap", step_loop="scan")
    out = {"network": net, "final": final, "history": [{"consumed_fraction": 0.5}], "steps_done": 100,
           "train_seconds": 1.0}
    one = recipes.summarize(out, num_params=1000)
    assert (one["validation_avg_accuracy"], one["validation_collective_accuracy"]) == (52.0, 61.0)
    final2 = final | {"validation": {"avg_accuracy": 56.0, "collective_accuracy": {"negentropy": 61.0}}}
    two = recipes.summarize(out | {"final": final2}, num_params=1000)
    seeds = recipes.summarize_seeds([one, two], [0, 1])
    # mean (52 + 56) / 2 = 54, sample sd sqrt(2 x 2^2 / 1) = 2.83; the test numbers are the same for both seeds
    assert seeds["validation_avg_accuracy"] == 54.0
    assert seeds["validation_avg_accuracy_sd"] == pytest.approx(2 * np.sqrt(2))
    assert (seeds["validation_collective_accuracy_sd"], seeds["avg_accuracy_sd"]) == (0.0, 0.0)
    assert seeds["lift"] == "vmap/scan" and seeds["content"] == "true_labels"  # the seeds agree
    relifted = recipes.summarize_seeds([one, two | {"lift": "loop/eager"}, one], [0, 1, 2])
    assert relifted["lift"] == "vmap/scan, loop/eager"  # they do not: each distinct lift, in the seeds' order
    without = recipes.summarize(out | {"final": {k: v for k, v in final.items() if k != "validation"}},
                                num_params=1000)
    assert "validation_avg_accuracy_sd" not in recipes.summarize_seeds([without], [0])


def test_bytes_per_node_step_and_gossip_bytes_by_hand():
    assert bandwidth.bytes_per_node_step(90, 168, num_nodes=10, steps=100) == pytest.approx(15.12)
    assert bandwidth.bytes_per_node_step(0, 168, num_nodes=10, steps=100) == 0.0
    assert bandwidth.bytes_per_node_step(90, 0, num_nodes=10, steps=100) == 0.0  # nothing on the wire
    assert bandwidth.bytes_per_node_step(0, 168, num_nodes=10, steps=0) == 0.0  # no steps yet
    assert isinstance(bandwidth.bytes_per_node_step(4, 2, num_nodes=2, steps=1), float)
    # 2 neighbours x 4 B x 174,618 values every 10 steps = 139,694.4 B per node and step.
    assert bandwidth.gossip_bytes(2, 174_618, 10) == pytest.approx(139_694.4)
    assert bandwidth.gossip_bytes(1, 100, 1, bytes_per_value=2) == 200
    # The float the frontier wrote before: neighbours x 4 x values / k.
    for p, v, k in [(2, 174_618, 10), (2, 174_618, 100), (1, 12_730, 5), (3, 7, 3)]:
        assert bandwidth.gossip_bytes(p, v, k) == p * 4 * v / k


BAD = [
    ("dataset", {"dataset": "svhn"}),
    ("data_dir", {"data_dir": None}),
    ("widths", {"widths": ()}),
    ("hidden", {"hidden": -1}),
    ("norm", {"norm": "group"}),
    ("augment", {"augment": "yes"}),
    ("batch_size", {"batch_size": 0}),
    ("inbox_capacity", {"inbox_capacity": 0}),
    ("num_steps", {"num_steps": 0}),
    ("learning_rate", {"learning_rate": 0.0}),
    ("lr_schedule", {"lr_schedule": "step"}),
    ("consume_prob", {"consume_prob": 1.5}),
    ("broadcast_factor", {"broadcast_factor": 0.0}),
    ("temperature", {"temperature": -1.0}),
    ("backend", {"backend": "gpu"}),
    ("seed", {"seed": 1.5}),
]


@pytest.mark.parametrize("field, change", BAD, ids=[f for f, _ in BAD])
def test_bad_recipe_is_rejected_naming_the_field(field, change):
    with pytest.raises(ValueError, match=field) as error:
        recipes.Chapter2Recipe(**change)
    assert "must be" in str(error.value) and "got" in str(error.value)


def test_a_recipe_is_a_frozen_value():
    recipe = recipes.cpu()
    with pytest.raises(dataclasses.FrozenInstanceError):
        recipe.seed = 1
    assert recipe == recipes.Chapter2Recipe() and hash(recipe) == hash(recipes.Chapter2Recipe())
    assert dataclasses.replace(recipe, seed=1).network(2, "logits", eval_every=1).seed == 1
