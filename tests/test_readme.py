"""Every ```python block of README.md runs, on the shipped MNIST sample; what the research example computes is
checked here (the README's code is the example, not a copy of it)."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

from jaxcomm import data, network
from jaxcomm.models import MLP

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.M | re.S)


def test_readme_has_python_blocks():
    assert BLOCKS


@pytest.fixture(scope="module")
def namespaces() -> list[dict]:
    """Each block run once, on its own: in a fresh namespace, nothing from another block (a reader copies one
    block). The full datasets the README names are the shipped 5,000-digit MNIST sample here (no download)."""
    sample = data.load_mnist_sample()
    done: list[dict] = []
    with pytest.MonkeyPatch.context() as patch:
        for name in ("load_mnist", "load_cifar10", "load_dataset"):
            patch.setattr(data, name, lambda *args, **kwargs: sample)
        for number, block in enumerate(BLOCKS, 1):
            namespace = {"__name__": f"readme_block_{number}"}
            exec(compile(block, f"README.md python block {number}", "exec"), namespace)  # noqa: S102
            done.append(namespace)
    return done


def test_readme_python_blocks_run(namespaces):
    assert len(namespaces) == len(BLOCKS)


def test_the_research_example_trains_8_nodes_on_two_graphs_exchanging_the_top3_logits(namespaces):
    example = namespaces[0]
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
                                   exchange=namespaces[0]["top3_logits"])
    payload = np.asarray(result["state"].inbox.messages.payload)  # [N, K, B, C]
    sent = payload[np.asarray(result["state"].inbox.count) > 0][:, :1]  # the first message of each non-empty inbox
    assert ((sent > -1e8).sum(axis=-1) == 3).all()  # three classes kept of four
    assert result["network"].message_bytes == 8 * 64 + 8 * 15 + 8  # 8 uint8 8 x 8 images + payload + header
