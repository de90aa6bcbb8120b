"""Statistics over seeds (jaxcomm.stats), against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jaxcomm import stats

# Student t with 2 degrees of freedom has closed forms: quantile (2q - 1) / sqrt(2 q (1 - q)),
# two-sided p-value 1 - |t| / sqrt(t^2 + 2).
T975_DF2 = 0.95 / math.sqrt(2 * 0.975 * 0.025)  # 4.302652...


def test_mean_sd_by_hand():
    assert stats.mean_sd([1, 2, 3, 4]) == pytest.approx((2.5, math.sqrt(5 / 3)))
    assert stats.mean_sd([1, 2, 3, 4], ddof=0) == pytest.approx((2.5, math.sqrt(1.25)))
    assert stats.mean_sd([1, 2, 3, 4], digits=3) == (2.5, 1.291)
    assert stats.mean_sd([7.0]) == (7.0, 0.0)  # one seed: no spread
    with pytest.raises(ValueError, match="at least one"):
        stats.mean_sd([])


def test_paired_ci95_by_hand():
    half = T975_DF2 * 1.0 / math.sqrt(3)  # diffs 1, 2, 3: mean 2, sd 1
    assert stats.paired_ci95([1, 2, 3], digits=None) == pytest.approx((2 - half, 2 + half), abs=1e-12)
    assert stats.paired_ci95([1, 2, 3]) == (-0.484, 4.484)  # rounded to 3 decimals by default
    assert stats.paired_ci95([1.5, 1.5, 1.5]) == (1.5, 1.5)
    lo, hi = stats.paired_ci95([0.4])
    assert math.isnan(lo) and math.isnan(hi)
    assert all(math.isnan(v) for v in stats.paired_ci95([]))


def test_paired_ci95_matches_the_formula_the_experiments_used():
    from scipy import stats as scipy_stats

    rng = np.random.default_rng(0)
    for n in (2, 3, 5, 10):
        for _ in range(20):
            d = rng.normal(1.0, 3.0, n)
            half = scipy_stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
            assert stats.paired_ci95(d) == (round(float(d.mean() - half), 3), round(float(d.mean() + half), 3))


def test_paired_t_p_value_by_hand():
    t = 2 / (1 / math.sqrt(3))  # diffs 1, 2, 3
    assert stats.paired_t_p_value([1, 2, 3]) == pytest.approx(1 - t / math.sqrt(t**2 + 2))
    assert stats.paired_t_p_value([-1, -2, -3]) == pytest.approx(1 - math.sqrt(6 / 7))
    assert stats.paired_t_p_value([1, -1, 1, -1]) == pytest.approx(1.0)  # mean 0
    assert stats.paired_t_p_value([2, 2]) == 0.0 and stats.paired_t_p_value([0, 0]) == 1.0
    assert math.isnan(stats.paired_t_p_value([1.0]))


def test_p_value_from_ci95():
    diffs = [0.3, 1.2, 2.5, 0.9]
    ci = stats.paired_ci95(diffs, digits=None)
    p = stats.p_value_from_ci95(float(np.mean(diffs)), ci, len(diffs))
    assert p == pytest.approx(stats.paired_t_p_value(diffs))
    assert stats.p_value_from_ci95(2.0, (2 - T975_DF2 / math.sqrt(3), 2 + T975_DF2 / math.sqrt(3)), 3) \
        == pytest.approx(1 - math.sqrt(6 / 7))
    assert stats.p_value_from_ci95(1.0, (float("nan"), float("nan")), 3) is None
    assert stats.p_value_from_ci95(1.0, (None, None), 3) is None
    assert stats.p_value_from_ci95(1.0, (0.5, 1.5), 1) is None
    assert stats.p_value_from_ci95(1.0, (1.0, 1.0), 3) is None


def test_holm_by_hand():
    # sorted 0.01, 0.02, 0.04 x 3, 2, 1 = 0.03, 0.04, 0.04; None stays out of the family
    assert stats.holm([0.04, None, 0.01, 0.02]) == pytest.approx([0.04, None, 0.03, 0.04])
    assert stats.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1 (0.5 x 2, then max(1, 0.6))
    assert stats.holm([]) == []


def test_tost_shows_equivalence_only_inside_the_margin():
    close = [0.1, -0.2, 0.05, 0.15, -0.1, 0.0]
    assert stats.tost_p_value(close, 1.0) < 0.05 and stats.tost_p_value(close, 0.05) > 0.05
    wide = [3.0, -2.5, 1.0, -1.8]  # no difference detected, and no equivalence either
    assert stats.tost_p_value(wide, 1.0) > 0.05 and stats.paired_t_p_value(wide) > 0.05
    from scipy import stats as scipy_stats
    d = np.asarray(close)
    se = d.std(ddof=1) / np.sqrt(len(d))
    by_hand = max(scipy_stats.t.sf((d.mean() + 0.5) / se, 5), scipy_stats.t.cdf((d.mean() - 0.5) / se, 5))
    assert stats.tost_p_value(close, 0.5) == pytest.approx(by_hand)


def test_median_seed_counts_a_missing_value_as_the_slowest_and_takes_the_upper_middle():
    assert stats.median_seed([300, None, 200]) == 300
    assert stats.median_seed([None, None, 100]) is None
    assert stats.median_seed([4.0, 1.0, 3.0, 2.0]) == 3.0  # even count: the upper of the two middles
    assert stats.median_seed([7]) == 7
