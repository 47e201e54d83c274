"""The answer-choice scorer: the policy that drives the choice maths (``choices``) for one run — prompts built with
the chat-template mode, batches from the settings' plan, the fast path's float32 tail, the re-scoring margin (fixed or
calibrated on the run's own prompts, ``calibration``)."""
from __future__ import annotations

import numpy as np

from ..score_settings import model_chat_template
from ..spec import ChoiceItems, DatasetSpec, options_per_row
from .batching import pack_batches
from .calibration import score_calibrated
from .choices import build_requests, choice_frame, options_digest, score_batches
from .split import FLOAT32_TAIL, TAIL_GROUP_ROWS


class ChoiceScorer:
    """Answer choices as a ``scorer.Scorer``: built with the prompts' tokens, the float32 tail and the re-scoring
    margin the resolved settings allow (a number, or ``"auto"``, which ``calibrate`` turns into one measured on this
    run's own prompts); the batch plan is the settings' (``EngineSettings.batch_plan``)."""

    kind = "choices"

    def __init__(self, lm, data, spec: DatasetSpec, settings):
        self.model, self.reference, self.spec, self.settings = lm.model, lm.reference, spec, settings
        self.ids = data[spec.id_column].tolist()
        items = spec.choice_items(data)
        if not isinstance(items, ChoiceItems):
            raise TypeError("choice_items: must return a ChoiceItems")
        self.items, self.per = items, options_per_row(items.options, len(data))
        self.req = build_requests(lm.tokenizer, data[spec.text_column].tolist(), model_chat_template(settings),
                                  self.per, items.systems)
        self.tail = FLOAT32_TAIL if self.reference is not None else 0
        self.margin = settings.need_resolved().rescore_margin if self.reference is not None else 0.0
        self.calibration_size = settings.calibration_size
        self.plan_batches, self.done, self.note, self.resumed_margin = None, None, None, None
        self.complete = True  # False while a calibrated run has not measured and applied its margin
        self.meta = {"pll_variant": None, "used_chat_template": self.req.used_chat_template,
                     "options_sha256": options_digest(self.per), "system_in_user_turn": self.req.system_in_user_turn,
                     "single_forward_pass": self.req.single_token, "float32_tail_tokens": self.tail,
                     "float32_tail_group_rows": TAIL_GROUP_ROWS if self.tail else 0}
        if len(set(self.per)) == 1:
            self.meta.update(answer_strings=list(self.req.option_strings[0]), answer_token_ids=self.req.option_ids[0])

    def input_lengths(self) -> list[int]:
        """Prompt plus its longest option, in tokens (what must fit the window)."""
        return [len(p) + max(len(a) for a in opts) for p, opts in zip(self.req.prompt_ids, self.req.option_ids)]

    def plan(self, batch: tuple[int, int | None] | None = None) -> list[list[int]]:
        """The batches of ``batch`` (rows per pass, token budget), by default the settings' own plan."""
        rows, budget = batch or self.settings.batch_plan(self.kind)
        return pack_batches([len(p) for p in self.req.prompt_ids], rows, budget)

    def calibrate(self, batches: list[list[int]], prior: dict, done: dict, note) -> dict:
        """Before the loop. ``rescore_margin: auto`` is measured by ``run`` once every prompt is scored on the fast
        path (``calibration.score_calibrated``), on the run's closest calls (their float32 scores become their
        results), and handed to ``note``; a resumed checkpoint's margin, measured with the same tail, is used as is."""
        self.plan_batches, self.done, self.note = batches, done, note
        if self.margin != "auto":
            return {}
        if prior.get("rescore_margin_used") is not None and prior.get("float32_tail_tokens", 0) == self.tail:
            self.resumed_margin = prior["rescore_margin_used"]
            return {k: v for k, v in prior.items()
                    if k.startswith("calibration_") or k in ("rescore_margin_used", "float32_tail_tokens")}
        return {}

    def run(self, batches: list[list[int]], record, progress=True) -> None:
        if self.margin != "auto":
            score_batches(self.model, self.req, batches, self.reference, self.margin,
                          on_result=lambda res: record(res.records(), res.n_batches), progress=progress, tail=self.tail)
            return
        if self.done is None:
            raise ValueError("rescore_margin: 'auto' needs calibrate() first, which the run loop calls")
        self.complete = False
        cal = score_calibrated(self.model, self.reference, self.req, self.plan_batches, self.done, record, self.note,
                               batches, self.calibration_size, tail=self.tail, progress=progress,
                               margin=self.resumed_margin)
        self.complete = all(i in self.done for b in self.plan_batches for i in b)
        if cal is None:  # a resumed margin, or a stopped run
            return
        if cal.size:
            print(f"rescore_margin: {cal.margin:.4f} (calibrated: {cal.safety_factor:g} × the largest fast-path error "
                  f"{max(cal.errors):.4f} on {cal.size} of this run's prompts scored both ways, the closest call of "
                  "each part of the plan)")
        else:
            print(f"rescore_margin: {cal.margin:g} (no prompt kept finite fast-path log-probabilities to calibrate on)")
        if cal.non_finite:
            print(f"rescore_margin: {cal.non_finite} prompts gave NaN or inf log-probabilities on the fast path (its "
                  "activations overflow); every such prompt was re-scored in float32")

    def frame(self, rows: list[int], records: dict):
        gold = None if self.items.gold is None else [self.items.gold[i] for i in rows]
        return choice_frame([self.ids[i] for i in rows], ChoiceItems([self.per[i] for i in rows], gold),
                            self.req.subset(rows), [np.asarray(records[i]["logps"]) for i in rows],
                            [records[i]["rescored"] for i in rows], self.spec.id_column)
