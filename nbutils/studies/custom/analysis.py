"""One call that turns a custom run's scores into tables, figures and summary.json.

When the file has a ``concept`` column of quantifier concepts ("more than 1/2", "less than 38") and Yes/No answers,
the concept-learning statistics of the monotonicity study (accuracy per concept, Appendix-B table, upward − downward gap, mixed
model) run on it too, from the shared quantifier code (``nbutils.studies.common``).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...analysis import Analysis, Steps, run_analysis, write_analysis
from ... import artifacts, paths
from ...stats import N_BOOT, precision_margin_figure
from ...results import generic_text, plural
from ...runstore import load_scores
from .. import get
from ..common import claims, model_comparison, quantifier_mixed_models as qmixed, quantifier_stats as qstats
from ..common.quantifiers import parse_concept
from . import models as model_tests, plots, stats
from .params import CustomParams

MONOTONICITY_COLUMNS = ("concept", "family", "quantifier", "threshold", "monotonicity", "condition", "correct",
                        "pred_yes", "label", "margin", "pair_id")
LATEX = ("accuracy", "contrasts", "clustered_model", "monotonicity_appendix_b", "monotonicity_gap")


def load(run_dir, include_limited: bool = False) -> pd.DataFrame:
    """Scores of every complete model joined with ``items.parquet`` (one row per model × prompt); ``attrs["order"]``
    the models in the order they are compared (the first is the reference): an import's logs in the order given,
    else the order the models were scored in."""
    scores = load_scores(run_dir, get("custom").spec, include_limited=include_limited)
    given = [m for m in _imported(run_dir).get("models") or [] if m in set(scores["model"])]
    rest = model_comparison.scored_order(run_dir, [m for m in scores["model"].unique() if m not in given],
                                         scores.attrs.get("slugs"))
    scores.attrs["order"] = given + rest
    return scores


def _imported(run_dir) -> dict:
    """The parameters an import of other tools' logs recorded in the dataset's sidecar (empty for a loaded file)."""
    side = paths.sidecar(paths.dataset_path(run_dir, get("custom").dataset_file))
    params = (artifacts.read_json(side).get("parameters") or {}) if side.exists() else {}
    return params if params.get("imported_from") else {}




def compute(scores: pd.DataFrame, params: CustomParams | None = None, **options) -> Analysis:
    """All tables from a joined scores frame (see ``load``); ``params``: a ``CustomParams``, or its fields as keywords
    (``use_r``: the concept-learning mixed model's GLMM with lme4 when R has it, see ``nbutils.analysis``)."""
    params = CustomParams.of(params, options)
    a = Analysis(scores)
    t = a.tables
    t["accuracy"] = stats.accuracy_by_group(scores)
    t["choice_distribution"] = stats.choice_distribution(scores)
    t["response_bias"] = stats.response_bias(t["choice_distribution"])
    sdt = stats.signal_detection(scores)
    if len(sdt):
        t["signal_detection"] = sdt
    t["contrasts"] = stats.pairwise_contrasts(scores)
    if scores["group"].nunique() < 2:
        a.notes.append("one group only: no group contrasts (set group_by in 01_load to compare groups)")
    if stats.items_repeat(scores):
        t["clustered_model"] = stats.clustered_model(scores)
        a.notes += sorted({n for n in t["clustered_model"]["note"].dropna() if n})
    else:
        t["clustered_model"] = pd.DataFrame(columns=["model", "test", "term", "estimate", "ci_low", "ci_high", "p", "note"])
        if scores["group"].nunique() > 1:
            a.notes.append("no item appears in more than one group: no clustered model; the contrasts compare "
                           "independent samples")
    t["margin_by_answer"] = stats.margin_by_answer(scores)
    sep = stats.margin_separation(scores)
    if len(sep):
        t["margin_separation"] = sep
    t["per_item"] = stats.per_item(scores)
    compared = model_tests.compare(scores, scores.attrs.get("order"))
    if len(compared):  # two models or more
        t["model_comparison"] = compared
    for model, g in scores.groupby("model", sort=False):
        if g["choice"].nunique() == 1:
            a.notes.append(f"{model}: chooses {g['choice'].iloc[0]!r} for every prompt (pure response bias)")
    mono, mono_notes = monotonicity_tables(scores, n_boot=params.n_boot, seed=params.seed, use_r=params.use_r)
    t.update(mono)
    a.notes += mono_notes
    a.summary = {"study": "custom", "records": model_tests.records(t.get("model_comparison", compared)) + stats.summary_records(t)}
    if "monotonicity_gap" in t:
        a.summary["records"] += artifacts.json_clean([
            stats.group_record(r.model, "monotonicity_gap", r.condition, r.gap, r.gap_ci_low, r.gap_ci_high, r.p_cmh,
                          "upward − downward accuracy at matched thresholds (the monotonicity study); CI: bootstrap over thresholds "
                          "(descriptive); p: Cochran–Mantel–Haenszel, a test about these thresholds only",
                          claims.gap(r.condition, "points", "gap"))
            for r in t["monotonicity_gap"].itertuples(index=False)])
    a.summary["_notes"] = a.notes
    models = sorted(scores["model"].unique().tolist()) if len(scores) else []
    a.text = generic_text(
        a.summary, "How does the model answer this prompt file?",
        f"{plural(len(models), 'model')} ({', '.join(models)}); {plural(len(scores) // max(len(models), 1), 'prompt')} "
        f"in {plural(scores['group'].nunique() if len(scores) else 0, 'group')}; per group the accuracy is tested "
        "against chance (exact binomial, two-sided, Wilson CI, Holm)"
        + ("; each model is compared with the first on the items both answered (exact McNemar; in groups, Holm)."
           if len(models) > 1 else "."),
        lambda r: r.get("test") in ("accuracy_vs_chance", "monotonicity_gap")
        or r.get("test") == "mcnemar_models")
    return a


def monotonicity_tables(scores: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0,
                        use_r: bool = True) -> tuple[dict, list[str]]:
    """The monotonicity study's accuracy per concept, Appendix-B table, pooled gap and mixed model, when the file has a ``concept``
    column the concept parser accepts and Yes/No answers; parts needing columns the file lacks are skipped with a note."""
    if "concept" not in scores.columns:
        return {}, []
    if "pred_yes" not in scores.columns:
        return {}, ["concept column found, but the concept-learning analysis needs Yes/No answers: skipped"]
    parsed, bad = {}, []
    for value in scores["concept"].dropna().unique():
        try:
            parsed[value] = parse_concept(str(value), "concept")
        except ValueError:
            bad.append(value)
    if bad or not parsed:
        return {}, [f"concept column: {bad[:3]} are not concepts like 'more than 1/2' or 'less than 38': "
                    "no concept-learning analysis"]
    d = scores[scores["concept"].notna()].copy()
    c = d["concept"].map(parsed)
    d = d.assign(concept=c.map(lambda x: x.name), family=c.map(lambda x: x.family),
                 quantifier=c.map(lambda x: x.quantifier), threshold=c.map(lambda x: x.threshold),
                 monotonicity=c.map(lambda x: x.monotonicity), pair_id=d["item_id"])
    notes = []
    if "condition" not in d.columns:
        d["condition"] = "custom"
        notes.append("concept-learning analysis: no condition column, every prompt counted as condition 'custom'")
    out: dict[str, pd.DataFrame] = {}
    steps = [("accuracy", lambda: qstats.accuracy_table(d)),
             ("appendix_b", lambda: qstats.appendix_b(out["monotonicity_accuracy"])),
             ("gap", lambda: qstats.pooled_gap(d, n_boot=n_boot, seed=seed)),
             ("mixed_model", lambda: qmixed.mixed_model(d, use_r=use_r))]
    for name, run in steps:
        try:
            out[f"monotonicity_{name}"] = run()
        except KeyError as err:  # a part of the monotonicity analysis that needs a column the file does not have
            notes.append(f"concept-learning {name}: skipped, it needs column {err} which the file does not have")
    if "monotonicity_gap" in out and out["monotonicity_gap"].empty:
        del out["monotonicity_gap"]
        notes.append("concept-learning gap: no threshold has both a 'more than' and a 'less than' concept")
    return out, notes


def write(a: Analysis, run_dir, variants: pd.DataFrame | None = None) -> list[Path]:
    """Tables as CSV (+ LaTeX for the headline ones), figures as PNG and PDF, summary.json; with ``variants`` (a model
    scored at several precisions) the margin-vs-margin figure of the precision sensitivity section too."""
    figs = {"accuracy_by_group": plots.accuracy_by_group(a.tables["accuracy"]),
            "choice_distribution": plots.choice_distribution(a.tables["choice_distribution"]),
            "margin_by_answer": plots.margin_by_answer(a.scores)}
    if variants is not None:
        figs["precision_margins"] = precision_margin_figure(variants, "row_id")
    return write_analysis(a, run_dir, figs, latex=LATEX, index=("monotonicity_appendix_b",))


def source_notes(run_dir) -> list[str]:
    """A line when the prompt file the run's dataset was loaded from has changed (or gone) since: the scores are of
    the copy in the run, not of the file as it is now."""
    imported = _imported(run_dir)
    if imported:
        return imported_notes(imported)
    side = paths.sidecar(paths.dataset_path(run_dir, get("custom").dataset_file))
    params = artifacts.read_json(side).get("parameters") or {} if side.exists() else {}
    source, recorded = params.get("data_file"), params.get("data_file_sha256")
    if not source or not recorded:
        return []
    path = paths.resolve(source)
    if not path.exists():
        return [f"the prompt file {source} is no longer there: these results are of the copy loaded into the run"]
    if artifacts.sha256_file(path) != recorded:
        return [f"the prompt file {source} changed after it was loaded (its sha256 differs): these results are of the "
                "copy loaded into the run; load it again (01_load, overwrite=True) and score again to use the new file"]
    return []


def imported_notes(imported: dict) -> list[str]:
    """What an import of other tools' logs recorded: the logs read and the items left out because not every log
    holds them, named; the reader's notes."""
    logs = imported.get("logs") or []
    out = [f"imported from {len(logs)} {imported['imported_from']} log(s) of task {imported.get('task')!r}: "
           + "; ".join(f"{g.get('label')} from {Path(str(g.get('file'))).name}" for g in logs)]
    for label, ids in (imported.get("left_out") or {}).items():
        if ids:
            out.append(f"left out, not in every log: {len(ids)} item(s) of {label} ({', '.join(map(str, ids[:10]))}"
                       + (" …" if len(ids) > 10 else "") + ")")
    return out + list(imported.get("notes") or [])


STEPS = Steps(
    params=CustomParams,
    load=lambda run_dir, params: load(run_dir, params.include_limited),
    compute=lambda scores, run_dir, params: compute(scores, params), write=write,
    id_column="row_id", source_notes=source_notes,
    no_headline="the custom study's headline tests are per group (accuracy against chance), so no one headline "
                "is computed again at each precision; the decisions and the accuracy are compared")


def analyze_run(run_dir, params: CustomParams | None = None, **options) -> Analysis:
    """Load every complete model's scores in ``run_dir`` (limited runs too when asked), compute all tables, write them
    (``analysis.run_analysis``). ``params``: a ``CustomParams``, or its fields as keywords (``n_boot``, ``seed``,
    ``include_limited``, ``use_r``; the record holds their defaults), checked before anything in the run changes."""
    return run_analysis(run_dir, STEPS, CustomParams.of(params, options))
