"""Calibrated re-scoring: how far bf16 moves a run's own decisions, and the re-score margin that covers it.

"bf16" below is the fast path as the run scores it: a bf16 prefix and the last ``FLOAT32_TAIL`` prompt tokens in
float32 (``split``; tails grouped as the run groups them), which moves margins about 4× less than whole-prompt bf16.

A bf16 decision can differ from float32 only where bf16's top-two margin is smaller than bf16's error on the
difference of two option log-probs (if every pairwise difference moves by at most E, the bf16 winner with margin
m > E is also the float32 winner). So a sample of the run's prompts is scored both ways, the largest pairwise
error seen is E, and prompts whose bf16 margin is below ``SAFETY_FACTOR × E`` are re-scored in float32.

Why the maximum and not a quantile: the guarantee is about every prompt, and with a sample of 8–64 prompts a
high quantile (p99) *is* the maximum anyway; a lower quantile would knowingly leave a tail uncovered. Why a factor
of 3: on this repository's benchmark (SmolLM2-135M, 696-token prompts, AMX bf16) the error's maximum over 40
prompts was 1.2–2.3× the median, so three times the largest of 8 sampled errors covers the whole run's
maximum unless nearly all 8 fall in the lower tail (e.g. all 8 below the 25th percentile: 0.25⁸ ≈ 2e-5). The
benchmark reports whole-run error ÷ calibration error so the factor can be checked on every host.
"""
from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass
from functools import partial

import numpy as np

from .batching import in_order, pass_workers
from .choices import BatchResult, Requests, fast_scores, score_batch, tail_groups

SAFETY_FACTOR = 3.0
CALIBRATION_SIZE = 8  # prompts scored both ways (the float32 scores are kept as the run's own results)
MIN_MARGIN = 1e-3  # nats: a floor, so an all-zero sample never switches re-scoring off


def pairwise_error(low: np.ndarray, exact: np.ndarray) -> float:
    """Largest change, bf16 vs float32, in the difference of any two option log-probs of one prompt."""
    d_low = low[:, None] - low[None, :]
    d_exact = exact[:, None] - exact[None, :]
    return float(np.abs(d_low - d_exact).max())


def calibrated_margin(errors, safety_factor: float = SAFETY_FACTOR) -> float:
    """The re-score margin: ``safety_factor`` × the largest calibration error (at least ``MIN_MARGIN``)."""
    if safety_factor < 1:
        raise ValueError(f"safety_factor: must be ≥ 1 (below 1 the margin is smaller than the error seen), got {safety_factor}")
    return max(MIN_MARGIN, safety_factor * max(errors, default=0.0))


def pick_calibration_batches(batches: list[list[int]], size: int) -> list[int]:
    """Positions of whole batches, evenly spread over the plan (longest to shortest), holding ≥ ``size`` rows."""
    if size < 1:
        raise ValueError(f"calibration_size: must be an integer ≥ 1, got {size!r}")
    n_rows = sum(len(b) for b in batches)
    if n_rows == 0:
        return []
    mean_rows = n_rows / len(batches)
    want = min(len(batches), max(1, int(np.ceil(size / mean_rows))))
    picked = sorted({int(round(x)) for x in np.linspace(0, len(batches) - 1, want)})
    for pos in range(len(batches)):  # rounding may merge picks, or batches may be small: top up in plan order
        if sum(len(batches[p]) for p in picked) >= min(size, n_rows):
            break
        if pos not in picked:
            picked = sorted(picked + [pos])
    return picked


@dataclass
class Calibration:
    """What the calibration measured and the margin it set (recorded in the run's sidecar)."""

    size: int
    errors: list[float]
    safety_factor: float
    margin: float
    seconds: float
    float32_tail_tokens: int = 0
    non_finite: int = 0  # sample prompts whose fast-path log-probs were NaN or inf (always re-scored, not in errors)

    def as_meta(self) -> dict:
        """The sidecar block: sample size, observed errors (max, p50), factor and margin used."""
        e = np.array(self.errors or [0.0])
        return {"calibration_size": self.size, "calibration_error_max": float(e.max()),
                "calibration_error_p50": float(np.median(e)), "calibration_non_finite": self.non_finite,
                "calibration_safety_factor": self.safety_factor,
                "rescore_margin_used": self.margin, "calibration_seconds": round(self.seconds, 3),
                "float32_tail_tokens": self.float32_tail_tokens,
                "calibration_rule": "margin = safety factor × max |Δ(pairwise option log-prob difference)| "
                                    "fast path (bf16, last float32_tail_tokens prompt tokens in float32) vs float32 "
                                    "on the sample"}


def calibrate(model, reference, req: Requests, batches: list[list[int]], size: int = CALIBRATION_SIZE,
              safety_factor: float = SAFETY_FACTOR, tail: int = 0) -> tuple[Calibration, list[BatchResult]]:
    """Score a sample of whole batches both ways (the fast way: ``model``, split with a float32 ``tail`` when
    ``tail`` > 0, exactly as the run will, one-prompt batches' tails grouped; and wholly in float32); return the
    margin and those batches' float32 results (marked re-scored, fast scores kept in ``low_precision``) so the run
    does not score them again."""
    import time

    t0 = time.perf_counter()
    results, errors = [], []
    picked = [batches[pos] for pos in pick_calibration_batches(batches, size)]
    groups = tail_groups(req, picked, reference, tail)
    # each group's fast scores, then each of its batches in float32, as separate calls (side by side on a CPU)
    calls = [partial(fast_scores, model, req, g, reference, tail) for g in groups] \
        + [partial(score_batch, reference, req, b) for g in groups for b in g]
    with closing(in_order(lambda call: call(), calls, *pass_workers(model, len(calls)), ahead=len(calls))) as done:
        got = list(done)
    exact_scores = iter(got[len(groups):])
    for group, low in zip(groups, got):
        rows = [i for b in group for i in b]
        exact = [a for _ in group for a in next(exact_scores)]
        errors += [pairwise_error(a, b) for a, b in zip(low, exact)]
        results.append(BatchResult(rows, exact, [True] * len(rows), low, len(group)))
    finite = [e for e in errors if np.isfinite(e)]  # an overflowed fast path has no error to measure: the run
    # re-scores such prompts in float32 whatever the margin (choices.score_batches)
    cal = Calibration(len(errors), finite, safety_factor, calibrated_margin(finite, safety_factor),
                      time.perf_counter() - t0, tail, len(errors) - len(finite))
    return cal, results
