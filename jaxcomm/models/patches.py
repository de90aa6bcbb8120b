"""Convolutions as patches and one matmul, so that a population's nodes batch on CPU.

Vmapped over a population's node axis, a convolution whose kernel differs from
node to node becomes a grouped convolution (``feature_group_count = N``), which
XLA runs on CPU several times slower than the N per-node convolutions it
replaces. Written as im2col -- the ``kh * kw`` strided slices of the padded
input concatenated along channels, then ONE contraction with the kernel
reshaped ``[kh * kw * C, O]`` -- the node axis is instead a plain batch
dimension of a ``dot_general``, which XLA runs as N matmuls.

Formulations timed on 2 (shared) CPU cores, 10 vmapped nodes of
:class:`jaxcomm.models.StridedCNN`'s three convolutions at batch 32, forward
and backward (node gradients per second): slices concatenated along channels
then one matmul, 4.5-6.2; the slices stacked on a new axis and contracted over
two axes, 4.6-5.1; ``kh * kw`` smaller matmuls summed, 1.8-2.6 (each strided slice is
copied before its matmul, and the partial sums add ``kh * kw`` passes over the
output); the grouped convolution 1.8-2.7; the per-node loop of XLA's own
convolution 11.1-11.4. The first is kept. In the network's whole step (Adam
included, one jitted call per step) it ran 10 such nodes at 9.9 node-steps/s
against 2.7 vmapped (grouped convolutions), 10.9 unrolled, 12.5 for the eager
per-node loop and 13.7 for the thesis' loop of one-node steps; a space-to-depth
variant (4 stride-1 slices instead of 16 strided ones) ran at 8.9. What it still
loses is mostly memory: the patches are ``kh * kw / (sh * sw)`` times the input
(4x for 4x4 kernels of stride 2), and large temporaries cost page faults on every
call (115k minor faults per call of the three layers' vmapped gradient, against
none for the per-node loop).

:func:`patch_convs` applies this to any Flax model without changing it: within
it, every plain ``nn.Conv`` of supported settings computes its output with
:func:`conv_as_patches` from its own kernel and bias.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.linen.linear import canonicalize_padding
from jax import lax

Padding = str | Sequence[tuple[int, int]]
STRING_PADDINGS = ("SAME", "SAME_LOWER", "VALID")  # those lax.padtype_to_pads resolves


def _pair(value: int | Sequence[int] | None) -> tuple[int, int]:
    """An int (or None, flax's 1) as ``(v, v)``; a sequence as a tuple."""
    if value is None:
        return (1, 1)
    return (value, value) if isinstance(value, int) else tuple(value)


def _pads(spatial: tuple[int, int], window: tuple[int, int], strides: tuple[int, int],
          padding: Padding) -> list[tuple[int, int]]:
    """``[(low, high)] * 2`` of ``padding``: a name of :data:`STRING_PADDINGS` resolved as ``lax`` does, or pairs."""
    if isinstance(padding, str):
        return [tuple(p) for p in lax.padtype_to_pads(spatial, window, strides, padding)]
    pads = [tuple(p) for p in padding]
    if len(pads) != 2 or any(len(p) != 2 for p in pads):
        raise ValueError(f"padding must be one of {STRING_PADDINGS} or two (low, high) pairs, got {padding!r}")
    return pads


def patches_of(x: jax.Array, window: tuple[int, int], strides: int | Sequence[int],
               padding: Padding) -> jax.Array:
    """The im2col patches of ``x [B, H, W, C]``: ``[B, Ho, Wo, kh * kw * C]``, feature ``(i * kw + j) * C + c``
    holding ``x_padded[b, i + sh * y, j + sw * x, c]`` (the order of an HWIO kernel reshaped ``[kh * kw * C, O]``).

    Built from ``kh * kw`` strided slices of the padded input; the gradient of each slice is a pad, so the
    backward pass, too, is slices, pads and sums, with no convolution.
    """
    (kh, kw), (sh, sw) = window, _pair(strides)
    b, h, w, c = x.shape
    pads = _pads((h, w), (kh, kw), (sh, sw), padding)
    # lax.pad, unlike jnp.pad, takes negative pads (a crop), as lax.conv_general_dilated does
    xp = lax.pad(x, jnp.zeros((), x.dtype), [(0, 0, 0), (*pads[0], 0), (*pads[1], 0), (0, 0, 0)])
    ho, wo = (xp.shape[1] - kh) // sh + 1, (xp.shape[2] - kw) // sw + 1
    if ho < 1 or wo < 1:
        raise ValueError(f"a {kh}x{kw} window does not fit the padded {xp.shape[1]}x{xp.shape[2]} input")
    slices = [lax.slice(xp, (0, i, j, 0), (b, i + (ho - 1) * sh + 1, j + (wo - 1) * sw + 1, c), (1, sh, sw, 1))
              for i in range(kh) for j in range(kw)]
    return slices[0] if len(slices) == 1 else lax.concatenate(slices, dimension=3)


def conv_as_patches(x: jax.Array, kernel: jax.Array, strides: int | Sequence[int] = 1, padding: Padding = "SAME",
                    *, precision: lax.PrecisionLike = None) -> jax.Array:
    """A 2-D convolution as im2col (:func:`patches_of`) and one contraction.

    Equals ``lax.conv_general_dilated(x, kernel, strides, padding, dimension_numbers=("NHWC", "HWIO", "NHWC"))``
    (no dilation, one feature group); under ``jax.vmap`` over a node axis of ``x`` and ``kernel`` the contraction
    is a batched matmul, where the convolution would be a grouped one.

    Args:
      x: input ``[B, H, W, C]``.
      kernel: ``[kh, kw, C, O]`` (HWIO).
      strides: ``(sh, sw)`` or one int for both.
      padding: "SAME", "SAME_LOWER", "VALID" or ``[(low, high), (low, high)]`` of H and W.
      precision: of the contraction, as ``lax.dot_general``'s.

    Returns:
      ``[B, Ho, Wo, O]``.
    """
    kh, kw, c, o = kernel.shape
    if x.ndim != 4 or x.shape[-1] != c:
        raise ValueError(f"x must be [B, H, W, {c}] for a kernel of shape {kernel.shape}, got {x.shape}")
    patches = patches_of(x, (kh, kw), strides, padding)
    return lax.dot_general(patches, kernel.reshape(kh * kw * c, o), (((3,), (0,)), ((), ())), precision=precision)


def supported(module: nn.Module) -> bool:
    """Whether :func:`patch_convs` computes ``module``'s output: a plain ``nn.Conv`` (no subclass) of a 2-D
    kernel, one feature group, no dilation, no mask, lax's own convolution and a padding :func:`conv_as_patches`
    takes ("SAME", "SAME_LOWER", "VALID" or explicit pairs; not "CIRCULAR", "REFLECT" or "CAUSAL")."""
    if type(module) is not nn.Conv:
        return False
    size = (module.kernel_size,) if isinstance(module.kernel_size, int) else tuple(module.kernel_size)
    padding = module.padding
    if isinstance(padding, str):
        padding_ok = padding in STRING_PADDINGS
    else:
        try:
            padding_ok = not isinstance(canonicalize_padding(padding, len(size)), str)
        except ValueError:
            padding_ok = False
    return (len(size) == 2 and padding_ok and module.feature_group_count == 1 and module.mask is None
            and _pair(module.input_dilation) == (1, 1) and _pair(module.kernel_dilation) == (1, 1)
            and module.conv_general_dilated is None and module.conv_general_dilated_cls is None)


def _patched_call(module: nn.Conv, inputs: jax.Array) -> jax.Array:
    """``module(inputs)`` by :func:`conv_as_patches`, with its parameters, dtype promotion and bias as
    ``nn.Conv.__call__`` uses them. ``inputs [*batch, H, W, C]``: leading batch axes are flattened as flax does
    (none: a batch of one)."""
    kernel = module.get_variable("params", "kernel")
    bias = module.get_variable("params", "bias") if module.use_bias else None
    inputs, kernel, bias = module.promote_dtype(inputs, kernel, bias, dtype=module.dtype)
    lead = inputs.shape[:-3]
    padding = module.padding
    if not isinstance(padding, str):
        padding = canonicalize_padding(padding, 2)
    y = conv_as_patches(inputs.reshape((-1, *inputs.shape[-3:])), kernel, _pair(module.strides), padding,
                        precision=module.precision)
    if bias is not None:
        y = y + bias
    return y.reshape((*lead, *y.shape[1:]))


def _interceptor(next_fun, args, kwargs, context):
    """Redirects a supported ``nn.Conv.__call__`` whose parameters exist (apply, not init) to
    :func:`_patched_call`; anything else runs as it would."""
    module = context.module
    if (context.method_name == "__call__" and supported(module) and len(args) == 1 and not kwargs
            and getattr(args[0], "ndim", 0) >= 3 and module.has_variable("params", "kernel")
            and (not module.use_bias or module.has_variable("params", "bias"))):
        return _patched_call(module, args[0])
    return next_fun(*args, **kwargs)


@contextlib.contextmanager
def patch_convs() -> Iterator[None]:
    """Within it, Flax's supported ``nn.Conv`` layers (:func:`supported`) compute as :func:`conv_as_patches`.

    An interception at trace time (``flax.linen.intercept_methods``, per thread): what it changes is the program
    traced inside it. The others -- unsupported settings, subclasses, and init, where the parameters do not exist
    yet -- call ``nn.Conv`` as usual; both give the same values to float32 tolerance. A function jitted on its own
    and traced before (or inside) the context keeps the program of that first trace: JAX's trace cache does not
    know of interceptors.
    """
    with nn.intercept_methods(_interceptor):
        yield
