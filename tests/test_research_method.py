"""Research code brings its own method: defined here, outside jaxcomm, swept over 3 seeds and put on the bandwidth
frontier beside the built-in methods through the experiment's public entry point, with no library edit."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import exchange, network
from jaxcomm.harness import frontier as fr
from jaxcomm.models import MLP


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
    assert rows["sync_sgd"]["graph"] == "-" and rows["confident_labels"]["graph"] == "ring(1)"  # its own configure
    mine = rows["confident_labels"]
    assert mine["seeds"] == 3 and mine["family"] == "outputs" and mine["spec"] == "confident_labels"
    assert len({p["accuracy"] for p in mine["per_seed"]}) > 1  # three different seeds
    # its messages from the one ledger: 32 images of 784 B, 32 labels and a 4-byte mask, an 8-byte header each
    kinds = mine["bytes_by_kind"]
    copies = kinds["inputs"] / (32 * 784)
    assert copies > 0 and kinds["payload"] == pytest.approx(copies * (32 + 4))
    assert kinds["headers"] == pytest.approx(copies * 8) and kinds["indices"] == kinds["parameters"] == 0
    # under the stored encoding the images are MNIST's mean stored size (jaxcomm.data.STORED_BYTES_PER_IMAGE)
    stored = mine["bytes_by_kind_stored"]
    assert stored["inputs"] == pytest.approx(copies * 32 * 165.16) and stored["payload"] == kinds["payload"]
    assert mine["bytes_per_node_step_stored"] == pytest.approx(sum(stored.values()))
    assert mine["paired_diff_vs_isolated_ci95"] is not None  # paired with the built-ins on the same seeds
    assert mine["accuracy"] is not None and "confident_labels_shared" in fr.under(rows, "shared")
    assert summary["frontier"] == fr.pareto(fr.under(rows, "private"))  # compared with the built-ins


# ---- a method of research code on the kit's node population: top-k gossip with error feedback (CHOCO-SGD) ----

from jaxcomm import kit, ledger, methods, topology  # noqa: E402


def choco_gossip(fraction: float, step_size: float = 0.5) -> methods.Method:
    """Koloskova et al. (2019), CHOCO-SGD: each node keeps a public copy x_hat of every node's parameters, sends
    only the top-k coordinates of x - x_hat (values and positions) and moves toward the mix of the copies."""

    def build(config, model, *, image_shape, num_classes):
        pop = kit.nodes(config, model, image_shape=image_shape, num_classes=num_classes, static_graph=True)
        k = max(1, round(fraction * pop.num_params))

        def top_k(v):  # [P] -> [P]: the k largest coordinates by magnitude, the others 0
            kept = jax.lax.top_k(jnp.abs(v), k)[1]
            return jnp.zeros_like(v).at[kept].set(v[kept])

        def communicate(state, ctx):  # after every node's local step
            x = pop.flat_params(state)  # [N, P]
            hat = state.extra + jax.vmap(top_k)(x - state.extra)  # what each node sent updates every copy of it
            x = x + step_size * (topology.mixing_matrix(state.graph) @ hat - hat)
            return pop.with_flat_params(state, x)._replace(extra=hat)

        sent = [ledger.Round("neighbours", 4.0 * k, edges=pop.edges, kind=kind) for kind in ("parameters",
                                                                                         "coordinates")]
        return pop.built_with(kit.Communicator(init=lambda nodes, key: jnp.zeros((config.num_nodes, pop.num_params)),
                                               communicate=communicate, traffic=sent, extra_per_node=True))

    return methods.Method(f"choco_top{fraction:g}", build, family="gossip")  # on the config's graph


def test_a_method_on_the_node_population_joins_the_frontier_beside_gossip():
    config = dataclasses.replace(fr.smoke_config(), methods=("outputs:none", "gossip:5"), num_seeds=3)
    summary = fr.run(config, methods=[choco_gossip(0.1)], progress=False)
    rows = summary["rows"]
    mine, gossip = rows["choco_top0.1"], rows["gossip_5"]
    assert mine["seeds"] == 3 and len({p["accuracy"] for p in mine["per_seed"]}) > 1
    # every step, k float32 values and k int32 positions along each edge of the ring (one out-edge per node)
    k = round(0.1 * mine["num_params"])
    assert mine["bytes_by_kind"] == {"inputs": 0.0, "payload": 0.0, "parameters": 4.0 * k, "indices": 0.0,
                                     "headers": 0.0, "coordinates": 4.0 * k}
    assert mine["bytes_per_node_step_stored"] == mine["bytes_per_node_step"]  # no inputs travel
    assert mine["paired_diff_vs_isolated_ci95"] is not None and gossip["seeds"] == 3
    # the frontier's one stated graph: the research method runs on gossip's ring; isolated nodes send nothing,
    # so no graph is named for them
    assert mine["graph"] == gossip["graph"] == "ring(1)" and rows["isolated"]["graph"] == "-"


# ---- bytes by content: a message books the payload it carries (issue 59 item 3) ----


def zeros_only() -> exchange.Exchange:
    """Labels sent only for the samples of class 0, each as one uint8, with a bit mask of which: the payload of a
    message depends on what it carries (content_bytes), not only on its batch size."""

    def outgoing(logits, features, targets, received, consumed):
        return jnp.where(consumed, received, targets * targets[:, :1])  # class 0's one-hot rows, zeros elsewhere

    return exchange.Exchange("zeros_only", lambda num_classes, feature_dim: num_classes, outgoing,
                             lambda logits, features, received: exchange.cross_entropy(logits, received),
                             lambda batch, dim: batch + (batch + 7) // 8,  # the bound: every sample sent
                             content_bytes=lambda out: jnp.sum(jnp.any(out != 0, axis=-1)) + (out.shape[0] + 7) // 8)


def test_a_message_books_the_bytes_of_what_it_carries(tiny_dataset):
    """Hand count: every node broadcasts its local batch to its one out-neighbour each step; a copy's payload is
    its class-0 samples (1 byte each) and a 1-byte mask, where the static count books 5 + 1 for every copy."""
    cfg = network.NetworkConfig(num_nodes=4, num_neighbours=1, batch_size=5, consume_prob=0.0, broadcast_prob=1.0,
                                num_steps=3, eval_every=3, backend="vmap", step_loop="scan", seed=1)
    net = network.make_network(cfg, MLP(hidden=(12,), num_classes=4), image_shape=(8, 8, 1), num_classes=4,
                               exchange=zeros_only())
    data, state, step = network.network_data(tiny_dataset, cfg), net.init(jax.random.PRNGKey(1)), jax.jit(net.step)
    expected = 0
    for _ in range(3):
        state, info = step(state, data)
        labels = tiny_dataset.train.labels[np.asarray(info.indices)]  # [4 nodes, 5]
        expected += int(np.sum(labels == 0)) + 4 * 1  # their class-0 samples and one mask byte a copy
    booked = network.booking(net, state)
    copies = network.counter_totals(state)["sent"]
    assert copies == 12 and 0 < expected < copies * 6
    assert int(state.payload_sent) == booked.payload == expected
    assert booked.headers == copies * 8 and booked.inputs == copies * 5 * 64
