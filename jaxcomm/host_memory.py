"""Host memory that stays mapped between calls of a compiled program (glibc's malloc, Linux).

XLA:CPU gives each call of a compiled program its temporaries in one block and frees it when the call ends (250 MB
a step for the benchmark CNN's 10 nodes as patches). glibc serves a block over its mmap threshold (32 MB at most)
with a fresh ``mmap`` and unmaps it when freed, and hands the free top of each thread's arena back to the kernel,
so the next call faults every page in again: 27,000 minor faults a step for the CNN's unrolled nodes, 70,000 as
patches.

:func:`keep` asks glibc to serve every block from one arena that it never trims and never to mmap (``mallopt``): the
blocks a step frees are the next step's, already mapped, and the process keeps its peak resident size instead of
handing memory back between calls (a peak that can exceed the defaults': where a block is freed after the next
call's is asked for, the heap grows by a block, a few times before it holds enough free ones). Importing
:mod:`jaxcomm` calls it where ``JAXCOMM_HOST_MEMORY=keep``; by default glibc's settings stay. Measured on a 2-core
Xeon (``results/benchmark/vs_pytorch/host_memory*.md``), it is a lever for convolutional nodes and a loss for small
ones: the CNN's unrolled step 1.06-1.12x faster, dispatched as patches 1.17-1.27x, its eager per-node loop
0.92-1.00x; the student MLP's 64 nodes, whose blocks are under the threshold, 0.90x under ``vmap`` and 0.52-0.59x
unrolled (every XLA thread's allocations behind one arena's lock). It acts on allocations made after it: in a
program that ran XLA computations before importing jaxcomm, threads already holding arenas keep them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

ENV = "JAXCOMM_HOST_MEMORY"
KEEP, RELEASE = "keep", "release"

# mallopt's parameters, from glibc's malloc.h
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8
_NEVER_TRIM = 2**31 - 1  # the largest int: a free top is handed back only past this many bytes


def keep() -> bool:
    """Keeps freed host memory mapped for the next call (one arena, no mmap, no trim); True where glibc took it,
    False, changing nothing, where the C library has no ``mallopt`` (macOS, musl)."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return all(mallopt(param, value) == 1 for param, value in
               ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, _NEVER_TRIM)))


def configure() -> str:
    """What importing jaxcomm does: :func:`keep` where ``JAXCOMM_HOST_MEMORY=keep``. Returns the mode in force:
    "keep", or "release" (glibc's defaults: unset, asked for, or no glibc)."""
    mode = os.environ.get(ENV, RELEASE).strip().lower() or RELEASE
    if mode not in (KEEP, RELEASE):
        raise ValueError(f"{ENV} must be {KEEP!r} or {RELEASE!r}, got {os.environ[ENV]!r}")
    return KEEP if mode == KEEP and keep() else RELEASE
