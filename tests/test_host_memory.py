"""jaxcomm.host_memory: freed host memory stays mapped between calls (glibc), and the switch that turns it off."""

import os
import subprocess
import sys

import pytest

from jaxcomm import host_memory

# A jitted call whose 64 MB output is freed before the next call: 16,384 pages of 4 KiB to fault in afresh where
# glibc unmaps the block when it is freed (its mmap threshold is 32 MB at most), none where the block is kept.
PAGES = 64 * 2**20 // 4096
CALLS = 20
FAULTS = f"""
import resource, statistics
import jax, jax.numpy as jnp
import jaxcomm
double = jax.jit(lambda x: x * 2.0)
x = jnp.ones(({PAGES * 1024},), jnp.float32)
faults = []
for _ in range({CALLS}):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    double(x).block_until_ready()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(jaxcomm.HOST_MEMORY, statistics.median(faults))
"""


def faults_per_call(mode: str) -> tuple[str, float]:
    """(the mode in force, the median call's minor page faults) in a fresh interpreter importing jaxcomm with
    ``mode`` (a kept heap still grows in a few calls, to its steady size)."""
    env = {**os.environ, host_memory.ENV: mode}
    proc = subprocess.run([sys.executable, "-c", FAULTS], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    applied, faults = proc.stdout.split()
    return applied, float(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_blocks_stay_mapped_unless_released():
    applied, kept = faults_per_call("keep")
    if applied != "keep":
        pytest.skip("no glibc mallopt here")
    released_as, released = faults_per_call("release")
    assert released_as == "release"
    # glibc's defaults fault the whole 64 MB block in on every call; kept, the block is the last call's
    assert released >= PAGES / 2, released
    assert kept <= PAGES / 50, kept


def test_release_by_default_and_a_mode_it_does_not_know_is_an_error(monkeypatch):
    monkeypatch.setenv(host_memory.ENV, "sometimes")
    with pytest.raises(ValueError, match="JAXCOMM_HOST_MEMORY must be 'keep' or 'release'"):
        host_memory.configure()
    monkeypatch.setenv(host_memory.ENV, "release")
    assert host_memory.configure() == "release"
    monkeypatch.delenv(host_memory.ENV)
    assert host_memory.configure() == "release"  # glibc's defaults unless asked: small nodes lose (see its docstring)
