"""The Scorer protocol: the one shape the run loop (``engine.run``) drives, whatever is scored.

A scorer is built for one loaded model and one (limited) dataset frame, with everything that decides its numbers
fixed up front: the chat-template mode and the prompts' tokens, the batch size, the float32 re-scoring margin and
the float32 tail of the fast path (answer choices), the pseudo-log-likelihood variant (masked LMs). The run loop then
only asks it, in this order:

1. ``meta`` — the sidecar fields the scorer decided (some are part of the run's identity, e.g. ``used_chat_template``,
   ``options_sha256``, ``pll_variant``), so a resumed or repeated run can be recognised before anything is scored;
2. ``input_lengths()`` — tokens per row as the model will see them (checked against the model's context window);
3. ``plan(token_budget)`` — the batches (lists of row positions), fixed before scoring so a killed run resumes
   exactly; a GPU's token budget, probed at load time, caps the tokens per batch;
4. optionally ``calibrate(batches, prior, record)`` — a one-off step before the main loop (the fast path's margin,
   measured on a sample of the run's own rows; ``prior`` is a resumed checkpoint's metadata); returns sidecar fields;
5. ``run(batches, record, progress)`` — score the batches, handing each batch's results to ``record`` as
   ``{row: {column: value}}``; ``progress`` is True (a bar), False, or a callable(n_rows);
6. ``frame(rows, records)`` — the score table of those rows, in that order (one row per dataset row, the id first).

The two implementations live beside their maths: ``choices.ChoiceScorer`` (log-probability of each answer option)
and ``sentences.SentenceScorer`` (per-token log-probabilities of a sentence, or pseudo-log-likelihood).
"""
from __future__ import annotations

from typing import Callable, Protocol

import pandas as pd

from ..spec import DatasetSpec

Records = dict  # {row position: {column: value}}


class Scorer(Protocol):
    kind: str  # the DatasetSpec scorer name: "choices" | "sentences"
    meta: dict

    def input_lengths(self) -> list[int]: ...

    def plan(self, token_budget: int | None = None) -> list[list[int]]: ...

    def run(self, batches: list[list[int]], record: Callable[[Records], None], progress=True) -> None: ...

    def frame(self, rows: list[int], records: Records) -> pd.DataFrame: ...


def make_scorer(lm, data: pd.DataFrame, spec: DatasetSpec, *, chat_template: str = "auto", batch_size="auto",
                pll_variant: str = "original", calibration_size: int = 8) -> Scorer:
    """The scorer ``spec`` names, for ``lm`` (a ``models.LoadedModel``) on the rows of ``data``."""
    masked = bool(lm.meta.get("masked"))
    if spec.scorer == "choices":
        if masked:
            raise ValueError("model: a masked LM cannot score answer choices; give a causal (decoder) model")
        from .choices import ChoiceScorer

        return ChoiceScorer(lm, data, spec, chat_template=chat_template, batch_size=batch_size,
                            calibration_size=calibration_size)
    from .sentences import SentenceScorer

    return SentenceScorer(lm, data, spec, batch_size=batch_size, pll_variant=pll_variant)
