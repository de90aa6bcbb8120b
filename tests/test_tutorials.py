"""Every ``.. code-block:: python`` of every tutorial (docs/tutorials/*.rst) runs, on the shipped MNIST sample;
what the examples compute is checked here (the tutorial's code is the example, not a copy of it)."""

from __future__ import annotations

import pathlib
import re
import textwrap

import jax
import numpy as np
import pytest

from jaxcomm import data, network
from jaxcomm.models import MLP

TUTORIALS = sorted((pathlib.Path(__file__).resolve().parents[1] / "docs" / "tutorials").glob("*.rst"))
# A python code block: the directive, its options, a blank line, then its indented lines (blank lines inside).
BLOCK = re.compile(r"^\.\. code-block:: python\n(?:   :.*\n)*\n((?:(?:[ \t]+.*)?\n)+)", re.M)


def blocks_of(path: pathlib.Path) -> list[str]:
    return [textwrap.dedent(block) for block in BLOCK.findall(path.read_text() + "\n")]


PAGES = {path.stem: blocks_of(path) for path in TUTORIALS}


def test_the_tutorials_are_there_and_show_code():
    assert {"frontier", "own_method", "protocol", "time", "sweeps", "teacher", "language", "devices",
            "federated"} <= set(PAGES)
    assert all(PAGES.values()), [name for name, blocks in PAGES.items() if not blocks]
    for path in TUTORIALS:  # no python block the pattern misses (it would not run)
        assert path.read_text().count(".. code-block:: python") == len(PAGES[path.stem]), path.name


@pytest.fixture(scope="module")
def namespaces() -> dict[str, list[dict]]:
    """Each block run once, on its own: in a fresh namespace, nothing from another block (a reader copies one
    block). The full datasets the tutorials name are the shipped 5,000-digit MNIST sample here (no download)."""
    sample = data.load_mnist_sample()
    done: dict[str, list[dict]] = {}
    with pytest.MonkeyPatch.context() as patch:
        for name in ("load_mnist", "load_cifar10", "load_dataset"):
            patch.setattr(data, name, lambda *args, **kwargs: sample)
        for page, blocks in PAGES.items():
            done[page] = []
            for number, block in enumerate(blocks, 1):
                namespace = {"__name__": f"tutorial_{page}_block_{number}"}
                exec(compile(block, f"docs/tutorials/{page}.rst python block {number}", "exec"), namespace)  # noqa: S102
                done[page].append(namespace)
    return done


def test_every_tutorial_block_runs(namespaces):
    assert {page: len(blocks) for page, blocks in namespaces.items()} == {p: len(b) for p, b in PAGES.items()}


def test_the_research_example_trains_8_nodes_on_two_graphs_exchanging_the_top3_logits(namespaces):
    example = namespaces["own_method"][0]
    on_exponential, on_rotating = example["on_exponential"], example["on_rotating"]
    for out in (on_exponential, on_rotating):
        final = out["final"]
        counters = final["counters"]
        assert counters["received"] == counters["consumed"] + counters["dropped"] + counters["pending"]
        assert counters["consumed"] > 0 and final["consumed_fraction"] > 0
        # private shards: the 32 uint8 28 x 28 images + the top-3 payload (3 x (4 + 1) bytes a sample) + header
        assert out["network"].message_bytes == 32 * 784 + 32 * 15 + 8
        assert final["avg_accuracy"] > 60.0  # chance is 10 %
    # the exponential graph of 8 nodes: each broadcast reaches 3 nodes (i + 1, i + 2, i + 4)
    exp_counters = on_exponential["final"]["counters"]
    assert exp_counters["sent"] == exp_counters["received"]
    np.testing.assert_array_equal(np.asarray(on_exponential["state"].adj).sum(axis=1), 3)
    # the rotating ring at the last step, 99, has offset 1 + 1 % 7 = 2
    np.testing.assert_array_equal(np.asarray(on_rotating["state"].adj), np.roll(np.eye(8, dtype=bool), 2, axis=1))


def test_the_examples_exchange_sends_what_it_makes(namespaces, tiny_dataset):
    cfg = network.NetworkConfig(num_nodes=5, batch_size=8, consume_prob=0.0, broadcast_prob=1.0, num_steps=1,
                                eval_every=1)
    result = network.train_network(cfg, MLP(hidden=(16,), num_classes=4), tiny_dataset, progress=False,
                                   exchange=namespaces["own_method"][0]["top3_logits"])
    payload = np.asarray(result["state"].inbox.messages.payload)  # [N, K, B, C]
    sent = payload[np.asarray(result["state"].inbox.count) > 0][:, :1]  # the first message of each non-empty inbox
    assert ((sent > -1e8).sum(axis=-1) == 3).all()  # three classes kept of four
    assert result["network"].message_bytes == 8 * 64 + 8 * 15 + 8  # 8 uint8 8 x 8 images + payload + header


def test_the_confident_labels_book_what_they_carry(namespaces):
    kinds = namespaces["own_method"][2]["run"]["final"]["bytes"]["by_kind"]
    copies = kinds["headers"] / 8  # an 8-byte header a copy
    assert copies > 0 and kinds["inputs"] == pytest.approx(copies * 32 * 784)
    assert kinds["payload"] < copies * (32 + 4)  # below the bound: only the confident samples' labels travel


def test_the_choco_method_books_values_and_positions(namespaces):
    run = namespaces["own_method"][3]["run"]
    kinds = run["final"]["bytes"]["by_kind"]
    assert kinds["parameters"] == kinds["coordinates"] > 0 and kinds["inputs"] == kinds["payload"] == 0


def test_the_method_from_nothing_sweeps_its_pull_and_holds_the_straggler(namespaces):
    example = namespaces["protocol"][0]
    low, high = ([np.asarray(x) for x in jax.tree.leaves(run["state"].nodes.params)] for run in example["swept"])
    assert any(not np.array_equal(a, b) for a, b in zip(low, high, strict=True))  # two values of pull, one step
    spread = [float(np.std(leaf, axis=0).mean()) for leaf in (low[0], high[0])]
    assert spread[1] < spread[0]  # a stronger pull keeps the nodes closer together
    pace = example["paced"]["final"]["pace"]
    assert pace["node_steps"] == [20, 20, 20, 6]  # 20 ticks of 1 s; the 3 s node steps at 3, 6, ..., 18 s


def test_the_frontier_compares_a_method_value_beside_the_specs(namespaces):
    rows = namespaces["frontier"][0]["summary"]["rows"]
    assert {"isolated", "true_labels", "true_labels_shared", "sync_sgd", "gossip_5", "sparta_0.05"} <= set(rows)
    assert rows["sparta_0.05"]["graph"] == rows["gossip_5"]["graph"]  # the frontier's one stated graph
    assert rows["sparta_0.05"]["seeds"] == 2


def test_the_language_tutorials_symbols_are_each_members_messages(namespaces):
    example = namespaces["language"][0]
    symbols = example["symbols"]
    assert set(symbols) == {"a", "b"}
    assert np.asarray(symbols["a"]).shape == (2, 200, 16) and np.asarray(symbols["b"]).shape == (2, 200, 16)
    assert set(np.unique(np.asarray(symbols["a"]))) <= {0, 1}


def test_the_devices_tutorials_backends_agree(namespaces):
    example = namespaces["devices"][0]
    assert example["out"]["final"]["avg_accuracy"] > 40.0  # the bfloat16 run learns


def test_the_checkpointed_run_comes_back_without_training(namespaces):
    example = namespaces["experiments"][0]
    assert example["again"]["resumed_from"] == 40
    assert example["again"]["final"]["avg_accuracy"] == example["first"]["final"]["avg_accuracy"]


def test_the_federated_example_books_the_cohorts_uploads_and_times_them_on_the_wan(namespaces):
    # federated.rst: 20 clients, a cohort of 5 per round, 4 rounds of 5 plain-SGD steps, on a 10 ms step and the WAN
    example = namespaces["federated"][0]
    out, p = example["out"], 784 * 64 + 64 + 64 * 10 + 10  # the MLP's parameters
    assert out["built"].config.num_nodes == 5 and out["built"].config.num_clients == 20
    assert out["bytes"]["total"] == 4 * 5 * 4 * p  # each round the cohort's 5 uploads of 4 P bytes
    wan = example["clock"].WAN
    way = wan.latency + max(5 * 4 * p / wan.bandwidth, 4 * p / wan.bandwidth)  # the server's link carries 5 copies
    assert out["final"]["clock"]["seconds"] == pytest.approx(20 * 0.01 + 4 * 2 * way, rel=1e-6)
    assert out["final"]["avg_accuracy"] > 20  # 4 rounds on the MNIST sample learn something (10 classes)
