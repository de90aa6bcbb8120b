"""Research code brings its own method: defined here, outside jaxcomm, swept over 3 seeds and put on the bandwidth
frontier beside the built-in methods through the experiment's public entry point, with no library edit."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest

from jaxcomm import exchange, network
from jaxcomm.harness import frontier as fr


def confident_labels(threshold: float = 0.5) -> exchange.Exchange:
    """A node sends its labels only for the samples it already predicts with ``threshold`` confidence (zeros,
    no training signal, for the others); forwarded messages keep what they carried."""

    def outgoing(logits, features, targets, received, consumed):
        sure = jnp.max(jax.nn.softmax(logits), axis=-1, keepdims=True) >= threshold
        return jnp.where(consumed, received, jnp.where(sure, targets, 0.0))

    return exchange.Exchange("confident_labels", lambda num_classes, feature_dim: num_classes, outgoing,
                             lambda logits, features, received: exchange.cross_entropy(logits, received),
                             lambda batch, dim: batch + (batch + 7) // 8)  # uint8 labels and a bit mask


CONFIDENT = network.output_sharing(confident_labels(), name="confident_labels")._replace(
    configure=lambda c: c.replace(consume_prob=0.5, broadcast_prob=1 / 3))


def test_a_method_of_research_code_joins_the_frontier_with_its_bytes(tmp_path):
    config = dataclasses.replace(fr.smoke_config(), methods=("outputs:none", "sync"), num_seeds=3)
    summary = fr.run(config, methods=[CONFIDENT], progress=False)
    rows = summary["rows"]
    assert list(rows) == ["isolated", "sync_sgd", "confident_labels", "confident_labels_shared"]
    mine = rows["confident_labels"]
    assert mine["seeds"] == 3 and mine["family"] == "outputs" and mine["spec"] == "confident_labels"
    assert len({p["accuracy"] for p in mine["per_seed"]}) > 1  # three different seeds
    # its messages from the one ledger: 32 images of 784 B, 32 labels and a 4-byte mask, an 8-byte header each
    kinds = mine["bytes_by_kind"]
    copies = kinds["inputs"] / (32 * 784)
    assert copies > 0 and kinds["payload"] == pytest.approx(copies * (32 + 4))
    assert kinds["indices"] == pytest.approx(copies * 8) and kinds["parameters"] == 0
    assert mine["paired_diff_vs_isolated_ci95"] is not None  # paired with the built-ins on the same seeds
    assert mine["accuracy"] is not None and "confident_labels_shared" in fr.under(rows, "shared")
    assert summary["frontier"] == fr.pareto(fr.under(rows, "private"))  # compared with the built-ins
