"""Language metrics (jaxcomm.language_metrics), against values computed by hand and against scipy."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from jaxcomm import language_metrics as lm

H_QUARTER = -(0.25 * math.log2(0.25) + 0.75 * math.log2(0.75))  # entropy of a 1/4 : 3/4 coin, 0.811278 bits
# Two balanced binary attributes, every combination once: (a, b) = (0,0), (0,1), (1,0), (1,1).
AB = np.array(list(itertools.product([0, 1], repeat=2)))
A, B = AB[:, 0], AB[:, 1]


def test_entropy_by_hand():
    assert lm.message_entropy([[0, 0], [0, 1], [1, 0], [1, 1]]) == pytest.approx(2.0)  # 4 equiprobable messages
    assert lm.message_entropy([[1, 0, 1]] * 5) == 0.0  # one message for every input
    assert lm.message_entropy([[0, 1], [0, 1], [1, 1], [1, 0]]) == pytest.approx(1.5)  # 1/2, 1/4, 1/4
    assert lm.entropy([0, 0, 1, 2]) == pytest.approx(1.5)
    assert lm.entropy([[1, 2], [3, 4]]) == pytest.approx(1.0)  # EGG's calc_entropy doctest: rows are outcomes
    with pytest.raises(ValueError, match="messages"):
        lm.message_entropy([0, 1, 1])  # [N] is not [N, L]


def test_position_entropy_by_hand():
    # Position 0: 0, 0, 1, 1 -> 1 bit; position 1: 0, 1, 1, 1 -> H(1/4) bits; position 2 constant -> 0.
    messages = [[0, 0, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1]]
    assert lm.position_entropy(messages) == pytest.approx((1.0 + H_QUARTER + 0.0) / 3)
    assert lm.position_entropy([[0, 1]] * 3) == 0.0


def test_mutual_information_by_hand():
    x = np.array([0, 0, 1, 2])
    assert lm.mutual_information(x, x) == pytest.approx(lm.entropy(x)) == pytest.approx(1.5)  # I[x; x] = H[x]
    assert lm.mutual_information(x, 5 - 2 * x) == pytest.approx(1.5)  # a relabelling carries the same information
    assert lm.mutual_information(A, B) == pytest.approx(0.0, abs=1e-12)  # independent balanced bits
    # I[a; a AND b] = H(a AND b) - H(a AND b | a) = H(1/4) - (0 + 1) / 2.
    assert lm.mutual_information(A, A & B) == pytest.approx(H_QUARTER - 0.5)
    assert lm.mutual_information(AB, A) == pytest.approx(1.0)  # rows of [N, K] are outcomes
    with pytest.raises(ValueError, match="same length"):
        lm.mutual_information([0, 1], [0, 1, 1])


def test_edit_distance_by_hand():
    assert lm.edit_distance("0101", "1010") == 2  # drop the leading 0, append a 0
    assert lm.edit_distance("kitten", "sitting") == 3  # k->s, e->i, +g
    assert lm.edit_distance("", "abc") == lm.edit_distance("abc", "") == 3
    assert lm.edit_distance([0, 1, 1], [1, 1]) == 1
    assert lm.edit_distance("0110", "0110") == 0
    assert lm.edit_distance("0000", "1111") == 4


def thermometer(n: int, length: int) -> np.ndarray:
    """``[n, length]``: message i is i ones then zeros, so hamming(i, j) = |i - j| / length."""
    return (np.arange(length)[None, :] < np.arange(n)[:, None]).astype(np.int64)


def test_topsim_is_one_for_a_monotone_language():
    messages = thermometer(9, 8)
    line = np.arange(9.0)[:, None]  # meanings on a line: euclidean |i - j|
    assert lm.topographic_similarity(line, messages, meaning_distance="euclidean") == pytest.approx(1.0)
    assert lm.topographic_similarity(line, messages, meaning_distance="euclidean",
                                     message_distance="edit") == pytest.approx(1.0)  # edit = hamming here
    # Points on a half circle at angles marks * pi / 11: cosine distance 1 - cos(d pi / 11) grows with the
    # gap d = |mark_i - mark_j| up to pi; message i is mark_i ones, hamming d / 11. The marks are a Golomb
    # ruler (all gaps distinct), so float rounding cannot break ties that the ranks would share.
    marks = np.array([0, 1, 4, 9, 11])
    arc = np.stack([np.cos(marks * np.pi / 11), np.sin(marks * np.pi / 11)], 1)
    ruler = (np.arange(11)[None, :] < marks[:, None]).astype(np.int64)
    assert lm.topographic_similarity(arc, ruler) == pytest.approx(1.0)
    assert lm.topographic_similarity(arc[::-1], ruler[::-1]) == pytest.approx(1.0)  # order of the inputs
    assert lm.topographic_similarity(arc, ruler[[0, 3, 1, 4, 2]]) < 0.0  # messages shuffled: no longer monotone
    # EGG's doctest: words as their own meanings under hamming distance.
    words = [[ord(c) for c in w] for w in ("cat", "dog", "pen", "ben", "ten")]
    assert lm.topographic_similarity(words, words, meaning_distance="hamming") == pytest.approx(1.0)
    assert lm.topographic_similarity(words, words, meaning_distance="hamming",
                                     message_distance="edit") == pytest.approx(1.0)


def test_topsim_matches_scipy_on_a_random_case():
    from scipy.spatial import distance
    from scipy.stats import spearmanr

    rng = np.random.default_rng(1)
    meanings = rng.normal(size=(20, 5))
    messages = rng.integers(0, 2, size=(20, 6))
    for metric in lm.MEANING_DISTANCES:
        x = meanings if metric != "hamming" else rng.integers(0, 3, size=(20, 4))
        expected = spearmanr(distance.pdist(x, metric), distance.pdist(messages, "hamming")).statistic
        assert lm.topographic_similarity(x, messages, meaning_distance=metric) == pytest.approx(expected, abs=1e-12)
    # EGG's "edit": editdistance.eval(x, y) / ((len(x) + len(y)) / 2), through pdist with a callable.
    edit = lambda u, v: lm.edit_distance(u.tolist(), v.tolist()) / ((len(u) + len(v)) / 2)
    expected = spearmanr(distance.pdist(meanings, "cosine"), distance.pdist(messages, edit)).statistic
    assert lm.topographic_similarity(meanings, messages, message_distance="edit") == pytest.approx(expected, abs=1e-12)
    # [N, ...] meanings are flattened, as EGG flattens the sender's input.
    assert lm.topographic_similarity(meanings.reshape(20, 5, 1), messages) == pytest.approx(
        lm.topographic_similarity(meanings, messages))


def test_pair_indices_and_distances_match_pdist():
    from scipy.spatial import distance

    n = 13
    i, j = lm._pair_indices(np.arange(n * (n - 1) // 2), n)
    ti, tj = np.triu_indices(n, 1)  # pdist's order of pairs
    np.testing.assert_array_equal(i, ti)
    np.testing.assert_array_equal(j, tj)
    big = 100_000  # float rounding near the ends of the condensed range
    k = np.array([0, 1, big - 2, big - 1, big, big * (big - 1) // 2 - 2, big * (big - 1) // 2 - 1])
    bi, bj = lm._pair_indices(k, big)
    np.testing.assert_array_equal(bi * (2 * big - bi - 1) // 2 + bj - bi - 1, k)
    assert (bi < bj).all() and (bj < big).all()
    rng = np.random.default_rng(2)
    x = rng.normal(size=(n, 4))
    for metric in ("cosine", "euclidean"):
        np.testing.assert_allclose(lm._distances(x, i, j, metric), distance.pdist(x, metric), atol=1e-12)
    bits = rng.integers(0, 2, size=(n, 5))
    np.testing.assert_allclose(lm._distances(bits, i, j, "hamming"), distance.pdist(bits, "hamming"))


def test_topsim_sampled_pairs_are_close_and_deterministic():
    rng = np.random.default_rng(3)
    meanings = rng.normal(size=(300, 8))
    messages = (meanings @ rng.normal(size=(8, 32)) > 0).astype(np.int64)  # hyperplane bits follow the angle
    full = lm.topographic_similarity(meanings, messages)  # 44 850 pairs
    assert full > 0.5
    sampled = lm.topographic_similarity(meanings, messages, max_pairs=5000, seed=0)
    assert sampled == pytest.approx(full, abs=0.03)
    assert lm.topographic_similarity(meanings, messages, max_pairs=5000, seed=0) == sampled
    assert lm.topographic_similarity(meanings, messages, max_pairs=5000, seed=1) != sampled
    assert lm.topographic_similarity(meanings, messages, max_pairs=44_850) == full  # not over the limit: all pairs
    edit = lm.topographic_similarity(meanings[:60], messages[:60], message_distance="edit", max_pairs=300)
    assert -1.0 <= edit <= 1.0


def test_topsim_undefined_and_invalid():
    meanings = np.arange(5.0)[:, None]
    assert math.isnan(lm.topographic_similarity(meanings, np.zeros((5, 4), int), meaning_distance="euclidean"))
    assert math.isnan(lm.topographic_similarity(np.ones((5, 2)), thermometer(5, 4)))  # constant cosine distances
    assert math.isnan(lm.topographic_similarity([[1.0]], [[0]]))  # no pairs
    with pytest.raises(ValueError, match="non-finite"):
        lm.topographic_similarity(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]), thermometer(3, 2))
    with pytest.raises(ValueError, match="meaning_distance"):
        lm.topographic_similarity(meanings, thermometer(5, 4), meaning_distance="jaccard")
    with pytest.raises(ValueError, match="message_distance"):
        lm.topographic_similarity(meanings, thermometer(5, 4), message_distance="cosine")
    with pytest.raises(ValueError, match="one row per message"):
        lm.topographic_similarity(meanings[:4], thermometer(5, 4))
    with pytest.raises(ValueError, match="max_pairs"):
        lm.topographic_similarity(meanings, thermometer(5, 4), max_pairs=0)


def test_posdis_by_hand():
    # Each position names one attribute: MI 1 bit with it, 0 with the other, H = 1 -> gap 1 at both.
    assert lm.positional_disentanglement(AB, AB) == pytest.approx(1.0)
    assert lm.positional_disentanglement(AB, AB[:, ::-1]) == pytest.approx(1.0)
    three = np.array(list(itertools.product(range(3), repeat=2)))  # 3 x 3 values, every combination once
    assert lm.positional_disentanglement(three, np.concatenate([three, three], 1)) == pytest.approx(1.0)
    # a AND b and a OR b say as much about a as about b (I = H(1/4) - 1/2 each): gap 0 at both positions.
    both = np.stack([A & B, A | B], 1)
    assert lm.positional_disentanglement(AB, both) == pytest.approx(0.0, abs=1e-12)
    # One clean position (gap 1) and one symmetric one (gap 0): posdis 1/2.
    assert lm.positional_disentanglement(AB, np.stack([A, A & B], 1)) == pytest.approx(0.5)
    # Constant positions are left out of the mean (EGG): 1, not 2/3.
    padded = np.stack([A, np.zeros(4, int), B], 1)
    assert lm.positional_disentanglement(AB, padded) == pytest.approx(1.0)
    assert math.isnan(lm.positional_disentanglement(AB, np.zeros((4, 3), int)))  # EGG's 0 / 0
    with pytest.raises(ValueError, match="K >= 2"):
        lm.positional_disentanglement(AB[:, :1], AB)
    with pytest.raises(ValueError, match="K >= 2"):
        lm.positional_disentanglement(A, AB)


def test_digit_attributes():
    attributes = lm.digit_attributes(np.array([3, 0, 9]))
    assert attributes.shape == (3, 10)
    np.testing.assert_array_equal(attributes.argmax(1), [3, 0, 9])
    np.testing.assert_array_equal(attributes.sum(1), [1, 1, 1])
    np.testing.assert_array_equal(lm.digit_attributes(np.array([1, 0]), num_classes=2), [[0, 1], [1, 0]])
    with pytest.raises(ValueError, match="labels"):
        lm.digit_attributes(np.array([10]))
    with pytest.raises(ValueError, match="labels"):
        lm.digit_attributes(np.array([0.5]))


def test_language_report():
    rng = np.random.default_rng(4)
    labels = np.repeat(np.arange(10), 4)
    meanings = rng.normal(size=(40, 6)) + labels[:, None]
    messages = np.stack([(labels >> b) & 1 for b in range(4)] + [rng.integers(0, 2, 40)], 1)
    report = lm.language_report(messages, meanings, labels)
    assert list(report) == ["message_entropy", "position_entropy", "distinct_messages", "topsim", "posdis",
                            "mi_message_label"]
    assert all(type(v) is float and v == round(v, 4) for v in report.values())
    # The message holds the label in its first 4 bits: I[message; label] = H(label) = log2 10.
    assert report["mi_message_label"] == round(math.log2(10), 4)
    assert report["message_entropy"] >= report["mi_message_label"]
    assert 0.0 < report["distinct_messages"] <= 1.0
    constant = lm.language_report(np.zeros((5, 8), int), rng.normal(size=(5, 3)), np.arange(5))
    assert constant["message_entropy"] == 0.0 and constant["position_entropy"] == 0.0
    assert constant["distinct_messages"] == 0.2  # one distinct message of 5
    assert constant["mi_message_label"] == 0.0
    assert math.isnan(constant["topsim"]) and math.isnan(constant["posdis"])
