"""Score prompts and their answer options in a notebook cell: ``score_choices(model, prompts, options)`` →
a DataFrame of each option's log-probability, the margin and the choice.

It is the score notebook's engine and settings without a run directory: the same ``EngineSettings`` (a model name, or a
model file of ``params/models/`` as the sweep reads it, with any setting given by name on top), the same loading
(``engine.models.load_model``: device, dtype, quantization, re-scoring margin resolved for this host) and the same
answer-choice scorer, batch plan and float32 re-scoring as ``engine.run.score_run``, so a prompt scores here exactly as
in a run's score file. Nothing is written. ``Probe`` keeps the loaded model for several calls.

Importing this module needs no PyTorch; scoring needs the ``score`` extra.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from .score_settings import DEFAULT_MODEL
from .spec import ChoiceItems, DatasetSpec, options_per_row

ID, TEXT = "prompt_id", "prompt"


def _spec(options, gold, systems) -> DatasetSpec:
    return DatasetSpec(dataset_file="(prompts given in Python)", id_column=ID, scorer="choices", text_column=TEXT,
                       choice_items=lambda _data: ChoiceItems(options, gold, systems))


def _settings(model, params: dict):
    """The resolved-to-be settings of a model name or a model file (``.yaml``), with ``params`` on top."""
    from .engine.settings import EngineSettings
    from .artifacts import load_yaml

    spec = _spec(("Yes", "No"), None, None)
    if isinstance(model, (str, Path)) and str(model).endswith((".yaml", ".yml")):
        from_file = load_yaml(model, what="model")
        return EngineSettings.of_model_file(spec, {**from_file, **params})
    return EngineSettings.from_params(spec, model=str(model), **params)


_SEQUENCES = (list, tuple, pd.Series, pd.Index)


def _listed(value, name: str, what: str) -> list:
    """``value`` (a list, tuple, Series or array) as a list; anything else a ValueError naming ``name`` and ``what``
    it takes."""
    import numpy as np

    if not isinstance(value, (*_SEQUENCES, np.ndarray)):
        raise ValueError(f"{name}: {what}, got {type(value).__name__} {_short(value)}")
    return list(value)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _per_prompt(value, n: int, name: str, none_each: bool = False) -> list | None:
    """One value for every prompt, or a list of one per prompt (its length and kinds checked: texts, and None where
    ``none_each``); None stays None."""
    if value is None or isinstance(value, str):
        return None if value is None else [value] * n
    what = f"one text, or a list of one text{' (or None)' if none_each else ''} per prompt"
    value = _listed(value, name, what)
    if len(value) != n:
        raise ValueError(f"{name}: {len(value)} values for {n} prompts; give one for every prompt, or a single one")
    bad = next((i for i, v in enumerate(value) if not (isinstance(v, str) or (none_each and v is None))), None)
    if bad is not None:
        raise ValueError(f"{name}: {what}; value {bad} is {type(value[bad]).__name__} {_short(value[bad])}")
    return value


def _inputs(prompts, options, gold, system, progress=True) -> tuple[list[str], list[tuple[str, ...]], list | None,
                                                                   list | None]:
    """The prompts, each one's options, gold answers and system messages, checked before any model loads: each a
    ValueError naming the argument and what it takes."""
    if not isinstance(progress, bool):
        raise ValueError(f"progress: True or False, got {_short(progress)}")
    if isinstance(prompts, str):
        prompts = [prompts]
    prompts = _listed(prompts, "prompts", "a string or a list of strings")
    bad = next((i for i, p in enumerate(prompts) if not isinstance(p, str)), None)
    if bad is not None:
        raise ValueError(f"prompts: every prompt must be a string; prompt {bad} is {type(prompts[bad]).__name__} "
                         f"{_short(prompts[bad])}")
    if not prompts:
        raise ValueError("prompts: give at least one prompt (a string or a list of strings)")
    n = len(prompts)
    what = "a list of two or more answers (strings), or one such list per prompt"
    if isinstance(options, str):
        raise ValueError(f"options: {what}, got {options!r}")
    options = _listed(options, "options", what)
    if not options:
        raise ValueError(f"options: {what}, got {options!r}")
    if isinstance(options[0], str):
        per = options_per_row(tuple(options), n)
    else:
        rows = [_listed(o, "options", what) if not isinstance(o, str) else o for o in options]
        if any(isinstance(o, str) for o in rows):
            raise ValueError(f"options: {what}; mixes answers and lists of answers: {_short(options)}")
        per = options_per_row([tuple(o) for o in rows], n)
    bad = next((o for o in per if len(o) < 2 or not all(isinstance(x, str) for x in o) or len(set(o)) != len(o)),
               None)
    if bad is not None:
        raise ValueError(f"options: each prompt needs two or more different answers (strings), got {_short(bad)}")
    gold, systems = _per_prompt(gold, n, "gold"), _per_prompt(system, n, "system", none_each=True)
    if gold is not None and any(g not in o for g, o in zip(gold, per)):
        raise ValueError("gold: every gold answer must be one of its prompt's options")
    return prompts, per, gold, systems


def _check_model(model) -> None:
    if isinstance(model, bool) or not isinstance(model, (str, Path)) or not str(model).strip():
        raise ValueError(f"model: an embedded model's name, a hub id, a local folder or a model file (.yaml), got "
                         f"{type(model).__name__} {_short(model)}")


class Probe:
    """A loaded model that scores answer options: ``Probe("smollm2-135m-instruct").score(prompts, ["Yes", "No"])``.

    ``model``: an embedded model's name, a Hugging Face hub id in the local cache, a local folder, or a model file
    (``params/models/*.yaml``); ``settings``: any scoring setting by name (``dtype``, ``quantization``, ``device``,
    ``chat_template``, ``batch_size``, ``rescore_margin``, ``adapter``, …), replacing the file's. They are checked before
    the model loads, as the score notebook checks them."""

    def __init__(self, model: str | Path = DEFAULT_MODEL, **settings):
        from .engine import models

        _check_model(model)
        self.lm = models.load_model(_settings(model, settings))
        self.settings = self.lm.settings

    def score(self, prompts: str | Sequence[str], options: Sequence[str] | Sequence[Sequence[str]] = ("Yes", "No"), *,
              gold: str | Sequence[str] | None = None, system: str | Sequence[str | None] | None = None,
              progress: bool = True) -> pd.DataFrame:
        """Each prompt's options scored: one row per prompt with ``prompt``, ``logp_<option>`` (the sum of the option's
        token log-probabilities after the prompt), ``margin`` (first minus second option; with more, the best minus the
        runner-up), ``choice``, the per-token and per-byte variants, ``rescored`` and, with ``gold``, ``correct``.

        ``options``: one list for every prompt, or one list per prompt; ``gold``: the right option of each prompt (or
        one for all); ``system``: a system message (one, or one per prompt). ``progress``: the scoring bar (a widget
        in JupyterLab)."""
        from .engine.scorer import check_context, make_scorer, non_finite_rows
        from .engine.settings import non_finite_message

        prompts, per, gold, systems = _inputs(prompts, options, gold, system, progress)
        n, opts = len(prompts), per[0] if len(set(per)) == 1 else per
        spec, data = _spec(opts, gold, systems), pd.DataFrame({ID: range(n), TEXT: prompts})
        settings = self.settings
        scorer = make_scorer(self.lm, data, spec, settings)
        check_context(self.lm, scorer, list(range(n)))
        batches = scorer.plan(settings.batch_plan(spec.scorer))
        done: dict = {}

        def record(records: dict, n_batches: int = 1) -> None:  # as the run loop keeps them, without files
            bad = non_finite_rows(records)
            if bad:
                raise ValueError(non_finite_message(self.lm.meta.get("dtype"), self.lm.meta.get("quantization", "none"),
                                                    len(bad), len(records), bad[0],
                                                    settings.adapter_scale if settings.adapter else None))
            done.update(records)

        measured: dict = {}
        if hasattr(scorer, "calibrate"):
            measured.update(scorer.calibrate(batches, {}, done, measured.update))
        scorer.run(batches, record, progress)
        frame = scorer.frame(sorted(i for b in batches for i in b), done)
        frame.insert(1, TEXT, prompts)
        frame.attrs.update(model=self.lm.meta.get("model"), settings=settings.as_dict(), scorer=dict(scorer.meta),
                           **measured)
        return frame


def score_choices(model: str | Path = DEFAULT_MODEL, prompts: str | Sequence[str] = (),
                  options: Sequence[str] | Sequence[Sequence[str]] = ("Yes", "No"), *,
                  gold: str | Sequence[str] | None = None, system: str | Sequence[str | None] | None = None,
                  progress: bool = True, **settings) -> pd.DataFrame:
    """Load ``model`` and score ``prompts`` with their ``options`` (``Probe(model, **settings).score(...)``): a
    DataFrame of one row per prompt with each option's log-probability, the margin and the choice, exactly as a
    score run of the same prompts writes them."""
    _check_model(model)
    _inputs(prompts, options, gold, system, progress)  # a mistake is an error before the model loads
    return Probe(model, **settings).score(prompts, options, gold=gold, system=system, progress=progress)
