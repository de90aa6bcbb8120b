"""Shared fixtures: tiny synthetic image sets (unit tests only; experiments never use them)."""

from __future__ import annotations

import os
import tempfile

# Tests check what programs compute, not how fast: XLA's CPU backend without its LLVM optimisations compiles
# about a third faster and computes the same values (to float rounding; every test compares with a tolerance
# or compares two runs built alike). Set before JAX starts its backend; scripts the tests start inherit it.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()
# Tried and not taken (2026-12-03, jax 0.10.2): --xla_cpu_use_fusion_emitters=false compiles faster
# (tests/test_exchange.py 38 -> 22 s, test_methods + test_pace 182 -> 89 s, machine quiet), but two programs that
# are bit-identical under XLA's default emitters stop being so (8 tests fail: own pace at equal speeds against
# lockstep, LGC's stage one against top-k, Leader SGD's zero pull against isolated nodes and its sweep against its
# runs alone), so the suite would test a guarantee users' runs do not share under the flags users run.
# "auto" backends read the shipped table in tests (tests/test_speed.py turns timing on in a folder of its own):
# timing every new model would cost minutes and make the picks depend on the machine's load.
os.environ["JAXCOMM_AUTOTUNE"] = "0"

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from jaxcomm.data import ImageDataset, ImageSplit  # noqa: E402

# Many tests build the same program again (a network rebuilt for each run compiles afresh): XLA's
# persistent cache, in a folder of this session, compiles each one once (measured: a third off
# tests/test_exchange.py). The pytest-xdist workers inherit the folder the controlling process made, so a
# program one worker compiled is read by the other; the variables carry it to the scripts the tests start.
_CACHE = os.environ.get("JAXCOMM_TESTS_XLA_CACHE") or tempfile.mkdtemp(prefix="jaxcomm-tests-xla-")
os.environ["JAXCOMM_TESTS_XLA_CACHE"] = os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def synthetic_split(rng: np.random.Generator, size: int, shape=(8, 8, 1), num_classes: int = 4) -> ImageSplit:
    """Noise images whose label is written as one bright pixel, so they are learnable."""
    labels = rng.integers(0, num_classes, size).astype(np.int32)
    images = (rng.random((size, *shape)) * 80).astype(np.uint8)
    images[np.arange(size), labels, labels, 0] = 255
    return ImageSplit(images, labels)


@pytest.fixture(scope="session")
def tiny_dataset() -> ImageDataset:
    rng = np.random.default_rng(0)
    return ImageDataset("synthetic", synthetic_split(rng, 240), synthetic_split(rng, 0), synthetic_split(rng, 64), 4)


@pytest.fixture
def record_training(monkeypatch):
    """``record_training()`` records every ``jaxcomm.driver.train`` call from then on, as ``(desc, resumed_from,
    steps_done)`` in the list it returns: which runs trained and which came back from their checkpoints."""
    from jaxcomm import driver  # noqa: PLC0415

    def start() -> list[tuple]:
        calls, drive = [], driver.train

        def recorded(*args, **kwargs):
            result = drive(*args, **kwargs)
            calls.append((kwargs["desc"], result["resumed_from"], result["steps_done"]))
            return result

        monkeypatch.setattr(driver, "train", recorded)
        return calls

    return start
