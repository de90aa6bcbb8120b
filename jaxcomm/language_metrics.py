"""The language metrics the emergent-communication field reports, for fixed-length messages.

Definitions follow EGG's ``egg/core/language_analysis.py`` (facebookresearch/EGG):

* :func:`entropy` / :func:`message_entropy`: ``calc_entropy`` / ``entropy_dict``, the entropy of the
  empirical distribution of whole messages (each message one outcome). EGG takes the natural log and
  divides by ``log 2``: the result is in bits, as here.
* :func:`mutual_information`: ``mutual_info``, ``I[x; y] = H[x] + H[y] - H[x, y]`` in bits (not clipped
  at 0: float rounding can leave ``-1e-16`` where the value is 0, as in EGG).
* :func:`topographic_similarity`: ``TopographicSimilarity.compute_topsim``, Spearman's rank correlation
  between ``pdist`` of the meanings and ``pdist`` of the messages (all pairs ``i < j``).
* :func:`positional_disentanglement`: ``Disent.posdis`` = ``gap_mi_first_second`` (Chaabouni et al. 2020).

Messages are ``[N, L]`` integer symbols (``N`` messages, ``L`` positions, in our use ``V = 2`` bits and
``L`` = 32..128); :func:`language_report` gathers the metrics for one language::

    report = language_metrics.language_report(messages, images.reshape(len(images), -1), labels)
    report["topsim"], report["posdis"]

References:
  Brighton & Kirby (2006), "Understanding linguistic evolution by visualizing the emergence of
  topographic mappings" (topographic similarity).
  Chaabouni et al. (2020), "Compositionality and generalization in emergent languages", ACL (posdis).
  Kharitonov et al. (2019), "EGG: a toolkit for research on emergence of lanGuage in games".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxcomm.validation import integer, one_of, require

__all__ = [
    "MEANING_DISTANCES",
    "MESSAGE_DISTANCES",
    "digit_attributes",
    "edit_distance",
    "entropy",
    "language_report",
    "message_entropy",
    "mutual_information",
    "position_entropy",
    "positional_disentanglement",
    "topographic_similarity",
]

MEANING_DISTANCES = ("cosine", "euclidean", "hamming")
MESSAGE_DISTANCES = ("hamming", "edit")
_PAIR_CHUNK = 8192  # pairs whose distances are computed at once on the sampled path (bounds memory: chunk x D)


def _row_ids(values: Any) -> np.ndarray:
    """``[N]`` integer ids of the outcomes of ``values`` (``[N]``, or ``[N, ...]`` with each row one outcome)."""
    a = np.asarray(values)
    if a.ndim == 0:
        raise ValueError(f"values must have a leading sample dimension, got shape {a.shape}")
    if a.ndim == 1:
        return np.unique(a, return_inverse=True)[1].reshape(-1)
    # A row is one outcome, as EGG's tuple of the message's symbols.
    return np.unique(a.reshape(len(a), -1), axis=0, return_inverse=True)[1].reshape(-1)


def _entropy_of_ids(ids: np.ndarray) -> float:
    """Entropy in bits of the empirical distribution of the integer ids ``[N]`` (``entropy_dict``)."""
    counts = np.bincount(ids)
    p = counts[counts > 0] / len(ids)
    return float(-(p * np.log2(p)).sum())


def entropy(symbols: Any) -> float:
    """Entropy in bits of the empirical distribution of ``symbols`` (EGG's ``calc_entropy``).

    Args:
      symbols: ``[N]`` outcomes, or ``[N, ...]`` where each row (e.g. a whole message) is one outcome.

    Returns:
      ``-sum_s p(s) log2 p(s)`` over the distinct outcomes ``s``; 0.0 for a constant sequence.
    """
    ids = _row_ids(symbols)
    require(len(ids) >= 1, "symbols", "at least one sample", np.shape(symbols))
    return _entropy_of_ids(ids)


def mutual_information(x: Any, y: Any) -> float:
    """Mutual information in bits between two discrete variables, ``H[x] + H[y] - H[x, y]`` (EGG's ``mutual_info``).

    Args:
      x: ``[N]`` outcomes (or ``[N, ...]``, each row one outcome).
      y: ``[N]`` outcomes (or ``[N, ...]``), paired with ``x`` sample by sample.
    """
    ix, iy = _row_ids(x), _row_ids(y)
    require(len(ix) == len(iy) and len(ix) >= 1, "x and y", "paired samples of the same length >= 1",
            (np.shape(x), np.shape(y)))
    joint = ix.astype(np.int64) * (int(iy.max()) + 1) + iy  # one id per (x, y) pair
    return _entropy_of_ids(ix) + _entropy_of_ids(iy) - _entropy_of_ids(np.unique(joint, return_inverse=True)[1])


def _messages(messages: Any) -> np.ndarray:
    """``messages`` as an ``[N, L]`` array, checked."""
    m = np.asarray(messages)
    require(m.ndim == 2 and m.shape[0] >= 1 and m.shape[1] >= 1, "messages",
            "an [N, L] array of symbols with N, L >= 1", m.shape)
    return m


def message_entropy(messages: Any) -> float:
    """Entropy in bits of the empirical distribution of whole messages (EGG's ``calc_entropy`` over messages).

    Args:
      messages: ``[N, L]`` symbols; each row is one outcome.

    Returns:
      Between 0 (one message for every input) and ``log2 N`` (all ``N`` messages distinct).
    """
    return _entropy_of_ids(_row_ids(_messages(messages)))


def position_entropy(messages: Any) -> float:
    """Mean over the ``L`` positions of the entropy in bits of each position's symbol distribution.

    Args:
      messages: ``[N, L]`` symbols.

    Returns:
      Between 0 and ``log2 V``; 1 bit is a fair coin at every position of a binary language.
    """
    m = _messages(messages)
    return float(np.mean([_entropy_of_ids(_row_ids(m[:, j])) for j in range(m.shape[1])]))


def edit_distance(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Levenshtein distance between two sequences: fewest insertions, deletions and substitutions.

    The same count as ``editdistance.eval`` (which EGG uses). ``O(len(a) len(b))`` in Python.
    """
    a, b = list(a), list(b)
    previous = list(range(len(b) + 1))  # distances from a[:0] to each prefix of b
    for i, ai in enumerate(a, start=1):
        current = [i]
        for j, bj in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ai != bj)))
        previous = current
    return previous[-1]


def _pair_indices(k: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``(i, j)``, ``i < j``, of the condensed (``pdist``) indices ``k`` among ``n`` points."""
    k = np.asarray(k, np.int64)
    start = lambda i: i * (2 * n - i - 1) // 2  # condensed index of the pair (i, i + 1)
    # The largest i with start(i) <= k solves a quadratic; float rounding can miss it by one either way.
    i = np.floor(((2 * n - 1) - np.sqrt((2.0 * n - 1) ** 2 - 8.0 * k)) / 2).astype(np.int64)
    i = np.clip(i, 0, n - 2)
    i = np.where(start(i) > k, i - 1, i)
    i = np.where(start(i + 1) <= k, i + 1, i)
    return i, k - start(i) + i + 1


def _distances(x: np.ndarray, i: np.ndarray, j: np.ndarray, metric: str) -> np.ndarray:
    """``[P]`` distances between rows ``x[i]`` and ``x[j]``, as ``pdist``'s ``metric`` (or EGG's "edit")."""
    if metric == "edit":
        # EGG: editdistance.eval(x, y) / ((len(x) + len(y)) / 2), i.e. / L for fixed-length messages.
        rows = x.tolist()
        pairs = zip(i.tolist(), j.tolist(), strict=True)
        return np.array([edit_distance(rows[a], rows[b]) for a, b in pairs], float) / x.shape[1]
    out = np.empty(len(i))
    if metric == "cosine":
        norms = np.linalg.norm(x, axis=1)
    for s in range(0, len(i), _PAIR_CHUNK):
        u, v = x[i[s:s + _PAIR_CHUNK]], x[j[s:s + _PAIR_CHUNK]]
        if metric == "cosine":  # 1 - u.v / (|u| |v|), clipped to [0, 2] as scipy does
            cos = (u * v).sum(1) / (norms[i[s:s + _PAIR_CHUNK]] * norms[j[s:s + _PAIR_CHUNK]])
            out[s:s + _PAIR_CHUNK] = np.clip(1.0 - cos, 0.0, 2.0)
        elif metric == "euclidean":
            out[s:s + _PAIR_CHUNK] = np.sqrt(((u - v) ** 2).sum(1))
        else:  # hamming: the fraction of coordinates that differ
            out[s:s + _PAIR_CHUNK] = (u != v).mean(1)
    return out


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties); nan where either side is constant."""
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")  # ranks with no spread: the correlation is undefined (scipy warns and gives nan)
    from scipy import stats  # noqa: PLC0415

    return float(stats.spearmanr(a, b).statistic)


def topographic_similarity(meanings: Any, messages: Any, *, meaning_distance: str = "cosine",
                           message_distance: str = "hamming", max_pairs: int | None = None, seed: int = 0) -> float:
    """Topographic similarity: Spearman's correlation of meaning distances with message distances over pairs.

    EGG's ``TopographicSimilarity.compute_topsim``: ``spearmanr(pdist(meanings, meaning_distance),
    pdist(messages, message_distance))`` over all pairs ``i < j``. 1 when messages of closer meanings are
    always closer; about 0 for a language unrelated to its meanings.

    Args:
      meanings: ``[N, D]`` (or ``[N, ...]``, flattened to ``[N, D]`` as EGG flattens sender inputs) reals.
      messages: ``[N, L]`` symbols.
      meaning_distance: one of ``"cosine"``, ``"euclidean"``, ``"hamming"`` (scipy's ``pdist`` metrics;
        hamming is the fraction of coordinates that differ).
      message_distance: ``"hamming"`` (fraction of positions that differ, as ``pdist``) or ``"edit"``
        (Levenshtein distance / L, EGG's normalised ``editdistance``). "edit" is ``O(L^2)`` Python per
        pair: for small ``N`` (a few hundred) or with ``max_pairs``.
      max_pairs: with ``N (N - 1) / 2`` pairs above it, the correlation is taken over this many pairs
        drawn uniformly without replacement (``numpy.random.default_rng(seed)``), so large ``N`` stays
        cheap; None for all pairs.
      seed: the seed of that draw.

    Returns:
      The correlation, or nan where it is undefined: fewer than 2 pairs, or all meaning distances (or all
      message distances) equal, e.g. a constant language. Raises ``ValueError`` on a non-finite distance
      (cosine of an all-zero meaning), as EGG's ``spearmanr(..., nan_policy="raise")``.
    """
    one_of("meaning_distance", meaning_distance, MEANING_DISTANCES)
    one_of("message_distance", message_distance, MESSAGE_DISTANCES)
    m = _messages(messages)
    x = np.asarray(meanings, float)
    x = x.reshape(len(x), -1)
    require(len(x) == len(m), "meanings", f"one row per message ({len(m)})", x.shape)
    if max_pairs is not None:
        integer("max_pairs", max_pairs, low=1)
    n = len(m)
    num_pairs = n * (n - 1) // 2
    if max_pairs is None or num_pairs <= max_pairs:
        from scipy.spatial import distance  # noqa: PLC0415

        meaning_d = distance.pdist(x, meaning_distance)
        if message_distance == "edit":
            i, j = np.triu_indices(n, 1)  # pdist's order of pairs
            message_d = _distances(m, i, j, "edit")
        else:
            message_d = distance.pdist(m, "hamming")
    else:
        k = np.sort(np.random.default_rng(seed).choice(num_pairs, size=max_pairs, replace=False))
        i, j = _pair_indices(k, n)
        meaning_d = _distances(x, i, j, meaning_distance)
        message_d = _distances(m, i, j, message_distance)
    if not (np.isfinite(meaning_d).all() and np.isfinite(message_d).all()):
        raise ValueError(f"topographic_similarity: non-finite {meaning_distance} distances between meanings "
                         "(an all-zero meaning has no cosine distance)")
    return _spearman(meaning_d, message_d)


def positional_disentanglement(attributes: Any, messages: Any) -> float:
    """Positional disentanglement (posdis; Chaabouni et al. 2020), EGG's ``Disent.posdis``/``gap_mi_first_second``.

    For each position ``j``: the mutual information between symbol ``j`` and each attribute ``k``, sorted
    descending, gives ``gap_j = (MI_1 - MI_2) / H(symbol j)``: 1 where the position speaks of one
    attribute only. posdis is the sum of the gaps over the positions with ``H(symbol j) > 0`` divided by
    the number of such positions: constant positions are left out of the mean, as in EGG. With every
    position constant it is nan (EGG's 0 / 0).

    Args:
      attributes: ``[N, K]`` integer attributes of each input, ``K >= 2`` (the gap needs a second attribute).
      messages: ``[N, L]`` symbols.

    Returns:
      The mean gap, in [0, 1] up to float rounding.
    """
    a = np.asarray(attributes)
    m = _messages(messages)
    require(a.ndim == 2 and a.shape[1] >= 2, "attributes",
            "an [N, K] array with K >= 2 attributes (posdis compares the two most informative)", a.shape)
    require(len(a) == len(m), "attributes", f"one row per message ({len(m)})", a.shape)
    attribute_ids = [_row_ids(a[:, k]) for k in range(a.shape[1])]
    gaps, non_constant = 0.0, 0
    for j in range(m.shape[1]):
        symbol = _row_ids(m[:, j])
        h_j = _entropy_of_ids(symbol)
        if h_j > 0.0:
            mi = sorted((mutual_information(attr, symbol) for attr in attribute_ids), reverse=True)
            gaps += (mi[0] - mi[1]) / h_j
            non_constant += 1
    return gaps / non_constant if non_constant else float("nan")


def digit_attributes(labels: Any, num_classes: int = 10) -> np.ndarray:
    """One binary attribute per class, "is this a k": ``[N]`` labels -> ``[N, num_classes]`` of 0/1 ints.

    The attributes for posdis on MNIST: a digit is one categorical attribute, and posdis needs at least two
    (it measures the gap between the two attributes a position says most about), so the digit is split
    into ``num_classes`` indicator attributes.
    """
    y = np.asarray(labels)
    integer("num_classes", num_classes, low=2)
    require(y.ndim == 1 and np.issubdtype(y.dtype, np.integer) and (y.size == 0 or (0 <= y.min() and
            y.max() < num_classes)), "labels", f"[N] integers in [0, {num_classes})", y)
    return (y[:, None] == np.arange(num_classes)[None, :]).astype(np.int64)


def _rounded(value: float) -> float:
    """A Python float rounded to 4 decimals; nan stays nan and -0.0 becomes 0.0."""
    return float(value) if np.isnan(value) else round(float(value), 4) + 0.0


def language_report(messages: Any, meanings: Any, labels: Any, *, max_pairs: int | None = 200_000,
                    seed: int = 0) -> dict[str, float]:
    """The metrics of one language, each a Python float rounded to 4 decimals (nan stays nan).

    Args:
      messages: ``[N, L]`` symbols.
      meanings: ``[N, D]`` (or ``[N, ...]``) what the messages are about, e.g. the images, for topsim.
      labels: ``[N]`` digit labels in [0, 10), for posdis and the message-label information.
      max_pairs, seed: the pairs topsim samples (see :func:`topographic_similarity`).

    Returns:
      ``message_entropy`` and ``position_entropy`` (bits), ``distinct_messages`` (distinct messages / N),
      ``topsim`` (cosine meaning distance, hamming message distance), ``posdis`` (over
      :func:`digit_attributes` of the labels) and ``mi_message_label`` (bits, the whole message as one outcome).
      All are plug-in (empirical) estimates: with nearly every message distinct, ``mi_message_label`` is
      close to ``H(label)`` whatever the language says, so read it beside ``distinct_messages``.
    """
    m = _messages(messages)
    y = np.asarray(labels)
    require(y.shape == (len(m),), "labels", f"[N] with N = {len(m)}", y.shape)
    ids = _row_ids(m)
    report = {
        "message_entropy": _entropy_of_ids(ids),
        "position_entropy": position_entropy(m),
        "distinct_messages": len(np.unique(ids)) / len(m),
        "topsim": topographic_similarity(meanings, m, meaning_distance="cosine", message_distance="hamming",
                                         max_pairs=max_pairs, seed=seed),
        "posdis": positional_disentanglement(digit_attributes(y, 10), m),
        "mi_message_label": mutual_information(ids, y),
    }
    return {key: _rounded(value) for key, value in report.items()}
