"""Statistics over seeds: mean and sd, and paired Student-t intervals and tests of differences.

A direction (A beats B) is read only where the paired 95 % interval of the
per-seed differences excludes 0 (see the design's "Evidence").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["holm", "mean_sd", "paired_ci95", "paired_t_p_value", "p_value_from_ci95", "tost_p_value"]


def mean_sd(values: Sequence[float], *, ddof: int = 1, digits: int | None = None) -> tuple[float, float]:
    """Mean and standard deviation of ``values``.

    Args:
      values: one number per seed, at least one.
      ddof: 1 for the sample sd (n - 1 in the denominator), 0 for the population sd. With no more than
        ``ddof`` values the sd is 0.0.
      digits: round both to this many decimals (``round``), or not at all.
    """
    v = np.asarray(values, float)
    if v.size == 0:
        raise ValueError("mean_sd needs at least one value")
    mean = float(v.mean())
    sd = float(v.std(ddof=ddof)) if len(v) > ddof else 0.0
    if digits is not None:
        return round(mean, digits), round(sd, digits)
    return mean, sd


def paired_ci95(diffs: Sequence[float], *, digits: int | None = 3) -> tuple[float, float]:
    """Student-t 95 % interval of the mean of paired differences: ``mean -/+ t_{0.975, n-1} sd / sqrt(n)``.

    Args:
      diffs: one difference per seed (A - B on the same seed).
      digits: round both ends to this many decimals (3 by default), or not at all.

    Returns:
      ``(lo, hi)``; ``(nan, nan)`` with fewer than 2 differences.
    """
    d = np.asarray(diffs, float)
    if len(d) < 2:
        return (float("nan"), float("nan"))
    from scipy import stats  # noqa: PLC0415

    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    lo, hi = float(d.mean() - half), float(d.mean() + half)
    return (lo, hi) if digits is None else (round(lo, digits), round(hi, digits))


def paired_t_p_value(diffs: Sequence[float]) -> float:
    """Two-sided p-value of the paired t-test that the mean difference is 0 (``nan`` with fewer than 2).

    A zero spread gives 0.0 for a nonzero mean and 1.0 for a zero mean.
    """
    d = np.asarray(diffs, float)
    if len(d) < 2:
        return float("nan")
    from scipy import stats  # noqa: PLC0415

    se = d.std(ddof=1) / np.sqrt(len(d))
    if se == 0:
        return 1.0 if d.mean() == 0 else 0.0
    return float(2 * stats.t.sf(abs(d.mean()) / se, len(d) - 1))


def p_value_from_ci95(mean: float, ci95: Sequence[float], num: int) -> float | None:
    """The paired t-test's two-sided p-value recovered from a recorded mean and 95 % interval.

    For results that kept the interval but not the differences: the standard
    error is ``(hi - lo) / 2 / t_{0.975, n-1}``. None without a usable interval
    (missing, non-finite, empty, or ``num < 2``).
    """
    lo, hi = ci95 if ci95 is not None else (None, None)
    if lo is None or hi is None or not np.isfinite(lo) or num < 2 or hi <= lo:
        return None
    from scipy import stats  # noqa: PLC0415

    se = (hi - lo) / 2 / stats.t.ppf(0.975, num - 1)
    return float(2 * stats.t.sf(abs(mean) / se, num - 1))


def median_seed(values: Sequence[float | None]) -> float | None:
    """The median seed's value where a seed may not have one (None: a target not reached, counting as the slowest);
    the upper of the two middle values for an even count."""
    ordered = sorted(values, key=lambda v: float("inf") if v is None else v)
    return ordered[len(ordered) // 2]


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of a family of p-values (None entries are left out of the family and stay None).

    The i-th smallest of the m p-values is multiplied by ``m - i`` (i from 0), made non-decreasing in that order
    and capped at 1: a comparison reads a direction at level 0.05 only where its adjusted p-value is below 0.05,
    which keeps the family's error rate at 0.05 (Holm 1979).
    """
    present = [(p, i) for i, p in enumerate(p_values) if p is not None and np.isfinite(p)]
    out: list[float | None] = [None] * len(p_values)
    running, m = 0.0, len(present)
    for rank, (p, i) in enumerate(sorted(present)):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def tost_p_value(diffs: Sequence[float], margin: float) -> float:
    """Two one-sided paired t-tests that the mean difference lies within ``(-margin, +margin)``: the larger of
    the two one-sided p-values. Equivalence is shown at level 0.05 where it is below 0.05 (``nan`` with fewer
    than 2 differences; a zero spread gives 0.0 inside the margin and 1.0 outside)."""
    d = np.asarray(diffs, float)
    if len(d) < 2:
        return float("nan")
    from scipy import stats  # noqa: PLC0415

    se = d.std(ddof=1) / np.sqrt(len(d))
    if se == 0:
        return 0.0 if abs(d.mean()) < margin else 1.0
    lower = stats.t.sf((d.mean() + margin) / se, len(d) - 1)  # H0: mean <= -margin
    upper = stats.t.cdf((d.mean() - margin) / se, len(d) - 1)  # H0: mean >= +margin
    return float(max(lower, upper))
