"""jaxcomm.host_memory: freed host memory stays mapped between calls (glibc), and the switch that turns it off."""

import os
import subprocess
import sys

import pytest

from jaxcomm import host_memory

# A jitted call whose 64 MB output is freed before the next call: 16,384 pages of 4 KiB to fault in afresh where
# glibc unmaps the block when it is freed (its mmap threshold is 32 MB at most), none once a kept heap holds it. A
# kept heap grows for some calls before it holds enough free blocks (more of them on a busy machine, where blocks are
# freed later): what tells the modes apart is the call with the fewest faults.
PAGES = 64 * 2**20 // 4096
CALLS = 30
FAULTS = f"""
import resource
import jaxcomm  # before jax: the mode applies to allocations made after it
import jax, jax.numpy as jnp
double = jax.jit(lambda x: x * 2.0)
x = jnp.ones(({PAGES * 1024},), jnp.float32)
faults = []
for _ in range({CALLS}):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    double(x).block_until_ready()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(jaxcomm.HOST_MEMORY, min(faults))
"""


def fewest_faults(mode: str) -> tuple[str, float]:
    """(the mode in force, the fewest minor page faults of any call) in a fresh interpreter importing jaxcomm with
    ``mode``."""
    env = {**os.environ, host_memory.ENV: mode}
    proc = subprocess.run([sys.executable, "-c", FAULTS], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    applied, faults = proc.stdout.split()
    return applied, float(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_blocks_stay_mapped_unless_released():
    applied, kept = fewest_faults("keep")
    if applied != "keep":
        pytest.skip("no glibc mallopt here")
    released_as, released = fewest_faults("release")
    assert released_as == "release"
    # glibc's defaults fault the whole 64 MB block in on every call; kept, calls find a block already mapped
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
