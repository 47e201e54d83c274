"""Calibrated re-scoring: how far bf16 moves a run's own decisions, and the re-score margin that covers it.

"bf16" below is the fast path as the run scores it: a bf16 prefix and the last ``FLOAT32_TAIL`` prompt tokens in
float32 (``split``; tails grouped as the run groups them), which moves margins about 4× less than whole-prompt bf16.

A bf16 decision can differ from float32 only where bf16's top-two margin is smaller than bf16's error on the
difference of two option log-probs (if every pairwise difference moves by at most E, the bf16 winner with margin
m > E is also the float32 winner). So the run scores every prompt the fast way first; then a sample of them is scored
again in float32, the largest pairwise error seen is E, and prompts whose bf16 margin is below ``SAFETY_FACTOR × E``
are re-scored in float32.

The sample: the plan (longest prompts first) cut into ``size`` parts of equal rows, and from each part the prompt
whose fast-path decision was closest. It spans the run's prompt lengths as an evenly spread sample would, and the
prompts it scores in float32 are the ones the margin would send to float32 anyway, so the calibration and the
re-scoring share their float32 passes instead of adding up (on the demo's 120 prompts: 8 float32 passes instead of
11). Picking by margin does not pick by error: bf16's error on a margin does not follow the margin's size (rank
correlation −0.01 on the demo's 120 prompts; ``benchmarks/score_speed.py`` reports it on every host).

Why the maximum and not a quantile: the guarantee is about every prompt, and with a sample of 8–64 prompts a
high quantile (p99) *is* the maximum anyway; a lower quantile would knowingly leave a tail uncovered. Why a factor
of 3: on this repository's benchmark (SmolLM2-135M, 696-token prompts, AMX bf16) the error's maximum over 40
prompts was 1.2–2.3× the median, so three times the largest of 8 sampled errors covers the whole run's
maximum unless nearly all 8 fall in the lower tail. The benchmark reports whole-run error ÷ calibration error so
the factor can be checked on every host.
"""
from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np

from .batching import in_order, pass_workers
from .choices import Requests, progress_bar, score_batch, score_group, tail_groups, top_two_margin

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


def strata(batches: list[list[int]], size: int) -> list[list[int]]:
    """The plan's rows, in plan order (longest first), cut into ``size`` consecutive parts of equal rows (±1)."""
    if size < 1:
        raise ValueError(f"calibration_size: must be an integer ≥ 1, got {size!r}")
    rows = [i for b in batches for i in b]
    return [[int(i) for i in part] for part in np.array_split(rows, min(size, len(rows)))] if rows else []


def closest_call(rows: list[int], done: dict) -> int | None:
    """The row of ``rows`` whose fast-path decision was closest (smallest finite top-two margin) among those still at
    their fast-path scores in ``done``; the first in plan order on a tie; None when there is none."""
    best, best_margin = None, np.inf
    for i in rows:
        rec = done.get(i)
        if rec is None or rec["rescored"]:
            continue
        margin = top_two_margin(np.asarray(rec["logps"], dtype=np.float64))
        if margin < best_margin:  # NaN never is
            best, best_margin = i, margin
    return best


@dataclass
class Calibration:
    """What the calibration measured and the margin it set (recorded in the run's sidecar)."""

    size: int
    errors: list[float]
    safety_factor: float
    margin: float
    seconds: float  # the sample's float32 passes (their own time; on a CPU they run beside the fast passes)
    float32_tail_tokens: int = 0
    non_finite: int = 0  # the run's prompts whose fast-path log-probs were NaN or inf (re-scored at once, not sampled)

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
                                    "on the sample: the closest fast-path call of each of calibration_size equal "
                                    "parts of the batch plan (longest prompts first)"}


def measure_margin(model, reference, req: Requests, plan: list[list[int]], done: dict, size: int = CALIBRATION_SIZE,
                   safety_factor: float = SAFETY_FACTOR, tail: int = 0, exact: dict | None = None,
                   seconds: list | None = None) -> tuple[Calibration, dict]:
    """The calibration of a plan whose prompts are all in ``done`` at their fast-path scores (or re-scored where they
    overflowed): the closest call of each part (``strata``) scored in float32 (``exact`` holds those already scored,
    ``seconds`` their times), their pairwise errors and the margin. Returns it and the sample's float32 log-probs."""
    exact = {} if exact is None else exact
    seconds = [] if seconds is None else seconds
    planned = [i for b in plan for i in b]
    picks = [i for i in (closest_call(p, done) for p in strata(plan, size)) if i is not None]
    missing = [i for i in picks if i not in exact]
    exact.update(zip(missing, _run(partial(_timed, reference, req, seconds), missing, model)))
    errors = [pairwise_error(np.asarray(done[i]["logps"], dtype=np.float64), exact[i]) for i in picks]
    overflowed = sum(bool(done[i]["rescored"]) for i in planned)  # before the sample: the fast path's NaN/inf only
    return Calibration(len(picks), errors, safety_factor, calibrated_margin(errors, safety_factor), sum(seconds),
                       tail, overflowed), {i: exact[i] for i in picks}


def score_calibrated(model, reference, req: Requests, plan: list[list[int]], done: dict | None = None,
                     record: Callable | None = None, note: Callable[[dict], None] | None = None,
                     todo: list[list[int]] | None = None, size: int = CALIBRATION_SIZE,
                     safety_factor: float = SAFETY_FACTOR, tail: int = 0, progress=False,
                     margin: float | None = None) -> Calibration | None:
    """Score the batches of ``plan`` on the fast path (``model``, a float32 ``tail`` when > 0, prompts whose fast
    log-probs are not finite re-scored at once), measure the re-score margin (``measure_margin``; the sample's float32
    scores become their results), then re-score in float32 every prompt whose fast margin is below it. With
    ``margin`` given (a resumed run's), nothing is measured: it is used.

    ``done`` holds the rows already scored (``{row: {"logps", "rescored"}}``, a resumed checkpoint's) and must be
    updated by ``record(records, n_batches)`` (by default ``record`` does just that); ``todo`` are the batches still
    to score (default: those of ``plan`` not all in ``done``). ``note(block)`` gets the calibration's sidecar block
    right after its rows are recorded (as no batch, so ``record`` saves nothing in between) and is where the caller
    saves them together. On a CPU the passes run side by side (``pass_workers``): a part's float32 pass starts once
    its prompts are scored, among the fast ones. Returns the calibration (None when ``margin`` was given, or when
    ``plan`` is not all scored: a stopped run)."""
    done = {} if done is None else done
    record = record or (lambda records, n_batches=1: done.update(records))
    todo = [b for b in plan if not all(i in done for i in b)] if todo is None else todo
    groups = tail_groups(req, todo, reference, tail)
    parts = strata(plan, size) if margin is None else []
    waiting, exact, seconds = list(range(len(parts))), {}, []

    def ready() -> list[int]:
        scored = [p for p in waiting if all(i in done for i in parts[p])]
        waiting[:] = [p for p in waiting if p not in scored]
        return [i for i in (closest_call(parts[p], done) for p in scored) if i is not None]

    def calls():
        for group in groups:
            yield group
            yield from ready()

    def work(item):
        if isinstance(item, int):  # a calibration pick's float32 pass
            exact[item] = _timed(reference, req, seconds, item)
            return None
        return score_group(model, req, item, reference, margin or 0.0, tail, non_finite=True)

    with progress_bar(todo, progress is True) as bar, \
            closing(in_order(work, calls(), *pass_workers(model, len(groups) + len(parts)))) as results:
        for res in results:
            if res is not None:
                record(res.records(), res.n_batches)
                bar.update(res.n_batches)
                if callable(progress):
                    progress(len(res.indices))
    planned = [i for b in plan for i in b]
    if not all(i in done for i in planned):
        return None
    cal = None
    if margin is None:
        cal, sample = measure_margin(model, reference, req, plan, done, size, safety_factor, tail, exact, seconds)
        record({i: {"logps": lp, "rescored": True} for i, lp in sample.items()}, 0)  # no batch: no checkpoint yet
        if note is not None:
            note(cal.as_meta())  # saves the checkpoint: the sample's rows and the margin reach it together
        margin = cal.margin
    close = [i for i in planned if not done[i]["rescored"]
             and not top_two_margin(np.asarray(done[i]["logps"], dtype=np.float64)) >= margin]
    rows_per_pass = max((len(b) for b in plan), default=1)
    chunks = [close[k:k + rows_per_pass] for k in range(0, len(close), rows_per_pass)]
    for chunk, lps in zip(chunks, _run(partial(score_batch, reference, req), chunks, model)):
        record({i: {"logps": lp, "rescored": True} for i, lp in zip(chunk, lps)}, 0)
    return cal


def _timed(reference, req: Requests, seconds: list, row: int) -> np.ndarray:
    """Row ``row``'s float32 log-probs, its time appended to ``seconds``."""
    t0 = time.perf_counter()
    lp = score_batch(reference, req, [row])[0]
    seconds.append(time.perf_counter() - t0)
    return lp


def _run(fn, items: list, model) -> list:
    """``fn`` of each item, side by side where ``pass_workers`` allows, in order."""
    with closing(in_order(fn, items, *pass_workers(model, len(items)))) as results:
        return list(results)
