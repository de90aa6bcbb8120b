"""Federated methods (jaxcomm.federated): M clients, a cohort of K per round in the kit's K slots.

A cohort of every client is local SGD bit for bit; a cohort of one is that client trained alone; the server's
weighted mean, FedAdam's step and SCAFFOLD's variates against hand computations; FedProx at mu = 0 is FedAvg; the
cohort stream changes no other draw; the bytes of a "server" round; a held slot at its own pace; 10,000 clients.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import synthetic_split

from jaxcomm import classifier, clock, federated, kit, ledger, local_sgd, methods, population, zoo
from jaxcomm.data import ImageDataset
from jaxcomm.models import MLP

MODEL = MLP(hidden=(12,), num_classes=4)
LR = 0.1


def config(**kw) -> kit.RunConfig:
    return kit.RunConfig(**({"num_nodes": 4, "batch_size": 8, "num_steps": 12, "eval_every": 12, "backend": "vmap",
                             "step_loop": "scan", "learning_rate": LR} | kw))


def run(method, cfg, dataset, ticks: int):
    """``(built, data, states, infos)``: ``ticks`` jitted steps of ``method``; ``states[t]`` after t ticks."""
    built = methods.build(method, cfg, MODEL, dataset)
    data = methods.shard_data(method, dataset, built.config)
    step, state = jax.jit(built.step), built.init(jax.random.PRNGKey(cfg.seed))
    states, infos = [state], []
    for _ in range(ticks):
        state, info = step(state, data)
        states.append(state)
        infos.append(info)
    return built, data, states, infos


def leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x, np.float64) for x in jax.tree.leaves(tree)]


def glob(state) -> list[np.ndarray]:
    """The global model's parameters, ``[...]`` leaves (the population of one dropped)."""
    return [x[0] for x in leaves(state.extra.model.params)]


def num_params(state) -> int:
    return sum(x.size for x in glob(state))


def test_a_cohort_of_every_client_is_local_sgd_bit_for_bit(tiny_dataset):
    # K = M = 4, uniform weighting, plain-SGD clients, server sgd(1.0): local SGD with SGD nodes, three rounds of 3
    reference = methods.Method("local_sgd_sgd", lambda c, m, **k: local_sgd.make_local_sgd(
        c, m, **k, sync_every=3, outer=local_sgd.local_sgd_outer(), inner=optax.sgd(LR)), score="model")
    _, _, local, local_infos = run(reference, config(), tiny_dataset, 9)
    built, data, fed, fed_infos = run(federated.fedavg(3, weighting="uniform"), config(), tiny_dataset, 9)
    assert isinstance(built.config, federated.FederatedConfig) and built.config.num_clients == 4
    for got, want in zip(jax.tree.leaves(fed[-1].extra.model), jax.tree.leaves(local[-1].extra), strict=True):
        np.testing.assert_array_equal(got, want)
    for a, b in zip(fed_infos, local_infos, strict=True):
        np.testing.assert_array_equal(a.indices, b.indices)  # the same minibatches
        np.testing.assert_array_equal(a.cohort, np.arange(4))  # K = M: every client, in order
    np.testing.assert_array_equal(fed[-1].key, local[-1].key)  # the cohort stream took no key of the run
    assert [bool(i.synced) for i in fed_infos] == [False, False, True] * 3


def test_a_cohort_of_one_client_for_one_round_is_that_client_trained_alone(tiny_dataset):
    _, data, fed, infos = run(federated.fedavg(3, cohort=1), config(), tiny_dataset, 3)
    _, _, drift, _ = run(federated.fedavg(100, cohort=1), config(), tiny_dataset, 3)  # the same ticks, no close
    client = int(infos[0].cohort[0])
    shard = np.asarray(data.shard_indices[client, : data.shard_sizes[client]])
    assert all(np.isin(np.asarray(i.indices), shard).all() for i in infos)  # every row from the client's shard
    # alone: one node of plain SGD at the run's rate, on that client's shard, from the same start and keys
    alone_config = config(num_nodes=1)
    pop = kit.nodes(alone_config, MODEL, image_shape=(8, 8, 1), num_classes=4, optimizer=optax.sgd)
    alone = pop.built_with(kit.Communicator(same_start=True))
    own = kit.Population.slots_data(data, jnp.asarray([client]))  # its shard of the M clients' partition
    state, step = alone.init(jax.random.PRNGKey(0)), jax.jit(alone.step)
    for _ in range(3):
        state, _ = step(state, own)
    for got, want in zip(leaves(drift[-1].nodes.params), leaves(state.nodes.params), strict=True):
        np.testing.assert_array_equal(got, want)  # the slot is the client trained alone, bit for bit
    for got, want in zip(glob(fed[-1]), leaves(state.nodes.params), strict=True):
        np.testing.assert_allclose(got, want[0], rtol=1e-6, atol=1e-7)  # x - (x - y): y, to rounding


def test_the_server_averages_by_sample_count_and_fedadam_steps_on_the_pseudo_gradient_by_hand(tiny_dataset):
    cfg = config(partition="dirichlet", dirichlet_alpha=0.5)
    _, data, fed, infos = run(federated.fedavg(2, cohort=2), cfg, tiny_dataset, 2)
    _, _, drift, _ = run(federated.fedavg(100, cohort=2), cfg, tiny_dataset, 2)  # the clients' y_i, before the close
    _, _, adam, _ = run(federated.fedadam(2, cohort=2, server_lr=0.05), cfg, tiny_dataset, 2)
    sizes, ids = np.asarray(data.shard_sizes), np.asarray(infos[0].cohort)
    assert sizes.shape == (4,) and sizes.sum() == 240 and len(set(sizes[ids])) == 2  # M clients, unequal shards
    w = sizes[ids] / sizes[ids].sum()
    x0, ys = glob(fed[0]), leaves(drift[-1].nodes.params)
    for got, y in zip(glob(fed[-1]), ys, strict=True):
        want = np.tensordot(w, y, 1)  # FedAvg: sum_i n_i y_i / sum_i n_i
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        assert not np.allclose(want, y.mean(0), rtol=1e-5, atol=1e-6)  # the weights matter
    for got, x, y in zip(glob(adam[-1]), x0, ys, strict=True):  # Adam's first step: x - lr g / (|g| + eps)
        g = x - np.tensordot(w, y, 1)
        np.testing.assert_allclose(got, x - 0.05 * g / (np.abs(g) + 1e-3), rtol=1e-4, atol=1e-6)


def test_scaffold_variates_and_corrected_gradients_by_hand(tiny_dataset):
    # M = 4, K = 2, H = 2, plain SGD at 0.1: round one's c_i+ = (x - y_i) / (H lr), c = (K / M) mean(c_i+), x += mean
    # (y_i - x); round two's first step is x - lr (g - c_i + c)
    built, data, sc, infos = run(federated.scaffold(2, cohort=2), config(), tiny_dataset, 3)
    _, _, drift, _ = run(federated.scaffold(100, cohort=2), config(), tiny_dataset, 2)
    ids, next_ids = np.asarray(infos[0].cohort), np.asarray(infos[2].cohort)
    x0, ys = glob(sc[0]), leaves(drift[-1].nodes.params)
    after = sc[2].extra
    rows = [np.zeros((4, *x.shape)) for x in x0]
    for row, x, y in zip(rows, x0, ys, strict=True):
        row[ids] = (x - y) / (2 * LR)
    control = [0.5 * row[ids].mean(0) for row in rows]
    x1 = [x + (y - x).mean(0) for x, y in zip(x0, ys, strict=True)]
    for got, want in zip(leaves(after.clients), rows, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    for got, want in zip(leaves(after.control), control, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    for got, want in zip(glob(sc[2]), x1, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for got, table in zip(leaves(after.slots), leaves(after.clients), strict=True):
        np.testing.assert_array_equal(got, table[after.cohort])  # the next cohort's rows, gathered
    np.testing.assert_array_equal(after.cohort, next_ids)
    # the next round's first step, by hand: every slot from x1, its client's c_i and the server's c
    loss = classifier.classifier_loss(MODEL)
    treedef = jax.tree.structure(sc[0].extra.model.params)
    start = jax.tree.unflatten(treedef, [jnp.asarray(x, jnp.float32) for x in glob(sc[2])])
    for j, client in enumerate(next_ids):
        rows_ = np.asarray(infos[2].indices[j])
        images, targets = data.images[rows_], jax.nn.one_hot(data.labels[rows_], 4)
        g = jax.grad(lambda p, i=images, t=targets: loss(p, {}, i, t, None)[0])(start)
        for got, gl, x, c_i, c in zip(leaves(sc[3].nodes.params), leaves(g), glob(sc[2]), rows, control,
                                      strict=True):
            np.testing.assert_allclose(got[j], x - LR * (gl - c_i[client] + c), rtol=1e-4, atol=1e-5)


def test_fedprox_at_mu_zero_is_fedavg_and_the_cohorts_are_reproducible(tiny_dataset):
    _, _, avg, avg_infos = run(federated.fedavg(3, cohort=2), config(), tiny_dataset, 9)
    _, _, prox, prox_infos = run(federated.fedprox(3, 0.0, cohort=2), config(), tiny_dataset, 9)
    for got, want in zip(jax.tree.leaves(prox[-1].extra.model), jax.tree.leaves(avg[-1].extra.model), strict=True):
        np.testing.assert_array_equal(got, want)
    cohorts = np.stack([np.asarray(i.cohort) for i in avg_infos])
    np.testing.assert_array_equal(cohorts, np.stack([np.asarray(i.cohort) for i in prox_infos]))
    assert (np.diff(cohorts, axis=1) > 0).all()  # distinct, ascending
    assert len({tuple(c) for c in cohorts}) > 1  # a new cohort each round
    _, _, again, again_infos = run(federated.fedavg(3, cohort=2), config(), tiny_dataset, 9)
    np.testing.assert_array_equal(cohorts, np.stack([np.asarray(i.cohort) for i in again_infos]))
    _, _, other, other_infos = run(federated.fedavg(3, cohort=2), config(seed=1), tiny_dataset, 9)
    assert not np.array_equal(cohorts, np.stack([np.asarray(i.cohort) for i in other_infos]))
    # the cohort's stream is its own: the run's key chain is local SGD's (every other method's draws unchanged)
    _, _, local, _ = run(local_sgd.local_sgd(3), config(), tiny_dataset, 9)
    np.testing.assert_array_equal(avg[-1].key, local[-1].key)
    # mu > 0 pulls the clients toward the global model
    _, _, pulled, _ = run(federated.fedprox(3, 5.0, cohort=2), config(), tiny_dataset, 2)
    x0 = glob(avg[0])
    spread = lambda state: sum(np.abs(w - x).sum() for w, x in zip(leaves(state.nodes.params), x0, strict=True))  # noqa: E731
    assert spread(pulled[-1]) < spread(avg[2])


def test_a_cohort_drawn_by_weight_follows_the_sample_counts():
    sizes = jnp.asarray([1, 1, 2, 96], jnp.int32)
    keys = jax.random.split(jax.random.PRNGKey(0), 4000)
    draws = np.asarray(jax.vmap(lambda k: federated.draw_cohort(k, sizes, 1, "weight"))(keys))[:, 0]
    np.testing.assert_allclose(np.bincount(draws, minlength=4) / 4000, [0.01, 0.01, 0.02, 0.96], atol=0.012)
    uniform = np.asarray(jax.vmap(lambda k: federated.draw_cohort(k, sizes, 2, "uniform"))(keys))
    assert (uniform[:, 0] < uniform[:, 1]).all()
    np.testing.assert_allclose(np.bincount(uniform.ravel(), minlength=4) / 4000, [0.5] * 4, atol=0.04)
    np.testing.assert_array_equal(federated.draw_cohort(keys[0], sizes, 4, "weight"), np.arange(4))


def test_the_bytes_of_a_server_round_and_its_seconds(tiny_dataset):
    cfg = config(num_steps=6, eval_every=6)
    fedavg = methods.train(federated.fedavg(2, cohort=2), cfg, MODEL, tiny_dataset, progress=False)
    p = num_params(fedavg["state"])
    assert fedavg["bytes"]["total"] == 3 * 2 * 4 * p  # three rounds, K = 2 uploads of P float32 each
    assert fedavg["bytes"]["by_kind"]["parameters"] == pytest.approx(3 * 2 * 4 * p / (2 * 6))  # per slot and step
    cluster = clock.Cluster(clock.Compute(1.0), clock.Link(1e5, 0.05))
    scaffold = methods.train(federated.scaffold(2, cohort=2), cfg, MODEL, tiny_dataset, progress=False,
                             cluster=cluster)
    assert scaffold["bytes"]["total"] == 2 * fedavg["bytes"]["total"]  # the variates travel too
    each = 2 * (0.05 + 2 * 8 * p / 1e5)  # up and down through the server's link, the K copies one after the other
    assert scaffold["final"]["clock"]["seconds"] == pytest.approx(6 * 1.0 + 3 * each)
    round_ = ledger.Round("server", 1000.0)
    assert round_.sent_per_round(3) == 3000.0
    assert clock.round_seconds(round_, clock.Cluster(clock.Compute(1.0), clock.Link(1e5, 0.05)), 1) \
        == pytest.approx(2 * (0.05 + 1000 / 1e5))  # one client still talks to the server
    slow = clock.Cluster(clock.Compute(1.0), clock.Link(1e5, 0.05), uplinks=(1e5, 100.0, 1e5))
    assert clock.round_seconds(round_, slow, 3) == pytest.approx((0.05 + 1000 / 100.0) + (0.05 + 3000 / 1e5))


SPEEDS = clock.Cluster(clock.Compute(1.0, speed=(1.0, 1.0, 3.0)), clock.INSTANT)


@pytest.mark.parametrize("make", [lambda: federated.fedavg(2, cohort=3), lambda: federated.scaffold(2, cohort=3),
                                  lambda: federated.fedprox(2, 0.1, cohort=3)], ids=["fedavg", "scaffold", "fedprox"])
def test_at_its_own_pace_a_held_slot_does_not_move(make, tiny_dataset):
    method, cfg = make(), config(num_nodes=6, num_steps=9, eval_every=9)  # K = 3 of M = 6 clients
    built = methods.build(method, cfg, MODEL, tiny_dataset, cluster=SPEEDS, own_pace=True)
    paced, timeline = methods.at_own_pace(built, SPEEDS, True)
    data = methods.shard_data(method, tiny_dataset, paced.config, timeline=timeline)
    assert data.shard_indices.shape[0] == 6
    step, state = jax.jit(paced.step), paced.init(jax.random.PRNGKey(0))
    held = 0
    for t in range(9):
        before = leaves(state.nodes)
        state, _ = step(state, data)
        kept = timeline.due[t] | (timeline.closes[t] & timeline.members[t])
        for i in np.flatnonzero(~kept):
            held += 1
            for b, a in zip(before, leaves(state.nodes), strict=True):
                np.testing.assert_array_equal(a[i], b[i], err_msg=f"slot {i}, tick {t}")
    assert held > 0
    out = methods.train(method, cfg, MODEL, tiny_dataset, progress=False, cluster=SPEEDS, own_pace=True)
    rounds = int(timeline.closes[:9].sum())
    assert rounds >= 1 and out["bytes"]["total"] == rounds * 3 * paced.traffic[0].nbytes


def test_ten_thousand_clients_a_cohort_of_a_hundred_train_quickly():
    rng = np.random.default_rng(0)
    many = ImageDataset("synthetic", synthetic_split(rng, 10_000, shape=(4, 4, 1)), synthetic_split(rng, 0, (4, 4, 1)),
                        synthetic_split(rng, 64, (4, 4, 1)), 4)
    tiny = MLP(hidden=(8,), num_classes=4)
    cfg = config(num_nodes=10_000, batch_size=4, num_steps=6, eval_every=6)
    start = time.perf_counter()
    out = methods.train(federated.scaffold(2, cohort=100), cfg, tiny, many, progress=False)
    seconds = time.perf_counter() - start
    extra, p = out["state"].extra, num_params(out["state"])
    assert out["built"].config.num_nodes == 100 and out["built"].config.num_clients == 10_000
    assert np.unique(np.asarray(extra.cohort)).size == 100 and int(extra.cohort.max()) < 10_000
    table = sum(x.nbytes for x in jax.tree.leaves(extra.clients))
    assert table == 10_000 * 4 * p  # the docstring's 4 x P bytes per client
    assert np.count_nonzero(np.abs(leaves(extra.clients)[0]).reshape(10_000, -1).sum(1)) <= 300  # 3 cohorts' rows
    assert out["bytes"]["total"] == 3 * 100 * 2 * 4 * p and np.isfinite(out["final"]["loss"])
    assert seconds < 60, seconds


def test_configs_of_clients_and_errors_naming_the_field_before_anything_compiles(tiny_dataset):
    fed = federated.FederatedConfig(num_nodes=2, num_clients=6, batch_size=8)
    assert fed.num_shards == 6 and kit.RunConfig(num_nodes=3).num_shards == 3
    assert federated.clients_config(fed) == federated.clients_config(federated.clients_config(fed))
    assert federated.clients_config(config(), 3).num_nodes == 3 and federated.clients_config(config()).num_nodes == 4
    method = federated.fedavg(2)
    assert methods.shard_data(method, tiny_dataset, method.config_for(fed)).shard_indices.shape[0] == 6
    with pytest.raises(ValueError, match=r"cohort must be an integer in \[1, num_clients = 4\]"):
        methods.build(federated.fedavg(2, cohort=5), config(), MODEL, tiny_dataset)
    with pytest.raises(ValueError, match="num_clients must be an integer >= num_nodes = 5"):
        federated.FederatedConfig(num_nodes=5, num_clients=4)
    for make, field in [(lambda: federated.fedavg(0), "local_steps"), (lambda: federated.fedavg(2, cohort=0), "cohort"),
                        (lambda: federated.fedavg(2, weighting="mean"), "weighting"),
                        (lambda: federated.fedavg(2, sampling="size"), "sampling"),
                        (lambda: federated.fedavg(2, server_optimizer=optax.sgd), "server_optimizer"),
                        (lambda: federated.fedprox(2, -1.0), "mu"),
                        (lambda: federated.fedadam(2, server_lr=0), "server_lr"),
                        (lambda: federated.scaffold(0), "local_steps")]:
        with pytest.raises(ValueError, match=f"^{field} must be"):
            make()
    assert [zoo.parse(s).name for s in ("fedavg:5:10", "fedprox:5:0.01", "scaffold:2", "fedadam:3:2")] \
        == ["fedavg_h5_k10", "fedprox_h5_mu0.01", "scaffold_h2", "fedadam_h3_k2"]
    with pytest.raises(ValueError, match="fedprox:<H>:<mu>"):
        zoo.parse("fedprox:5")


def test_a_sweep_varies_mu_and_the_client_rate_as_data(tiny_dataset):
    cfg = config(num_steps=4, eval_every=4)
    method = federated.fedprox(2, 0.0, cohort=2)
    swept = methods.sweep(method, [cfg, cfg.replace(learning_rate=0.3)], MODEL, tiny_dataset, progress=False,
                          hyper=[{"mu": 0.0}, {"mu": 0.5}])
    for out, (c, mu) in zip(swept, [(cfg, 0.0), (cfg.replace(learning_rate=0.3), 0.5)], strict=True):
        alone = methods.train(method, c, MODEL, tiny_dataset, progress=False, hyper={"mu": mu})
        for got, want in zip(leaves(out["state"].extra.model), leaves(alone["state"].extra.model), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert not np.allclose(glob(swept[0]["state"])[0], glob(swept[1]["state"])[0])
    assert population.num_nodes(swept[0]["state"].nodes) == 2


def test_the_eager_per_slot_loop_trains_as_the_stacked_step(tiny_dataset):
    # nodes held apart between closes ("loop" + "eager", FedAvg's stacked=False) against vmap in one scan
    cfg = config(num_nodes=6, num_steps=4, eval_every=4)
    runs = [methods.train(federated.fedavg(2, cohort=3), cfg.replace(backend=b, step_loop=s), MODEL, tiny_dataset,
                          progress=False) for b, s in (("vmap", "scan"), ("loop", "eager"))]
    for a, b in zip(leaves(runs[0]["state"].extra.model), leaves(runs[1]["state"].extra.model), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_fednova_normalises_unequal_local_work_by_hand(tiny_dataset):
    # K = M = 2 clients of unequal shards, H = 2 ticks a round; client 0 takes 2 steps, client 1 one
    assert federated.steps_from_speeds((1.0, 0.5, 0.26), 4) == (4, 2, 1)
    assert federated.steps_from_speeds((3.0, 1.0), 2) == (2, 1)
    cfg = config(num_nodes=2, partition="dirichlet", dirichlet_alpha=0.5)
    steps = federated.steps_from_speeds((3.0, 1.0), 2)
    _, data, nova, infos = run(federated.fednova(2, steps), cfg, tiny_dataset, 2)
    _, _, avg, _ = run(federated.fedavg(2, client_steps=steps), cfg, tiny_dataset, 2)
    _, _, drift, _ = run(federated.fedavg(100), cfg, tiny_dataset, 2)  # the clients' y_i after 1 and 2 steps, no close
    np.testing.assert_array_equal(infos[0].cohort, [0, 1])
    sizes = np.asarray(data.shard_sizes, np.float64)
    p, tau = sizes / sizes.sum(), np.array([2.0, 1.0])
    assert p[0] != p[1]
    x0 = glob(nova[0])
    y = [np.stack([two[0], one[1]]) for one, two in  # client 0 after its 2 steps, client 1 held after its first
         zip(leaves(drift[1].nodes.params), leaves(drift[2].nodes.params), strict=True)]
    for got, fedavg_got, x, yi in zip(glob(nova[-1]), glob(avg[-1]), x0, y, strict=True):
        want = (p @ tau) * np.tensordot(p / tau, x[None] - yi, 1)  # tau_eff sum_i p_i (x - y_i) / tau_i
        np.testing.assert_allclose(got, x - want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(fedavg_got, np.tensordot(p, yi, 1), rtol=1e-5, atol=1e-6)  # FedAvg: as it is
        assert not np.allclose(got, fedavg_got, rtol=1e-5, atol=1e-6)  # the normalisation matters
    # a held client is still through its held tick: slot 1's model after tick 2 is its model after tick 1
    _, _, held, _ = run(federated.fedavg(3, client_steps=(3, 1)), cfg, tiny_dataset, 2)
    for a, b in zip(leaves(held[2].nodes), leaves(held[1].nodes), strict=True):
        np.testing.assert_array_equal(a[1], b[1])
        assert not np.array_equal(a[0], b[0])


def test_fednova_with_equal_work_is_fedavg_and_its_errors_name_the_field(tiny_dataset):
    cfg = config(partition="dirichlet", dirichlet_alpha=0.5)
    nova = methods.train(federated.fednova(2, cohort=2), cfg, MODEL, tiny_dataset, progress=False)
    avg = methods.train(federated.fedavg(2, cohort=2), cfg, MODEL, tiny_dataset, progress=False)
    for a, b in zip(leaves(nova["state"].extra.model.params), leaves(avg["state"].extra.model.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert nova["bytes"]["total"] == avg["bytes"]["total"]
    with pytest.raises(ValueError, match=r"^client_steps must be None or a tuple of integers in \[1, local_steps = 2"):
        federated.fednova(2, (3, 1, 1, 1))
    with pytest.raises(ValueError, match=r"^client_steps must be one per client \(M = 4\)"):
        methods.build(federated.fednova(2, (2, 1)), cfg, MODEL, tiny_dataset)
    with pytest.raises(ValueError, match="^speeds must be"):
        federated.steps_from_speeds((1.0, 0.0), 2)
