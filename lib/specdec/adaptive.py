"""The article's adaptive K (claim C17), SIMULATED against the best fixed K from measured numbers.

vLLM has no per-step adaptive K, so the article's ``DynamicSpeculator`` cannot be measured; this
module replays it instead. Two measured inputs drive the simulation: the conditional acceptance
``q_i`` of draft position i (from vLLM's per-position counters, :func:`conditional_acceptance`)
and the seconds one verification step costs at each K (:func:`interpolate_step_seconds`). Each
simulated step draws the accepted count a with q_1..q_K, emits a + 1 tokens (the bonus or
corrected token included), costs ``step_seconds[K]``, and tells the policy a/K, the fraction of
its K drafted tokens accepted (our reading of the article's ``accepted``).

Everything :func:`simulate` and :func:`compare` return is a **simulation**, not a measurement.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

import numpy as np
import pandas as pd


def _rates(q: Sequence[float], name: str = "q") -> np.ndarray:
    q = np.asarray(q, dtype=float)
    if q.ndim != 1 or len(q) == 0 or not np.all(np.isfinite(q)) or np.any((q < 0) | (q > 1)):
        raise ValueError(f"{name}: expected a non-empty list of fractions in [0, 1], got {q}")
    return q


def conditional_acceptance(per_position_rates: Sequence[float]) -> np.ndarray:
    """Conditional acceptance q_i = P(position i accepted | all earlier accepted) from vLLM's
    unconditional per-position rates r_i (``accepted_per_pos_rate``): q_1 = r_1,
    q_i = r_i / r_{i-1}, and q_i = 0 where r_{i-1} = 0 (nothing reached position i)."""
    r = _rates(per_position_rates, "per_position_rates")
    previous = np.concatenate([[1.0], r[:-1]])
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(previous > 0, r / previous, 0.0)
    return np.clip(q, 0.0, 1.0)  # counting noise may push a ratio a hair above 1


def extend_conditional(q: Sequence[float], k_max: int) -> np.ndarray:
    """q extended to ``k_max`` positions by repeating the last measured conditional rate.

    An ASSUMPTION, not a measurement: positions beyond the measured ones are taken to be accepted
    as often as the last measured one. Positions beyond ``k_max`` are dropped."""
    q = _rates(q)
    if k_max < 1:
        raise ValueError(f"k_max: expected at least 1, got {k_max}")
    return np.concatenate([q, np.repeat(q[-1], max(0, k_max - len(q)))])[:k_max]


def interpolate_step_seconds(measured: Mapping[int, float], k_max: int = 8) -> dict[int, float]:
    """Seconds per verification step for every K in 1..k_max from the measured K values: linear
    (``np.interp``) between measured K, extrapolated along the line through the two nearest
    measured points outside them. Needs at least 2 measured K."""
    if len(measured) < 2:
        raise ValueError(f"measured: need step seconds for at least 2 values of K, "
                         f"got {dict(measured)}")
    ks = np.array(sorted(measured), dtype=float)
    seconds = np.array([measured[int(k)] for k in ks], dtype=float)
    if ks[0] < 1 or not np.all(np.isfinite(seconds)) or np.any(seconds <= 0):
        raise ValueError(f"measured: expected K >= 1 and positive seconds, got {dict(measured)}")
    if k_max < 1:
        raise ValueError(f"k_max: expected at least 1, got {k_max}")
    slope_below = (seconds[1] - seconds[0]) / (ks[1] - ks[0])
    slope_above = (seconds[-1] - seconds[-2]) / (ks[-1] - ks[-2])
    out = {}
    for k in range(1, k_max + 1):
        value = (seconds[0] + slope_below * (k - ks[0]) if k < ks[0] else
                 seconds[-1] + slope_above * (k - ks[-1]) if k > ks[-1] else
                 np.interp(k, ks, seconds))
        if value <= 0:
            raise ValueError(f"measured: extrapolating to K={k} gives {value:.3g} s per step")
        out[k] = float(value)
    return out


def expected_tokens_per_step(q: Sequence[float], k: int) -> float:
    """Analytic tokens per step at fixed K: 1 + sum_{i<=K} prod_{j<=i} q_j."""
    q = _rates(q)
    if not 1 <= k <= len(q):
        raise ValueError(f"k: expected 1..{len(q)} (the length of q), got {k}")
    return float(1 + np.cumprod(q[:k]).sum())


class Policy(Protocol):
    """What :func:`simulate` needs: the current ``k``, the range it may take, ``update`` with the
    fraction a/K of the step's drafted tokens accepted, and ``reset`` to its initial state."""
    k: int
    k_min: int
    k_max: int
    name: str

    def update(self, fraction: float) -> None: ...
    def reset(self) -> None: ...


class FixedK:
    """K never changes (what vLLM does)."""

    def __init__(self, k: int):
        if k < 1:
            raise ValueError(f"k: expected at least 1, got {k}")
        self.k = self.k_min = self.k_max = int(k)
        self.name = f"fixed K={k}"

    def update(self, fraction: float) -> None:
        pass

    def reset(self) -> None:
        pass


class ArticlePolicy:
    """The article's ``DynamicSpeculator``: once ``window`` fractions exist, K rises by one when
    their mean exceeds ``up`` and falls by one when it is below ``down``, within k_min..k_max."""

    def __init__(self, initial_k: int = 3, window: int = 10, up: float = 0.7, down: float = 0.5,
                 k_min: int = 1, k_max: int = 8):
        if not 1 <= k_min <= initial_k <= k_max:
            raise ValueError(f"initial_k: expected 1 <= k_min <= initial_k <= k_max, got "
                             f"{k_min}, {initial_k}, {k_max}")
        if window < 1:
            raise ValueError(f"window: expected at least 1, got {window}")
        self.initial_k, self.window, self.up, self.down = initial_k, window, up, down
        self.k_min, self.k_max, self.name = k_min, k_max, "article (adaptive)"
        self.reset()

    def reset(self) -> None:
        self.k = self.initial_k
        self.history: deque[float] = deque(maxlen=self.window)

    def update(self, fraction: float) -> None:
        self.history.append(fraction)
        if len(self.history) == self.window:
            rate = sum(self.history) / self.window
            if rate > self.up and self.k < self.k_max:
                self.k += 1
            elif rate < self.down and self.k > self.k_min:
                self.k -= 1


@dataclass(frozen=True)
class SimulationResult:
    """One simulated run (a SIMULATION): throughput, tokens and accepted per step, mean K and the
    fraction of steps spent at each K."""
    tokens_per_s: float
    tokens_per_step: float
    mean_accepted: float
    mean_k: float
    k_histogram: dict[int, float]
    n_steps: int


def simulate(q: Sequence[float], step_seconds: Mapping[int, float], policy: Policy,
             n_steps: int = 20000, seed: int = 0) -> SimulationResult:
    """Run ``policy`` (reset first) for ``n_steps`` verification steps.

    Position i is accepted with probability q_i if every earlier one was (sequential Bernoulli
    draws, stopping at the first rejection; draws past it are ignored). All uniforms are drawn up
    front, so one seed and q give every policy the same draws (common random numbers make
    comparisons sharper)."""
    q = _rates(q)
    if n_steps < 1:
        raise ValueError(f"n_steps: expected at least 1, got {n_steps}")
    if policy.k_max > len(q):
        raise ValueError(f"q: {len(q)} conditional rates, but the policy may use K up to "
                         f"{policy.k_max} (see extend_conditional)")
    missing = [k for k in range(policy.k_min, policy.k_max + 1) if k not in step_seconds]
    if missing:
        raise ValueError(f"step_seconds: no cost for K={missing} (see interpolate_step_seconds)")
    uniforms = np.random.default_rng(seed).random((n_steps, len(q)))  # same draws for any policy
    # accepted_if_k[t][K-1]: accepted count at step t had K tokens been drafted
    accepted_if_k = np.cumsum(np.cumprod(uniforms < q, axis=1), axis=1).tolist()
    policy.reset()
    tokens = accepted_total = seconds = 0.0
    steps_at_k: dict[int, int] = {}
    for row in accepted_if_k:
        k = policy.k
        accepted = row[k - 1]
        tokens += accepted + 1
        accepted_total += accepted
        seconds += step_seconds[k]
        steps_at_k[k] = steps_at_k.get(k, 0) + 1
        policy.update(accepted / k)
    histogram = {k: steps_at_k[k] / n_steps for k in sorted(steps_at_k)}
    return SimulationResult(
        tokens_per_s=tokens / seconds, tokens_per_step=tokens / n_steps,
        mean_accepted=accepted_total / n_steps,
        mean_k=sum(k * f for k, f in histogram.items()), k_histogram=histogram, n_steps=n_steps)


def compare(q: Sequence[float], step_seconds: Mapping[int, float],
            baseline_seconds_per_token: float, ks: Sequence[int] = range(1, 9),
            adaptive: Policy | None = None, n_steps: int = 20000, seed: int = 0) -> pd.DataFrame:
    """One row per fixed K in ``ks`` and one for ``adaptive`` (default :class:`ArticlePolicy`),
    all SIMULATED with the same seed: ``policy``, ``k`` ("adaptive" for the adaptive one),
    ``tokens_per_s``, ``speedup`` (tokens/s x baseline seconds per token), ``mean_k``,
    ``tokens_per_step`` and the analytic ``expected_tokens_per_step`` (fixed K only)."""
    if not baseline_seconds_per_token > 0:
        raise ValueError(f"baseline_seconds_per_token: expected > 0, "
                         f"got {baseline_seconds_per_token}")
    rows = []
    for policy in [FixedK(k) for k in ks] + [adaptive or ArticlePolicy()]:
        result = simulate(q, step_seconds, policy, n_steps=n_steps, seed=seed)
        fixed = isinstance(policy, FixedK)
        rows.append({
            "policy": policy.name, "k": policy.k if fixed else "adaptive",
            "tokens_per_s": result.tokens_per_s,
            "speedup": result.tokens_per_s * baseline_seconds_per_token,
            "mean_k": result.mean_k, "tokens_per_step": result.tokens_per_step,
            "expected_tokens_per_step": expected_tokens_per_step(q, policy.k) if fixed else np.nan,
        })
    return pd.DataFrame(rows)


def best(table: pd.DataFrame) -> pd.Series:
    """The row of :func:`compare`'s table with the most tokens per second."""
    return table.loc[table["tokens_per_s"].idxmax()]
