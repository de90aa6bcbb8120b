"""FLOPs of a function, counted analytically from its jaxpr: the same number on every device.

XLA's cost analysis is backend-specific: on a GPU the convolutions are library calls it does not
count (an H100 reported 25 MFLOP for a CNN node-step of about 3.4 GFLOP), so a ``% peak`` built on it
reads 0 % there. :func:`count` instead walks the jaxpr of the traced function and counts the
multiply-adds of its matrix products and convolutions (2 FLOPs each), the operations that dominate
a training step; element-wise work (activations, Adam's update, the inbox) is left out. A
convolution counts the window taps that land on real input elements: not on padding, not on the
holes of a dilated input (the transposed convolutions of a backward pass), as XLA's CPU count does.
Sub-jaxprs
count as they run: ``scan`` bodies times their length, ``cond`` the costliest branch, ``jit``/``remat``
bodies once; a ``while`` loop's trip count is unknown, so its body counts once.

    flops.count(jax.value_and_grad(loss), params, batch)   # forward + backward, per call

References:
  Kaplan et al. (2020), "Scaling laws for neural language models" (2 FLOPs per multiply-add);
  jax.lax.dot_general and conv_general_dilated (dimension numbers).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import numpy as np
from jax.extend import core

__all__ = ["count", "count_jaxpr"]


def _dot_flops(eqn) -> int:
    (lhs_contract, _), _ = eqn.params["dimension_numbers"]
    lhs, out = eqn.invars[0].aval.shape, eqn.outvars[0].aval.shape
    # every output element (batch x free dimensions) sums over the contracted dimensions
    return 2 * math.prod(out) * math.prod(lhs[d] for d in lhs_contract)


def _taps(size: int, dilation: int, window: int, window_dilation: int, stride: int, low: int, out: int) -> int:
    """Pairs (output position, window tap) of one spatial dimension whose tap lands on a real input element: not
    on padding, not between the elements of a dilated input (the holes of a transposed convolution)."""
    coords = np.arange(out)[:, None] * stride + np.arange(window)[None, :] * window_dilation - low
    return int(np.sum((coords >= 0) & (coords <= (size - 1) * dilation) & (coords % dilation == 0)))


def _conv_flops(eqn) -> int:
    lhs, rhs = (v.aval.shape for v in eqn.invars)
    out = eqn.outvars[0].aval.shape
    params = eqn.params
    dims = params["dimension_numbers"]
    lhs_spatial, rhs_spatial, out_spatial = dims.lhs_spec[2:], dims.rhs_spec[2:], dims.out_spec[2:]
    taps = math.prod(
        _taps(lhs[ls], lhs_dilation, rhs[rs], rhs_dilation, stride, low, out[os_])
        for ls, rs, os_, lhs_dilation, rhs_dilation, stride, (low, _) in zip(
            lhs_spatial, rhs_spatial, out_spatial, params["lhs_dilation"], params["rhs_dilation"],
            params["window_strides"], params["padding"], strict=True))
    # every output (batch, feature) sums I (already divided by the group count) x its real taps
    return 2 * out[dims.out_spec[0]] * out[dims.out_spec[1]] * rhs[dims.rhs_spec[1]] * taps


def _sub_jaxprs(eqn):
    """``(jaxpr, times)`` of the sub-computations of one equation."""
    params, name = eqn.params, eqn.primitive.name
    if name == "scan":
        return [(params["jaxpr"].jaxpr, params["length"])]
    if name == "cond":
        return [(max((b.jaxpr for b in params["branches"]), key=count_jaxpr), 1)]
    return [(sub, 1) for sub in core.jaxprs_in_params(params)]


def count_jaxpr(jaxpr) -> int:
    """FLOPs of the matrix products and convolutions of ``jaxpr`` (a ``Jaxpr`` or ``ClosedJaxpr``)."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    total = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            total += _dot_flops(eqn)
        elif name == "conv_general_dilated":
            total += _conv_flops(eqn)
        else:
            total += sum(times * count_jaxpr(sub) for sub, times in _sub_jaxprs(eqn))
    return total


def count(fn: Callable, *args, **kwargs) -> int:
    """FLOPs of one call ``fn(*args, **kwargs)`` (matrix products and convolutions; nothing runs)."""
    return count_jaxpr(jax.make_jaxpr(fn)(*args, **kwargs))
