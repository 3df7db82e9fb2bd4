"""stats: robust centre and spread, the interval of the median, and the data guard."""
import math

import numpy as np
import pytest

from specdec import stats


def test_median_mad_cv_known_values():
    x = [1.0, 2.0, 3.0, 4.0, 100.0]
    assert stats.median(x) == 3.0
    assert stats.mad(x) == 1.0  # |x - 3| = 2,1,0,1,97 -> median 1
    assert stats.cv([10.0, 10.0, 10.0]) == 0.0
    assert stats.cv([9.0, 10.0, 11.0]) == pytest.approx(0.1)
    assert math.isnan(stats.cv([5.0]))
    assert math.isnan(stats.median([]))
    assert stats.median([1.0, float("nan"), 3.0]) == 2.0  # NaN dropped


def test_three_repeats_fall_back_to_min_max():
    low, high, method = stats.median_ci([10.0, 12.0, 11.0])
    assert (low, high, method) == (10.0, 12.0, "min-max")
    assert stats.median_ci([])[2] == "none"


def test_bootstrap_interval_is_seeded_and_brackets_the_median():
    x = np.random.default_rng(1).normal(100, 5, size=40)
    a = stats.median_ci(x)
    b = stats.median_ci(x)
    assert a == b and a[2] == "bootstrap-percentile"
    assert a[0] < np.median(x) < a[1]
    assert a[0] > x.min() and a[1] < x.max()  # narrower than the range with 40 values
    # The seed is what makes it repeatable: with few resamples, seeds give different ends.
    ends = {stats.median_ci(x, seed=s, n_resamples=30)[:2] for s in range(4)}
    assert len(ends) > 1


def test_guard_incomplete_and_unstable():
    d = stats.describe([100.0, 100.0])
    assert d["n"] == 2 and not d["complete"]
    d = stats.describe([100.0, 101.0, 99.0])
    assert d["complete"] and not d["unstable"] and d["cv"] == pytest.approx(0.01)
    d = stats.describe([100.0, 110.0, 90.0])  # cv = 0.1 > 3 %
    assert d["unstable"]
    assert not stats.describe([100.0, 110.0, 90.0], cv_threshold=0.2)["unstable"]
    assert stats.CV_THRESHOLD == 0.03 and stats.MIN_REPEATS == 3
