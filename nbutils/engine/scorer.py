"""The Scorer protocol: the one shape the run loop (``engine.run``) drives, whatever is scored.

A scorer is built for one loaded model, one (limited) dataset frame and the run's settings, with everything that
decides its numbers fixed up front: the chat-template mode and the prompts' tokens, the float32 re-scoring margin and
the float32 tail of the fast path (answer choices), the pseudo-log-likelihood variant (masked LMs). The run loop then
only asks it, in this order:

1. ``meta`` — the sidecar fields the scorer decided (some are part of the run's identity, e.g. ``used_chat_template``,
   ``options_sha256``, ``pll_variant``), so a resumed or repeated run can be recognised before anything is scored;
2. ``input_lengths()`` — tokens per row as the model will see them (checked against the model's context window);
3. ``plan(batch)`` — the batches (lists of row positions) of a batch plan (rows per pass, token budget; the
   settings' own by default, a checkpoint's when resuming), fixed before scoring so a killed run resumes exactly;
4. optionally ``calibrate(batches, prior, done, note)`` — before the main loop, with the whole plan, a resumed
   checkpoint's metadata (``prior``) and records (``done``, kept up to date by ``record``); returns sidecar fields
   (a resumed margin). A margin measured during ``run`` goes to ``note(fields)``, which saves the checkpoint;
5. ``run(batches, record, progress)`` — score the batches, handing each batch's results to ``record`` as
   ``{row: {column: value}}``; ``progress`` is True (a bar), False, or a callable(n_rows). A scorer whose
   ``complete`` is False afterwards (the answer-choice scorer stopped before its margin was applied) is resumed;
6. ``frame(rows, records)`` — the score table of those rows, in that order (one row per dataset row, the id first).

The two implementations: ``choice_scorer.ChoiceScorer`` (log-probability of each answer option, over the maths in
``choices``) and ``sentences.SentenceScorer`` (per-token log-probabilities of a sentence, or pseudo-log-likelihood).
Both read their parameters from the run's resolved ``settings.EngineSettings``.
"""
from __future__ import annotations

from typing import Callable, Protocol

import numpy as np
import pandas as pd

from ..spec import DatasetSpec

Records = dict  # {row position: {column: value}}


class Scorer(Protocol):
    kind: str  # the DatasetSpec scorer name: "choices" | "sentences"
    meta: dict

    def input_lengths(self) -> list[int]: ...

    def plan(self, batch: tuple[int, int | None] | None = None) -> list[list[int]]: ...

    def run(self, batches: list[list[int]], record: Callable[[Records], None], progress=True) -> None: ...

    def frame(self, rows: list[int], records: Records) -> pd.DataFrame: ...


def make_scorer(lm, data: pd.DataFrame, spec: DatasetSpec, settings=None, **run_params) -> Scorer:
    """The scorer ``spec`` names, for ``lm`` (a ``LoadedModel``) on the rows of ``data``, reading ``settings`` (the
    model's resolved ``EngineSettings`` by default; ``run_params`` such as ``chat_template`` or ``batch_size`` replace
    its run parameters)."""
    settings = (settings or lm.settings).with_run(**run_params)
    masked = bool(lm.meta.get("masked"))
    if spec.scorer == "choices":
        if masked:
            raise ValueError("model: a masked LM cannot score answer choices; give a causal (decoder) model")
        from .choice_scorer import ChoiceScorer

        return ChoiceScorer(lm, data, spec, settings)
    from .sentences import SentenceScorer

    return SentenceScorer(lm, data, spec, settings)


def context_window(lm) -> int | None:
    """The longest input the model was built for (``max_position_embeddings``), if it says."""
    cfg = getattr(lm.model, "config", None)
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(cfg, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_context(lm, scorer: Scorer, ids: list) -> None:
    """Inputs longer than the model's window are an error naming the count, the longest input and the window."""
    window = context_window(lm)
    if window is None:
        return
    totals = scorer.input_lengths()
    over = [i for i, n in enumerate(totals) if n > window]
    if over:
        worst = max(over, key=lambda i: totals[i])
        raise ValueError(f"context: {len(over)} of {len(totals)} inputs are longer than the model's window of {window} "
                         f"tokens (longest: {ids[worst]!r}, {totals[worst]} tokens); use shorter prompts (e.g. fewer "
                         "n_examples) or a model with a longer context")


def non_finite_rows(records: dict) -> list[int]:
    """The rows (sorted) of a batch's records holding a number that is NaN or ±inf (any scorer's record values)."""
    return sorted(i for i, rec in records.items()
                  if not all(np.isfinite(np.asarray(v, dtype=np.float64)).all() for v in rec.values()))
