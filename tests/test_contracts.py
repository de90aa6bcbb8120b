"""Contracts research code relies on: configs that name a mistyped field and start no backend."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import flax.linen as nn
import jax
import numpy as np
import pytest

from jaxcomm import exchange, language, network, recipes, teacher, unsupervised, validation
from jaxcomm.models import MLP

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("build, typo, closest", [
    (network.NetworkConfig, "num_node", "num_nodes"), (recipes.Chapter2Recipe, "learning_rat", "learning_rate"),
    (language.AgentsConfig, "batchsize", "batch_size"), (teacher.SelectionConfig, "sed", "seed"),
    (unsupervised.UnsupervisedConfig, "num_step", "num_steps")])
def test_a_mistyped_field_is_refused_naming_the_closest(build, typo, closest):
    with pytest.raises(TypeError, match=f"has no field '{typo}'; did you mean '{closest}'") as error:
        build(**{typo: 1})
    assert "Its fields: " in str(error.value)
    with pytest.raises(TypeError, match="has no field 'zzz_unrelated'. Its fields"):
        build(zzz_unrelated=1)


BUILD_EVERY_CONFIG = """
import importlib, pkgutil
from jax._src import xla_bridge
import experiments
from jaxcomm import demo, language, network, recipes, teacher, unsupervised
network.NetworkConfig(num_nodes=12, num_neighbours=1, backend="sharded")
recipes.Chapter2Recipe(), language.AgentsConfig(), teacher.SelectionConfig(), unsupervised.UnsupervisedConfig()
demo.DemoConfig()
built = 0
for module in pkgutil.iter_modules(experiments.__path__):
    presets = getattr(importlib.import_module(f"experiments.{module.name}"), "PRESETS", {})
    for make in presets.values():
        make()
        built += 1
assert built >= 20, built
assert not xla_bridge.backends_are_initialized(), "building a config started a JAX backend"
print("ok", built)
"""


def test_building_every_public_config_starts_no_backend():
    """A multi-host program builds its configs before ``jax.distributed.initialize``: none may touch a device."""
    done = subprocess.run([sys.executable, "-c", BUILD_EVERY_CONFIG], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stderr[-2000:]


class NoTrainFlag(nn.Module):
    """A classifier with no ``train`` argument: nothing differs between training and evaluation."""

    @nn.compact
    def __call__(self, x):
        features = nn.relu(nn.Dense(8)(x.reshape(x.shape[0], -1)))
        return nn.Dense(4)(features), features


class LogitsOnly(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        return nn.Dense(4)(x.reshape(x.shape[0], -1))


def test_a_classifier_without_train_trains_and_one_without_features_is_refused_naming_the_contract(tiny_dataset):
    config = network.NetworkConfig(num_nodes=2, num_neighbours=1, content="true_labels", batch_size=4, num_steps=4,
                                   eval_every=4, backend="vmap", step_loop="scan")
    out = network.train_network(config, NoTrainFlag(), tiny_dataset, progress=False)
    assert out["steps_done"] == 4 and np.isfinite(out["final"]["loss"])
    with pytest.raises(TypeError, match=r"LogitsOnly returns \(1, 4\) on a \[1, 8, 8, 1\] batch; expected a Flax "
                                        r"module whose __call__\(self, x\)"):
        network.train_network(config, LogitsOnly(), tiny_dataset, progress=False)


def test_an_exchange_that_takes_a_key_sends_noise_from_its_own_stream(tiny_dataset):
    plain = exchange.Exchange("logits", lambda c, f: c, lambda logits, features, targets, received, consumed: logits,
                              lambda logits, features, received: exchange.cross_entropy(logits, received),
                              lambda b, d: 4 * b * d)
    noisy = plain._replace(name="noisy", outgoing=lambda logits, features, targets, received, consumed, key:
                           logits + 10.0 * jax.random.normal(key, logits.shape))
    assert validation.takes_keyword(noisy.outgoing, "key") and not validation.takes_keyword(plain.outgoing, "key")
    config = network.NetworkConfig(num_nodes=3, num_neighbours=2, batch_size=4, num_steps=6, eval_every=6,
                                   consume_prob=0.5, broadcast_prob=0.9, backend="vmap", step_loop="scan")
    runs = {name: network.train_network(config, MLP(hidden=(8,), num_classes=4), tiny_dataset, exchange=ex,
                                        progress=False) for name, ex in (("plain", plain), ("noisy", noisy))}
    again = network.train_network(config, MLP(hidden=(8,), num_classes=4), tiny_dataset, exchange=noisy,
                                  progress=False)
    # the same draws decide who sends and who consumes: the key is a stream of its own
    assert runs["noisy"]["final"]["counters"] == runs["plain"]["final"]["counters"]
    sent = [np.asarray(r["state"].inbox.messages.payload) for r in runs.values()]
    assert np.abs(sent[0] - sent[1]).max() > 1.0  # what they carry differs by the noise
    np.testing.assert_array_equal(np.asarray(again["state"].inbox.messages.payload), sent[1])  # same seed, same noise


@pytest.mark.parametrize("experiment", ["outputs_exchange", "bandwidth_frontier", "language"])
def test_an_experiments_help_lists_its_fields_with_defaults_and_the_report_subcommand(experiment):
    done = subprocess.run([sys.executable, "-m", f"experiments.{experiment}", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1000:]
    assert "config fields (field=value; the cpu preset's values" in done.stdout
    assert "  seed = 0" in done.stdout and f"python -m experiments.{experiment} report [DIR]" in done.stdout


def test_every_checkpoint_on_disk_calls_on_save(tiny_dataset, tmp_path):
    from jaxcomm.checkpoint import Checkpointer

    saved = []
    checkpointer = Checkpointer(tmp_path / "run", every=2, on_save=lambda: saved.append(checkpointer.latest_step()))
    config = network.NetworkConfig(num_nodes=2, num_neighbours=1, batch_size=4, num_steps=4, eval_every=2,
                                   backend="vmap", step_loop="scan")
    network.train_network(config, MLP(hidden=(4,), num_classes=4), tiny_dataset, progress=False,
                          checkpointer=checkpointer)
    assert saved == [2, 4]


def test_the_demo_writes_nothing_under_the_installed_package(tmp_path):
    """Many clusters install read-only: the choices cache, compiled programs and results go elsewhere."""
    site = tmp_path / "site"  # the package as an install lays it out (pure Python: its folder, assets included)
    shutil.copytree(ROOT / "jaxcomm", site / "jaxcomm", ignore=shutil.ignore_patterns("__pycache__"))
    package = site / "jaxcomm"
    before = {p: p.stat().st_mtime_ns for p in package.rglob("*")}
    env = {k: v for k, v in os.environ.items() if k != "JAXCOMM_AUTOTUNE"}  # the demo times its choice, too
    env |= {"PYTHONPATH": str(site), "JAXCOMM_CACHE_DIR": str(tmp_path / "cache"), "PYTHONDONTWRITEBYTECODE": "1"}
    work = tmp_path / "elsewhere"
    work.mkdir()
    found = subprocess.run([sys.executable, "-c", "import jaxcomm; print(jaxcomm.__file__)"], cwd=work,
                           capture_output=True, text=True, timeout=120, env=env)
    assert found.stdout.strip() == str(package / "__init__.py"), found.stderr[-1000:]
    demo = ["demo", "--nodes", "2", "--neighbours", "1", "--steps", "10", "--seeds", "1", "--no-progress"]
    ran = subprocess.run([sys.executable, "-m", "jaxcomm", *demo], cwd=work, capture_output=True, text=True,
                         timeout=600, env=env)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert {p: p.stat().st_mtime_ns for p in package.rglob("*")} == before  # nothing new, nothing changed
    assert (tmp_path / "cache" / "choices.json").is_file()
