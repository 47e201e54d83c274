"""One scoring run, for any dataset and either scorer: check, plan, resume, score, checkpoint, write.

``score_run`` scores ``{run}/<dataset file>`` with one loaded model into ``{run}/scores/{slug}….parquet`` + ``.json``
(the files are named and kept by ``runstore``). The batch plan is fixed before scoring, so a run killed at any point
(even ``kill -9``) and started again resumes from its checkpoint and writes exactly the file an uninterrupted run
writes. Every parameter comes from the run's resolved ``settings.EngineSettings``; the scorer (``scorer.make_scorer``)
does the model work; this loop only moves its records to disk.
"""
from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from .. import artifacts, runlock, runstore
from ..score_settings import identity
from ..spec import DatasetSpec
from .scorer import check_context, make_scorer, non_finite_rows
from .settings import EngineSettings, non_finite_message


def score_run(run_dir, lm, spec: DatasetSpec, settings: EngineSettings | None = None, *, overwrite: bool = False,
              progress=True, say_limited: bool = True,
              **run_params) -> tuple[pd.DataFrame, runstore.ScoreSidecar]:
    """Score the run's dataset with ``lm`` into ``scores/{slug}….parquet`` + ``.json`` (see ``paths.score_file``).

    ``settings``: the resolved ``EngineSettings`` (``lm.settings``, the ones the model was loaded with, by default);
    ``run_params`` (``limit``, ``batch_size``, ``chat_template``, shards, …) replace its run parameters. Checkpoints
    every ``checkpoint_every`` batches; a rerun resumes from the checkpoint with the checkpoint's batch plan, returns
    a finished run with the same identity as it is (whatever its batch size), and refuses to mix results of a
    different model, precision, dataset or scorer. Returns the scores and their sidecar (``runstore.ScoreSidecar``;
    an unfinished run's says ``complete: false``). ``progress``: True for a bar, False for none, or a callable(n_rows)
    per batch. ``say_limited`` False: a limited run does not
    print that the analysis skips it (a notebook that analyses it with ``include_limited`` says what it is instead).
    """
    settings = (settings or getattr(lm, "settings", None) or EngineSettings()).with_run(**run_params)  # validated
    with runlock.hold(run_dir, "scoring it"):
        settings.need_resolved()  # a model loaded by models.load_model carries its resolved settings
        full, dpath = runstore.read_dataset(run_dir, spec)
        data = runstore.select_limit(full, spec, settings.limit, settings.limit_seed).reset_index(drop=True)
        scorer = make_scorer(lm, data, spec, settings)
        meta = _meta(lm, spec, settings, dpath, scorer)
        expected = identity(settings, spec, meta["dataset_sha256"], loaded=meta)  # what loading decided
        files = runstore.ScoreFiles(run_dir, settings.slug, settings.limit, settings.shard_index, settings.num_shards)
        finished = files.finished(expected, overwrite)
        if finished is not None:
            _say_limited(settings.limit if say_limited else None, files)
            return finished
        ids = data[spec.id_column].tolist()
        check_context(lm, scorer, ids)
        done, prior = files.resume(expected, overwrite, ids)
        meta["resumed_rows"] = len(done)  # rows taken from the checkpoint of an earlier, interrupted run of this one
        if done:
            print(f"resuming from the checkpoint: {len(done)} rows already scored ({files.partial.name})", flush=True)
        settings = settings.keep_plan_of(prior)  # a resumed run batches as the interrupted one did
        plan = settings.batch_plan(spec.scorer)
        meta.update(batch_size=settings.batch_size, batch_rows=plan[0], token_budget=settings.resolved.token_budget,
                    settings=settings.as_dict())
        batches = scorer.plan(plan)[settings.shard_index::settings.num_shards]
        n_planned = sum(len(b) for b in batches)
        saver = _Checkpoints(files, ids, meta, done, n_planned, settings.checkpoint_every,
                             prior.get("elapsed_seconds", 0.0))
        _calibrate(scorer, batches, prior, done, meta, saver)
        todo = [b for b in batches if not all(i in done for i in b)]
        try:
            scorer.run(todo, saver.record, progress)
        except KeyboardInterrupt:
            saver.save()
            raise
        return _finish(scorer, batches, done, meta, saver, files, settings.limit if say_limited else None)


def _meta(lm, spec: DatasetSpec, settings: EngineSettings, dpath, scorer) -> dict:
    """What the score file's sidecar records of this run: the model's, the dataset's and the settings' facts."""
    return dict(lm.meta, dataset_file=spec.dataset_file, dataset_sha256=artifacts.sha256_file(dpath),
                id_column=spec.id_column, limit_by=list(spec.limit_by), limit_unit=spec.limit_unit,
                limit_strata=spec.limit_strata, scorer=spec.scorer, masked=bool(lm.meta.get("masked")),
                limit=settings.limit, limit_seed=settings.limit_seed, batch_size=settings.batch_size,
                num_shards=settings.num_shards, shard_index=settings.shard_index,
                label=getattr(settings, "label", None), **scorer.meta)  # display only: not in the identity


def _calibrate(scorer, batches, prior: dict, done: dict, meta: dict, saver) -> None:
    """The scorer's calibration before the loop (a resumed margin, if any), its fields saved with the records so far."""
    if not hasattr(scorer, "calibrate"):
        return

    def note(block: dict) -> None:
        """Sidecar fields the scorer measured (the fast path's margin), saved with the records so far."""
        meta.update(block)
        saver.save()

    calibration = scorer.calibrate(batches, prior, done, note)
    if calibration:
        note(calibration)


def _finish(scorer, batches, done: dict, meta: dict, saver, files, limit: int | None):
    """The run's end: an unfinished run is saved and returned as it is (``complete: false``); a finished one is
    written whole, with its rates, time and versions."""
    planned = sorted(i for b in batches for i in b)
    if not set(planned).issubset(done) or not getattr(scorer, "complete", True):
        saver.save()
        return scorer.frame(sorted(done), done), runstore.ScoreSidecar.of(dict(meta, complete=False, n_done=len(done),
                                                                               n_planned=saver.n_planned))
    df = scorer.frame(planned, done)
    meta.update(runstore.rates(df, saver.elapsed()), complete=True, created=artifacts.now_utc(),
                versions=artifacts.versions())
    written = files.write(df, meta)
    _say_limited(limit, files)
    return written


def limited_note(limit: int | None, score_file) -> str | None:
    """What a finished ``limit`` run means for the analysis (None for a full run): it is skipped unless asked for."""
    if limit is None:
        return None
    return (f"limit={limit}: {Path(score_file).name} is a quick look; the analysis skips limited scores unless "
            "include_limited is set (analyze notebook: -p include_limited true; "
            "analyze_run(..., include_limited=True)); score without limit for the full run")


def _say_limited(limit: int | None, files: runstore.ScoreFiles) -> None:
    note = limited_note(limit, files.final)
    if note:
        print(note, flush=True)


class _Checkpoints:
    """Collects a run's records as batches finish; every ``every`` batches writes the checkpoint, and at most every
    two seconds the progress file the sweep reads."""

    def __init__(self, files: runstore.ScoreFiles, ids: list, meta: dict, done: dict, n_planned: int, every: int,
                 elapsed_before: float):
        self.files, self.ids, self.meta, self.done = files, ids, meta, done
        self.n_planned, self.every, self.elapsed_before = n_planned, every, elapsed_before
        self.t0, self.n_before, self.since, self.shown = time.perf_counter(), len(done), 0, 0.0

    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.t0

    def record(self, records: dict, batches: int = 1) -> None:
        """Keep the records of ``batches`` finished batches (a checkpoint once ``every`` batches have accrued)."""
        bad = non_finite_rows(records)
        if bad:  # refused before it reaches a checkpoint or a score file
            raise ValueError(non_finite_message(self.meta.get("dtype"), self.meta.get("quantization", "none"),
                                                len(bad), len(records), self.ids[bad[0]],
                                                self.meta.get("adapter_scale")))
        self.done.update(records)
        now = time.perf_counter()
        if now - self.shown >= 2.0:
            rate = (len(self.done) - self.n_before) / (now - self.t0) if now > self.t0 else 0.0
            self.files.report_progress(len(self.done), self.n_planned, rate)
            self.shown = now
        self.since += batches
        if self.since >= self.every:
            self.save()

    def save(self) -> None:
        self.files.checkpoint(self.ids, self.done, dict(self.meta, n_done=len(self.done), n_planned=self.n_planned,
                                                        elapsed_seconds=self.elapsed()))
        self.since = 0
