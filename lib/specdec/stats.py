"""Statistics over timed repeats: robust centre, spread, an interval, and a guard.

Every throughput the book reports is the *median* over a cell's timed repeats,
with the median absolute deviation (MAD), the coefficient of variation (CV)
and a confidence interval of the median. The guard refuses bad data the way
vLLM's own sweeps do:

- a group with fewer than :data:`MIN_REPEATS` successful repeats is
  *incomplete*: it is kept in summaries (so it can be seen) but never used in
  a speedup;
- a group whose CV exceeds :data:`CV_THRESHOLD` (3 %, issue 3) is *unstable*:
  kept and used, but flagged so that every table and figure can say so.

The interval of the median is a percentile bootstrap (``scipy.stats.bootstrap``,
fixed seed) when there are at least :data:`BOOTSTRAP_MIN_N` values. With fewer
(the usual 3 repeats) a bootstrap of the median is degenerate (it can only
return observed values), so the interval is the observed min–max instead:
for ``n`` independent values from a continuous distribution, [min, max]
covers the true median with probability ``1 - 2**(1-n)`` (75 % for n=3,
87.5 % for n=4, 93.75 % for n=5). Which one was used is returned as
``ci_method`` (``"bootstrap-percentile"`` or ``"min-max"``).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

#: Fewest successful repeats a group needs to be complete (used in speedups).
MIN_REPEATS = 3
#: CV (std/mean, as a fraction) above which a group is flagged unstable.
CV_THRESHOLD = 0.03
#: Fewest values for which the interval is bootstrapped rather than min–max.
BOOTSTRAP_MIN_N = 6
#: Confidence level of bootstrap intervals.
CONFIDENCE = 0.95
#: Seed of the bootstrap resampling, fixed so every build gives the same interval.
SEED = 0
N_RESAMPLES = 9999


def _values(x: Sequence[float] | np.ndarray) -> np.ndarray:
    """Finite float values of ``x`` (NaN/None dropped)."""
    a = np.asarray(x, dtype=float).ravel()
    return a[np.isfinite(a)]


def median(x) -> float:
    """Median of the finite values of ``x``; NaN when there are none. Same units as ``x``."""
    a = _values(x)
    return float(np.median(a)) if a.size else float("nan")


def mad(x) -> float:
    """Median absolute deviation from the median (unscaled: not multiplied by 1.4826).

    Same units as ``x``; NaN when ``x`` has no finite values.
    """
    a = _values(x)
    # what scipy.stats.median_abs_deviation(a, scale=1.0) computes, without its per-call
    # overhead (a millisecond; a chapter describes thousands of groups)
    return float(np.median(np.abs(a - np.median(a)))) if a.size else float("nan")


def cv(x) -> float:
    """Coefficient of variation: sample standard deviation (ddof=1) / mean, as a fraction.

    NaN with fewer than two values or a zero mean (no spread can be estimated).
    """
    a = _values(x)
    if a.size < 2 or a.mean() == 0:
        return float("nan")
    return float(a.std(ddof=1) / a.mean())


def median_ci(x, confidence: float = CONFIDENCE, seed: int = SEED,
              n_resamples: int = N_RESAMPLES) -> tuple[float, float, str]:
    """Interval for the median of ``x``: ``(low, high, ci_method)``, units of ``x``.

    ``ci_method`` is ``"bootstrap-percentile"`` (``n >= BOOTSTRAP_MIN_N``, level
    ``confidence``, resampling seeded with ``seed``), ``"min-max"`` (fewer values;
    coverage ``1 - 2**(1-n)``, see the module docstring) or ``"none"`` (no values).
    """
    a = _values(x)
    if a.size == 0:
        return float("nan"), float("nan"), "none"
    if a.size < BOOTSTRAP_MIN_N or np.all(a == a[0]):
        return float(a.min()), float(a.max()), "min-max"
    import scipy.stats  # imported here: an engine subprocess needs only the rest

    res = scipy.stats.bootstrap((a,), np.median, n_resamples=n_resamples,
                                confidence_level=confidence, method="percentile",
                                vectorized=True, rng=np.random.default_rng(seed))
    ci = res.confidence_interval
    return float(ci.low), float(ci.high), "bootstrap-percentile"


def describe(x, cv_threshold: float = CV_THRESHOLD, min_repeats: int = MIN_REPEATS) -> dict:
    """Everything the summaries need about one group of repeats, as a dict.

    Keys: ``n`` (finite values), ``median``, ``mad``, ``cv`` (fraction),
    ``ci_low``, ``ci_high``, ``ci_method`` (see :func:`median_ci`),
    ``complete`` (``n >= min_repeats``) and ``unstable`` (``cv > cv_threshold``;
    False where the CV is undefined).
    """
    a = _values(x)
    low, high, method = median_ci(a)
    c = cv(a)
    return {
        "n": int(a.size),
        "median": median(a),
        "mad": mad(a),
        "cv": c,
        "ci_low": low,
        "ci_high": high,
        "ci_method": method,
        "complete": bool(a.size >= min_repeats),
        "unstable": bool(np.isfinite(c) and c > cv_threshold),
    }
