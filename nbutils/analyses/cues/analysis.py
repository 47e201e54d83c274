"""Cue profiling of any labeled run (ICQ, Huang and Zhu): which surface features skew the labels, and does a model use them.

Cue profiling is not a scoring study: it reads another study's run (its dataset and, for the model tests, its score
files) through that study's registry record, so it runs on a custom prompt file, the personas questions or the monotonicity study's
prompts alike. ``analyze_run`` has the shape of every study's (``analysis.run_analysis``): it returns an ``Analysis`` (a
``Profile``) written by ``write_analysis``. Instances are built from the record's ``choice_items``:

- a fixed option set (Yes/No, A/B/C…): one instance per prompt, label = the gold option, the model's prediction = its
  chosen option; features of the prompt text (for the monotonicity study, of the query line, plus the prompts' structural cues);
- options that differ per row (multiple choice with the answers spelled out): as the paper, each k-way item becomes k
  instances (premise = the prompt, hypothesis = one option), label ``correct``/``incorrect``, prediction = whether the
  model chose that option; features of the option, ``OVERLAP`` against the prompt. An item's k instances share a split.

Outputs in the run: ``tables/cues.csv`` (every feature × label), ``tables/cue_accuracy_test.csv``,
``tables/cue_distribution_test.csv``, figures ``cues_top`` and ``cues_distribution``, and records appended to
``summary.json`` (earlier cue records replaced, the study's own records kept).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ...analysis import Analysis, Steps, analysis_model_names, figures_as_text, run_analysis, write_analysis
from ... import artifacts, labels, paths, runlock, runstore
from ...stats import ALPHA, record
from ...studies import for_run, get
from ...studies.common.rules import predict
from . import features as feats, plots, results, stats
from .params import CueParams

CUE_TESTS = ("cue_discovery", "cue_accuracy_test", "cue_distribution_test", "cue_used")


@dataclass
class Profile(Analysis):
    """A run's cue profile: an ``Analysis`` (``scores`` holds each model's prediction per instance once probed; the
    tables, ``summary.json``'s content, notes and files written) with the instances, their features, the study and
    mode they were built for, and the records of the cue tests."""

    instances: pd.DataFrame | None = None
    features: pd.DataFrame | None = None
    study: str = ""
    mode: str = ""
    records: list[dict] = field(default_factory=list)
    design: dict = field(default_factory=dict)  # split sizes, features tested and the settings, for the paragraph
    cues_text: str = ""  # the results in words (``cues_results.md``; the study's own ``results.md`` is left alone)


def _column(data: pd.DataFrame, name: str | None, param: str, path) -> pd.Series | None:
    if name is None:
        return None
    if name not in data.columns:
        raise ValueError(f"{param}: {path} has no column {name!r}; columns: {list(data.columns)}")
    return data[name]


def _study1_features(data: pd.DataFrame, text: pd.Series, nearest_k: int) -> pd.DataFrame | None:
    """Last example's label, majority of the ``nearest_k`` examples nearest the query, the query's noun — from the monotonicity study's
    rule code (``studies.common.rules``) when the frame is a monotonicity prompt frame, else parsed from the text."""
    cols = {"prompt_id", "concept", "n_examples", "query_total", "query_count", "text"}
    if cols <= set(data.columns):
        pred = predict(data, k=nearest_k)
        wide = pred.pivot(index="prompt_id", columns="rule", values="answer").reindex(data["prompt_id"])
        yn = {True: "Yes", False: "No"}
        p = pd.DataFrame({"last": wide["last_label"].map(yn).to_numpy(), "nearest": wide["knn_majority"].map(yn).to_numpy(),
                          "noun": data.get("query_noun", pd.Series(index=data.index, dtype=object)).to_numpy()},
                         index=data.index)
        parts = [pd.get_dummies(p["last"], prefix="LAST_LABEL", prefix_sep=":"),
                 pd.get_dummies(p["nearest"], prefix="NEAREST_MAJORITY", prefix_sep=":")]
        if p["noun"].notna().all():
            parts.append(pd.get_dummies(p["noun"], prefix="QUERY_NOUN", prefix_sep=":"))
        return pd.concat(parts, axis=1).astype(bool)
    return feats.few_shot_features(text, nearest_k=nearest_k)


def build(run_dir, study: str | None = None, text_column: str | None = None, premise_column: str | None = None,
          split_column: str = "split", train_fraction: float = CueParams.train_fraction, seed: int = 0,
          bigrams: bool = False, nearest_k: int = CueParams.nearest_k, use_spacy: bool = True) -> Profile:
    """Instances (id, item, text, premise, label, split), their boolean features, and notes, for the run's dataset."""
    rec = get(study) if study else for_run(run_dir)
    if rec.scorer != "choices":
        raise ValueError(f"study: cue profiling needs labeled answer options; {rec.name!r} scores sentences "
                         "(no labels to profile)")
    spec = rec.spec
    data, dpath = runstore.read_dataset(run_dir, spec)
    items = spec.choice_items(data)
    unlabeled = len(data) if items.gold is None else int(pd.isna(pd.Series(items.gold, dtype=object)).sum())
    if unlabeled:
        what = "no gold answers" if unlabeled == len(data) else f"no gold answer in {unlabeled} of {len(data)} rows"
        raise ValueError(f"run_dir: {dpath} has {what}; cue profiling needs labels")
    notes: list[str] = []
    text = _column(data, text_column or rec.text_column, "text_column", dpath).astype(str)
    premise = _column(data, premise_column, "premise_column", dpath)
    given_split = data[split_column] if split_column and split_column in data.columns else None
    ids = data[spec.id_column].to_numpy()
    # rows the study keeps together (a monotonicity prompt pair seen in two conditions, a personas question under every persona)
    # share a split, so the same example never sits in both R and S
    unit_col = rec.limit_unit if rec.limit_unit and rec.limit_unit in data.columns else spec.id_column
    units = data[unit_col].astype(str).to_numpy()
    inst, split_src, struct, mode = _instances(data, items, text, premise, given_split, ids, units, nearest_k,
                                               notes)
    inst["split"] = _splits(inst, split_src, split_column, unit_col, spec.id_column, train_fraction, seed, notes)
    nlp = feats.spacy_pipeline() if use_spacy else None
    if nlp is None:
        notes.append(feats.SPACY_NOTE)
    has_premise = inst["premise"].notna().all()
    F = feats.text_features(inst["text"], inst["premise"] if has_premise else None, bigrams=bigrams, nlp=nlp)
    if struct is not None:
        F = pd.concat([F, struct.set_axis(F.index)], axis=1)
    return Profile(pd.DataFrame(), instances=inst, features=F, study=rec.name, mode=mode, notes=notes)


def _instances(data: pd.DataFrame, items, text: pd.Series, premise, given_split, ids, units, nearest_k: int,
               notes: list[str]):
    """The instances to profile: one per row where every row has the same options (with the few-shot prompts'
    structural cues), else one per option of each row, labelled correct or incorrect."""
    fixed = not isinstance(items.options, list)
    struct = None
    if fixed:
        mode = "classification"
        parsed = [feats.parse_few_shot(t) for t in text]
        if all(p is not None for p in parsed) and len(parsed):
            struct = _study1_features(data, text, nearest_k)
            hyp = pd.Series([t.strip().splitlines()[-1] for t in text], index=data.index)
            notes.append("few-shot prompts (the monotonicity study's format): text features of the query line; structural cues "
                         f"LAST_LABEL, NEAREST_MAJORITY (k={nearest_k}), QUERY_NOUN")
        else:
            hyp = text
        inst = pd.DataFrame({"instance": ids, "item": ids, "unit": units, "option": None, "text": hyp.to_numpy(),
                             "premise": None if premise is None else premise.astype(str).to_numpy(),
                             "label": [str(g) for g in items.gold]}, index=pd.RangeIndex(len(data)))
        split_src = given_split
    else:
        mode = "multiple_choice"
        rows = []
        for i, (opts, gold) in enumerate(zip(items.options, items.gold)):
            for k, o in enumerate(opts):
                rows.append({"instance": f"{ids[i]}::{k}", "item": ids[i], "unit": units[i], "option": o, "text": str(o),
                             "premise": str(text.iloc[i] if premise is None else premise.iloc[i]),
                             "label": "correct" if o == gold else "incorrect", "_row": i})
        inst = pd.DataFrame(rows)
        row = inst.pop("_row").to_numpy()
        split_src = None if given_split is None else given_split.iloc[row].reset_index(drop=True)
        notes.append("options differ per row: each k-way item is split into k instances (label correct/incorrect, "
                     "features of the option, OVERLAP with the prompt), as the paper does for multiple-choice data")
    return inst, split_src, struct, mode


def _splits(inst: pd.DataFrame, split_src, split_column: str, unit_col: str, id_column: str, train_fraction: float,
            seed: int, notes: list[str]):
    """Each instance's split (R or S), by unit: the file's split column (one split per unit), else a seeded split."""
    # split by unit, so an item's instances (and a unit's items) never straddle the splits
    first = inst.drop_duplicates("unit")
    if split_src is not None:
        given = pd.Series(np.asarray(split_src), index=inst.index).astype(str).str.strip().str.lower()
        if given.groupby(inst["unit"]).nunique().gt(1).any():
            raise ValueError(f"{split_column} column: rows of one {unit_col} must share a split")
        s_unit, note = stats.assign_split(pd.Index(first["unit"]), pd.Series(given[first.index].to_numpy(),
                                                                             index=first["unit"].to_numpy()))
    else:
        s_unit, note = stats.assign_split(pd.Index(first["unit"]), None, train_fraction, seed)
        s_unit.index = first["unit"].to_numpy()
        if unit_col != id_column:
            note += f", by {unit_col}"
    notes.append(note)
    return inst["unit"].map(s_unit).to_numpy()


def load(run_dir, include_limited: bool = False, study: str | None = None) -> pd.DataFrame:
    """The run's scores (``runstore.load_scores`` of its study), or an empty frame whose ``attrs["no_scores"]`` says
    why there are none (a dataset profiled before any model scored it)."""
    rec = get(study) if study else for_run(run_dir)
    try:
        return runstore.load_scores(run_dir, rec.spec, include_limited=include_limited)
    except ValueError as err:
        empty = pd.DataFrame()
        empty.attrs["no_scores"] = str(err)
        return empty


def predictions(profile: Profile, scores: pd.DataFrame) -> pd.DataFrame | None:
    """One row per (model, instance) with the model's predicted label, or None (with a note) when the run has no
    scores (``load``)."""
    rec = get(profile.study)
    if "no_scores" in scores.attrs:
        profile.notes.append(f"no model tests: {scores.attrs['no_scores']}")
        return None
    sc = scores[["model", rec.spec.id_column, "choice"]].rename(columns={rec.spec.id_column: "item"})
    if profile.mode == "classification":
        m = profile.instances.merge(sc, on="item", how="inner")
        m["pred"] = m["choice"].astype(str)
    else:
        m = profile.instances.merge(sc, on="item", how="inner")
        m["pred"] = np.where(m["choice"].astype(str) == m["option"].astype(str), "correct", "incorrect")
    return m.drop(columns="choice")


def compute(profile: Profile, preds: pd.DataFrame | None, top_k: int = CueParams.top_k,
            min_count: int = CueParams.min_count, alpha: float = ALPHA, seed: int = 0) -> Profile:
    """Cue discovery, then both model tests for each model in ``preds`` (see ``stats``); fills ``profile.tables``."""
    inst, F = profile.instances, profile.features
    cues = stats.discover(F, inst["label"], inst["split"], min_count=min_count, alpha=alpha)
    t = profile.tables
    t["cues"] = cues
    top = stats.top_features(cues, top_k) if len(cues) else pd.DataFrame()
    t["cues_top"] = top
    split = inst["split"].value_counts()
    profile.design = {"n_train": int(split.get("train", 0)), "n_test": int(split.get("test", 0)),
                      "n_features": int(cues["feature"].nunique()) if len(cues) else 0, "top_k": top_k,
                      "min_count": min_count, "alpha": alpha}
    if cues.empty:
        profile.notes.append(f"no feature occurs ≥ {min_count} times in both splits: nothing to rank (lower min_count "
                             "or use a larger dataset)")
    profile.records += [record("cue_discovery", r.feature, estimate=r.cueness, p=r.p, valid=True,
                               note=f"cueness rank {r.rank}; label skewed toward {r.cue_label}; Holm over all "
                                    f"{cues['feature'].nunique()} features tested",
                               p_holm=r.p_holm, significant=bool(r.significant), mse=r.mse, jsd=r.jsd,
                               cue_label=r.cue_label)
                        for r in top.itertuples(index=False)]
    if preds is None or top.empty:
        return profile
    cols = list(top["feature"])
    items = pd.concat([preds.reset_index(drop=True),
                       F[cols].set_axis(inst["instance"]).reindex(preds["instance"]).reset_index(drop=True)], axis=1)
    acc, dist = stats.probe(items, cues, top_k=top_k, alpha=alpha, seed=seed)
    t["cue_accuracy_test"], t["cue_distribution_test"] = acc, dist
    for r in acc.itertuples(index=False):
        profile.records.append(record("cue_accuracy_test", r.feature, estimate=r.delta_acc, ci_low=r.ci_low,
                                      ci_high=r.ci_high, p=r.p, valid=bool(r.n_f and r.n_nf), condition=r.model,
                                      note="acc(S_f) − acc(S_nf) on the test split; Newcombe CI, Fisher exact, Holm "
                                           f"over the top {len(top)}", p_holm=r.p_holm, flag=bool(r.flag),
                                      hypothesis=results.accuracy_claim(r.feature)))
    for r in dist.itertuples(index=False):
        profile.records.append(record("cue_distribution_test", r.feature, estimate=r.shift, p=r.p_shift,
                                      valid=bool(np.isfinite(r.p_shift)), condition=r.model,
                                      note=(r.note or f"rate of predicting {r.cue_label} on flattened S_f − on "
                                                      "flattened S_nf; Fisher exact, Holm over the top-k"),
                                      p_holm=r.p_holm, jsd_pred_train=r.jsd_pred_train,
                                      jsd_pred_uniform=r.jsd_pred_uniform, p_uniform=r.p_uniform, flag=bool(r.flag)))
        profile.records.append(record("cue_used", r.feature, estimate=float(bool(r.used)), condition=r.model,
                                      note="1 when the accuracy and the distribution tests both flag the feature"))
    n_used = dist.groupby("model")["used"].sum()
    profile.notes += [f"{m}: {int(n)} of the top {len(top)} cues flagged as used by both tests" for m, n in n_used.items()]
    return profile


def write(profile: Profile, run_dir) -> list[Path]:
    """Tables (CSV), figures (PNG + PDF) and the cue records merged into the run's ``summary.json``: earlier cue
    records are replaced, the study's own records and entries kept. ``cues_top`` stays in memory (it is the head of
    ``cues``)."""
    with figures_as_text():  # a model's label is drawn as it is, never as mathtext
        return _write(profile, run_dir)


def _write(profile: Profile, run_dir) -> list[Path]:
    t = profile.tables
    figs = {}
    if not t["cues_top"].empty:
        figs["cues_top"] = plots.top_cues(t["cues"], len(t["cues_top"]))
    if "cue_distribution_test" in t and not t["cue_distribution_test"].empty:
        figs["cues_distribution"] = plots.distributions(t["cue_distribution_test"])
    with runlock.hold(run_dir, "writing its cue profile"):  # the summary is read, amended and written back
        sp = paths.summary_path(run_dir)
        summary = artifacts.read_summary(sp) if sp.exists() else {}
        kept = [r for r in summary.get("records", []) if r.get("test") not in CUE_TESTS]
        summary["records"] = kept + artifacts.json_clean(profile.records)
        summary["cues"] = artifacts.json_clean({"study": profile.study, "mode": profile.mode,
                                                "n_instances": len(profile.instances), **profile.design,
                                                "notes": profile.notes})
        profile.summary = summary
        profile.cues_text = labels.markdown_text(results.results_text(summary), analysis_model_names(summary))
        files = write_analysis(profile, run_dir, figs, skip=("cues_top",), replaces=False)
        files.append(artifacts.write_text(profile.cues_text, paths.cues_results_path(run_dir)))
        profile.files = files
        return files


def _compute(scores: pd.DataFrame, run_dir, params: CueParams) -> Profile:
    p = build(run_dir, study=params.study, text_column=params.text_column, premise_column=params.premise_column,
              train_fraction=params.train_fraction, seed=params.seed, bigrams=params.bigrams,
              nearest_k=params.nearest_k)
    preds = predictions(p, scores)
    if preds is not None:
        p.scores = preds
    return compute(p, preds, top_k=params.top_k, min_count=params.min_count, alpha=params.alpha, seed=params.seed)


STEPS = Steps(
    params=CueParams,
    load=lambda run_dir, params: load(run_dir, params.include_limited, params.study),
    compute=_compute, write=lambda p, run_dir, variants: write(p, run_dir), clears=False,
    cannot_compare="the cue profile tests each score file as a model of its own; the study's own analysis compares "
                   "the precisions")


def analyze_run(run_dir, params: CueParams | None = None, **options) -> Profile:
    """Build the instances, discover cues, probe every scored model, write everything into ``run_dir``
    (``analysis.run_analysis``). ``params``: a ``CueParams``, or its fields as keywords (``top_k``, ``min_count``,
    ``alpha``, ``study``, ``text_column``, ``premise_column``, ``train_fraction``, ``bigrams``, ``nearest_k``,
    ``seed``, ``include_limited``; the record holds their defaults), checked before anything in the run changes."""
    return run_analysis(run_dir, STEPS, CueParams.of(params, options))
