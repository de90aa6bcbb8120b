"""What a message carries, as a value: the thesis' contents and research code's own.

An :class:`Exchange` is a NamedTuple of pure functions, written for ONE node and
one minibatch; :func:`jaxcomm.network.make_network` lifts them with the node's
train step. A message is always the minibatch a node just trained on (its
sample indices, Algorithm 2) plus a payload ``[B, D]`` that the exchange makes;
a node that consumes the message trains on those samples with the exchange's
loss against the payload.

Built-ins (§2.2.2-2.2.3): :func:`none` (isolated nodes), :func:`true_labels`,
:func:`soft_labels` (logits sent, softened at temperature tau by the receiver),
:func:`features` (the top hidden layer). :func:`named` maps the config's
``content`` strings to them.

Example: send the top-3 logits, keep the others at -inf::

    def top3(logits):
        kth = jnp.sort(logits, axis=-1)[:, -3:-2]
        return jnp.where(logits >= kth, logits, -1e9)

    top3_logits = Exchange(
        name="top3_logits",
        payload_dim=lambda num_classes, feature_dim: num_classes,
        outgoing=lambda logits, features, targets, received, consumed: top3(logits),
        loss=lambda logits, features, received: cross_entropy(logits, jax.nn.softmax(received)),
        payload_bytes=lambda batch_size, dim: batch_size * 3 * (4 + 1))  # 3 float32 values + 3 uint8 classes

References:
  Lacaille (2018), §2.2.2-2.2.3, eqs. 2.2.1-2.2.3, Algorithm 2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxcomm.validation import is_real, require

CONTENTS = ("none", "true_labels", "logits", "features")
INDEX_BYTES = 4  # a sample index as int32
HEADER_BYTES = 8  # sender id and step
DATA_MODELS = ("private", "shared")
"""What a receiver holds of the sender's data. "private" (the thesis, §2.2.2.1: shards are distinct and
exclusive): a message must carry its inputs. "shared" (every node holds the whole dataset, as
codistillation assumes): sample indices suffice."""


def cross_entropy(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """Mean over the batch of ``-sum_j y_j log f(x)_j`` (eq. 2.2.2); targets ``[B, C]``."""
    return -jnp.mean(jnp.sum(targets * jax.nn.log_softmax(logits), axis=-1))


def feature_mse(features: jax.Array, targets: jax.Array) -> jax.Array:
    """Mean over the batch of ``sum_k (h_k - h'_k)^2 / 2`` (eq. 2.2.3); ``[B, F]``."""
    return jnp.mean(0.5 * jnp.sum(jnp.square(features - targets), axis=-1))


class Exchange(NamedTuple):
    """The content of a message, as pure functions of one node's minibatch.

    Attributes:
      name: a label for tables and progress bars.
      payload_dim: ``payload_dim(num_classes, feature_dim) -> D``, the payload's width.
      outgoing: ``outgoing(logits [B, C], features [B, F], targets [B, C],
        received [B, D], consumed []) -> [B, D]``: what a node broadcasts about the
        batch it just trained on. ``targets`` are the one-hot labels of its local
        batch; when ``consumed`` is True the batch came from a message whose
        payload is ``received``. None: nodes send nothing (isolated nodes). An
        ``outgoing`` that takes a ``key`` keyword gets a PRNG key of the node's own
        stream "outgoing" (:func:`jaxcomm.streams.named`), fresh every step, for
        noisy or sampled messages; drawing from it changes no other draw.
      loss: ``loss(logits [B, C], features [B, F], received [B, D]) -> []``: a
        node's loss on a consumed message (scaled by the network's ``consumed_weight``).
      payload_bytes: ``payload_bytes(batch_size, D) -> int``: the payload's bytes
        on the wire, as a real network would encode it.
      watched: whether the driver's divergence watch (a multiple of the first step's loss,
        :data:`jaxcomm.driver.DIVERGENCE`) applies to a node's loss: True for losses on the scale
        of a cross-entropy (about log C untrained); False for a regression onto unbounded
        features, whose scale grows with them (then only a non-finite loss stops a run).
      content_bytes: optional ``content_bytes(outgoing [B, D]) -> []``: the payload's bytes of one message computed
        from what it carries, in the step (e.g. labels sent only for the confident samples, plus a bit mask). Where
        given, the ledger books every copy's payload at this size instead of ``payload_bytes(B, D)``, which then
        bounds it (the clock prices a message at the bound).
    """

    name: str
    payload_dim: Callable[[int, int], int]
    outgoing: Callable[..., jax.Array] | None
    loss: Callable[[jax.Array, jax.Array, jax.Array], jax.Array] | None
    payload_bytes: Callable[[int, int], int]
    watched: bool = True
    content_bytes: Callable[[jax.Array], jax.Array] | None = None

    @property
    def sends(self) -> bool:
        """Whether nodes exchange messages at all."""
        return self.outgoing is not None


def message_parts(exchange: Exchange, batch_size: int, payload_dim: int, *, sample_bytes: float,
                  data_model: str = "private") -> dict[str, float]:
    """Bytes of one message on the wire by part, the one place a message is counted (0 if nothing is sent):
    ``inputs`` (the B inputs, ``private``), ``payload`` (what is said about them), ``indices`` (their int32 sample
    indices, ``shared``) and ``headers`` (sender id and step, 8 bytes).

    Args:
      exchange: what the message carries besides its inputs.
      batch_size: B, samples per message.
      payload_dim: D.
      sample_bytes: bytes of one input on the wire: as the simulator holds it (a uint8 CIFAR-10 image: 3,072), or
        the dataset's stored encoding (:func:`jaxcomm.data.stored_bytes_per_image`).
      data_model: one of :data:`DATA_MODELS`: "private" sends the B inputs, "shared" their int32 indices.
    """
    require(data_model in DATA_MODELS, "data_model", f"one of {DATA_MODELS}", data_model)
    if not exchange.sends:
        return {"inputs": 0.0, "payload": 0.0, "indices": 0.0, "headers": 0.0}
    private = data_model == "private"
    return {"inputs": float(batch_size * sample_bytes) if private else 0.0,
            "payload": float(exchange.payload_bytes(batch_size, payload_dim)),
            "indices": 0.0 if private else float(batch_size * INDEX_BYTES), "headers": float(HEADER_BYTES)}


def message_bytes(exchange: Exchange, batch_size: int, payload_dim: int, *, sample_bytes: int,
                  data_model: str = "private") -> int:
    """Bytes of one message on the wire: the sum of :func:`message_parts` (inputs, payload, indices, header)."""
    return int(round(sum(message_parts(exchange, batch_size, payload_dim, sample_bytes=sample_bytes,
                                       data_model=data_model).values())))


def none() -> Exchange:
    """Isolated nodes: no messages."""
    return Exchange("none", lambda num_classes, feature_dim: num_classes, None, None, lambda batch, dim: 0)


def true_labels() -> Exchange:
    """The sender's labels (eq. 2.2.2 on true labels); a consumed message's labels are forwarded as received.

    On the wire: one uint8 class id per sample (not the one-hot the simulator holds).
    """
    outgoing = lambda logits, features, targets, received, consumed: jnp.where(consumed, received, targets)
    loss = lambda logits, features, received: cross_entropy(logits, received)
    return Exchange("true_labels", lambda num_classes, feature_dim: num_classes, outgoing, loss,
                    lambda batch, dim: batch)


def soft_labels(temperature: float = 1.0) -> Exchange:
    """The sender's logits; the receiver trains on ``softmax(logits / temperature)`` (eqs. 2.2.1-2.2.2).

    On the wire: the logits as float32.
    """
    if not isinstance(temperature, jax.Array):  # a sweep's per-run value is traced: checked in its config
        require(is_real(temperature) and temperature > 0, "temperature", "a number > 0", temperature)
    outgoing = lambda logits, features, targets, received, consumed: logits
    loss = lambda logits, features, received: cross_entropy(logits, jax.nn.softmax(received / temperature))
    return Exchange("logits", lambda num_classes, feature_dim: num_classes, outgoing, loss,
                    lambda batch, dim: batch * dim * 4)


def features() -> Exchange:
    """The sender's top hidden features; the receiver regresses its own onto them (eq. 2.2.3).

    On the wire: float32. Not watched for divergence: eq. 2.2.3 sums squared differences of features that
    follow no normalisation, so the loss's scale is theirs. Ten thesis-width nodes (64-128-256 channels,
    Adam 1e-3) pass a hundred times their first-step loss at step 20 and are back near it by step 200.
    """
    outgoing = lambda logits, features_, targets, received, consumed: features_
    loss = lambda logits, features_, received: feature_mse(features_, received)
    return Exchange("features", lambda num_classes, feature_dim: feature_dim, outgoing, loss,
                    lambda batch, dim: batch * dim * 4, watched=False)


def named(content: str, *, temperature: float = 1.0) -> Exchange:
    """The built-in exchange of a config's ``content`` (one of :data:`CONTENTS`)."""
    require(content in CONTENTS, "content", f"one of {CONTENTS}", content)
    return {"none": none, "true_labels": true_labels, "features": features}.get(
        content, lambda: soft_labels(temperature))()
