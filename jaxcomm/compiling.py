"""How jaxcomm compiles the programs it builds: on a CPU, XLA's LLVM back end at -O2 instead of its default -O3.

The level changes how long a program takes to compile, not what it computes. On a 2-core CPU (jax 0.10.2, beside a
training run): a model's init compiled 3.4-4.7x faster at -O2 (the student MLP 1.08-1.47 -> 0.31-0.32 s, the
chapter-2 strided CNN 3.28-3.44 -> 0.81-0.94 s); FedAvg on 10 MLP clients (200 steps) and a 4-node CNN network (40
steps), one process, took 21.5-23.0 s against 26.2-27.2 s end to end; their trained parameters were the same bits;
10-node CNN and MLP networks stepped as fast within noise once compiled (measured at -O1). -O1 is not used: it changed
the last bits of a BatchNorm CNN's parameters (no vectoriser; -O2 and -O3 agree). -O0 changes bits too: it is only
the test suite's, by ``XLA_FLAGS``. ``tests/test_compiling.py`` holds -O2 and -O3 to the same bits.

A level set in ``XLA_FLAGS`` is the user's (the test suite's -O0) and is left as it is; off the CPU nothing is set (not
measured there).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import jax

CPU_LEVEL = 2
"""XLA's ``xla_backend_optimization_level`` for the programs jaxcomm compiles on a CPU (XLA's default: 3)."""


def options() -> dict[str, Any] | None:
    """The compiler options of the programs jaxcomm compiles (``jax.jit(..., compiler_options=...)``): -O2 on a CPU,
    None (XLA's defaults) where ``XLA_FLAGS`` sets a level or off the CPU. Initialises JAX's backend: call it where a
    program is about to be compiled, not at import."""
    if "xla_backend_optimization_level" in os.environ.get("XLA_FLAGS", "") or jax.default_backend() != "cpu":
        return None
    return {"xla_backend_optimization_level": CPU_LEVEL}


def jit(fun: Callable, **kwargs) -> Callable:
    """``jax.jit(fun, **kwargs)`` under :func:`options`: a program only ever called at the top level (JAX refuses
    compiler options on a jit traced inside another; :func:`nestable` for one that may be)."""
    return jax.jit(fun, compiler_options=options(), **kwargs)


def nestable(fun: Callable, **kwargs) -> Callable:
    """:func:`jit` where called with concrete arguments, ``jax.jit(fun, **kwargs)`` inside another program's trace
    (a model's init inside a population's, a predict inside research code's jit), where the outer program's options
    apply."""
    inline, chosen = jax.jit(fun, **kwargs), options()
    if chosen is None:
        return inline
    compiled = jax.jit(fun, compiler_options=chosen, **kwargs)

    @functools.wraps(fun)
    def call(*args, **kw):
        traced = any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves((args, kw)))
        return (inline if traced else compiled)(*args, **kw)

    return call
