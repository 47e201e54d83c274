"""The instrument's validation: how big a planted bias the headline finds, and whether it stays null on a model that
was fine-tuned on the same kind of data without one.

A dose ladder (the positive control's adapter merged at several strengths, ``adapter_scale``) and a decoy (an adapter
made by the same recipe on balanced data) score the same prompts, one prompt set per seed; each seed's run is analysed
as any run is (``analysis.analyze_run``). Per arm and dose, across the seeds: the detection rate of the headline test
(the planted direction found at α = .05; Wilson 95% CI), its flag rate in either direction (the false-positive rate
where no bias was planted: the decoy and dose 0), the gap with a 95% CI across seeds, and the readings of what the gap
means (the task floor, whether the answers use the examples). ``reliable_dose`` is the smallest dose found in at least
``RELIABLE`` of the seeds, at it and at every stronger dose.

The run root holds one run per seed, ``seed-<N>/``; the arms are told apart by the adapter each score file's sidecar
records (and its ``adapter_scale``). The study's own run folder (the run root itself, or for the shipped sample
``outputs/validation_sample``) holds what it read (``validation.json``: each seed's summary by its sha256), its
figure, tables, ``summary.json``, ``results.md``, its executed notebook and ``report.html``.
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from ... import artifacts, paths, studies
from ...runstore import read_sidecar
from ...results import entries, fmt_alpha, fmt_p, reading_words
from ...records import Summary
from ...stats import ALPHA
from . import stability
from .validation_inputs import check_root, same_adapter
from .validation_plot import figure

RELIABLE = 0.8  # a dose is found reliably when the headline finds it in at least this share of the prompt sets
SEED_DIR = re.compile(r"seed-(\d+)")
ARMS = ("ladder", "decoy")
RECORD = studies.ACROSS_RUNS["validation"].record  # what marks the study's run folder: the runs it read


def locate(root, run_dir) -> tuple[str, str]:
    """The folder of the seeds' runs and the study's run folder: ``root`` not given (None) is the one the run folder's
    record names, else the run folder itself."""
    if root is None:
        rec = paths.resolve(run_dir) / RECORD
        root = artifacts.read_json(rec).get("root") if rec.is_file() else None
        root = str(paths.resolve(run_dir) / root) if root else run_dir
    return str(root), str(run_dir)


def seed_runs(root) -> dict[int, Path]:
    """The runs under ``root``: ``seed-<N>`` folders holding a dataset, by seed."""
    base = paths.resolve(root)
    found = {int(m.group(1)): p for p in sorted(base.iterdir()) if p.is_dir()
             and (m := SEED_DIR.fullmatch(p.name)) and (p / "prompts.parquet").is_file()} if base.is_dir() else {}
    if not found:
        raise ValueError(f"root: {base} holds no run of the validation study (seed-<N>/ folders with prompts.parquet); "
                         "run `python scripts/validation.py params/validation.yaml`, or read the shipped sample "
                         "outputs/samples/validation")
    return dict(sorted(found.items()))


def arms(run, ladder_adapter: str, decoy_adapter: str) -> dict[str, dict]:
    """Score file stem (the model's name in the analysis) → its arm and dose, from each sidecar's ``adapter`` and
    ``adapter_scale`` (the ladder's dose is the scale, 1 where none is recorded; the decoy's is 1). A score file of
    another model is left out."""
    out = {}
    for side in paths.score_sidecars(run):
        meta = read_sidecar(side)
        adapter = meta.get("adapter")
        dose = paths.scale_of(meta.get("adapter_scale"))
        if same_adapter(adapter, ladder_adapter):
            out[side.stem] = {"arm": "ladder", "dose": dose}
        elif same_adapter(adapter, decoy_adapter):
            out[side.stem] = {"arm": "decoy", "dose": dose}
    return out


def current_summary(run) -> dict | None:
    """The run's ``summary.json`` when it is the analysis of the score files there now (their sha256), else None."""
    f = paths.summary_path(run)
    if not f.is_file():
        return None
    summary = artifacts.read_json(f)
    recorded = Summary(summary).score_files or {}
    now = {side.with_suffix(".parquet").name: artifacts.sha256_file(side.with_suffix(".parquet"))
           for side in paths.score_sidecars(run) if side.with_suffix(".parquet").is_file()}
    return summary if recorded and recorded == now else None


def seed_rows(summary: dict, arm_of: dict, seed: int, alpha: float = ALPHA) -> list[dict]:
    """One row per model of ``arm_of`` in one seed's analysis: its headline test of the concept-learning gap (verdict,
    p, validity), the gap with its bootstrap CI, the accuracies, and the readings (floor, use of the examples)."""
    rows, slugs = [], Summary(summary).labels  # results name a model by its label; its score file by its slug
    for e in entries(summary, alpha):
        slug = slugs.get(e.get("model"), e.get("model"))
        who = arm_of.get(slug)
        if who is None or e.get("condition") != "concept_learning" or e.get("term") != "upward" or e.get("models"):
            continue
        cond = summary["models"][e["model"]]["conditions"]["concept_learning"]
        lo, hi = cond.get("gap_ci95_bootstrap") or (math.nan, math.nan)
        floor, uses = e.get("floor") or {}, e.get("uses_examples") or {}
        valid = bool(e.get("valid"))
        rows.append({"seed": seed, **who, "model": e["model"], "slug": slug, "n": e.get("n"),
                     "acc_up": cond.get("acc_up"), "acc_down": cond.get("acc_down"), "gap": cond.get("gap"),
                     "gap_ci_low": lo, "gap_ci_high": hi,
                     "test": e.get("test"), "method": e.get("method"), "p": e.get("p"), "valid": valid,
                     "verdict": e.get("verdict"), "detected": valid and e.get("verdict") == "more",
                     "flagged": valid and e.get("verdict") not in (None, "none"), "reading": e.get("reading"),
                     "floor_state": e.get("floor_state"),
                     "floor_accuracy": floor.get("accuracy"), "above_floor": bool(floor.get("above")),
                     "uses_examples": bool(uses.get("uses"))})
    return rows


def collect(root, ladder_adapter: str, decoy_adapter: str, analyse: Callable | None = None,
            alpha: float = ALPHA, seeds: list[int] | None = None) -> pd.DataFrame:
    """Every seed's rows (``seed_rows``): each run's summary where it is the analysis of its current scores, else
    ``analyse(run)``'s (``analysis.analyze_run``: a run without a current analysis and no ``analyse`` is an error).
    ``seeds``: the seeds to read (None: every ``seed-<N>`` folder); the root is checked first
    (``validation_inputs.check_root``), before any seed is analysed."""
    rows, summaries = [], {}
    for seed, run in check_root(seed_runs(root), root, ladder_adapter, decoy_adapter, seeds).items():
        summary = current_summary(run)
        if summary is None:
            if analyse is None:
                raise ValueError(f"root: {run} has no analysis of its current scores (summary.json); analyse it")
            summary = analyse(run).summary
        arm_of = arms(run, ladder_adapter, decoy_adapter)
        if not arm_of:
            raise ValueError(f"root: {run} holds no scores of {ladder_adapter} or {decoy_adapter}")
        yes = {stem: float(pd.read_parquet(paths.scores_dir(run) / f"{stem}.parquet", columns=["pred_yes"])
                           ["pred_yes"].mean()) for stem in arm_of}  # how one-sided the answers are
        rows += [dict(r, yes_rate=yes[r["slug"]]) for r in seed_rows(summary, arm_of, seed, alpha)]
        summaries[f"seed {seed}"] = summary
    out = pd.DataFrame(rows)
    out.attrs["summaries"] = summaries  # each seed's analysis, for the readings across prompt sets (``records``)
    return out


def wilson(k: int, n: int) -> tuple[float, float]:
    """Wilson's 95% interval for k of n (statsmodels' ``proportion_confint``); NaN for n = 0."""
    from statsmodels.stats.proportion import proportion_confint

    if n == 0:
        return math.nan, math.nan
    lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    return float(lo), float(hi)


def mean_ci(x) -> tuple[float, float, float]:
    """The mean of ``x`` and its 95% t interval across the seeds (independent prompt sets); NaN bounds for one."""
    from scipy import stats

    x = np.asarray([v for v in x if v is not None and np.isfinite(v)], dtype=float)
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    m = float(x.mean())
    if len(x) < 2:
        return m, math.nan, math.nan
    half = float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return m, m - half, m + half


def table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per arm and dose, across the seeds: the detection rate (planted direction) and the flag rate (either
    direction) with Wilson CIs, the mean gap and its t CI, the valid tests, the readings."""
    out = []
    for (arm, dose), g in rows.groupby(["arm", "dose"], sort=True):
        n = len(g)
        k, f = int(g["detected"].sum()), int(g["flagged"].sum())
        gap, gap_lo, gap_hi = mean_ci(g["gap"])
        readings = g["reading"].fillna("none").value_counts()
        out.append({"arm": arm, "dose": float(dose), "seeds": n, "valid": int(g["valid"].sum()),
                    "detected": k, "detection_rate": k / n, "detection_ci_low": wilson(k, n)[0],
                    "detection_ci_high": wilson(k, n)[1], "flagged": f, "flag_rate": f / n,
                    "flag_ci_low": wilson(f, n)[0], "flag_ci_high": wilson(f, n)[1],
                    "gap": gap, "gap_ci_low": gap_lo, "gap_ci_high": gap_hi,
                    "acc_up": float(g["acc_up"].mean()), "acc_down": float(g["acc_down"].mean()),
                    "yes_rate": float(g["yes_rate"].mean()) if "yes_rate" in g else math.nan,
                    "above_floor": int(g["above_floor"].sum()), "floor_accuracy": float(g["floor_accuracy"].mean()),
                    "uses_examples": int(g["uses_examples"].sum()),
                    "reading": ", ".join(f"{r} {c}" for r, c in readings.items())})
    order = {a: i for i, a in enumerate(ARMS)}
    return pd.DataFrame(out).sort_values(["arm", "dose"], key=lambda c: c.map(order) if c.name == "arm" else c,
                                         ignore_index=True)


def reliable_dose(tab: pd.DataFrame, share: float = RELIABLE) -> dict | None:
    """The smallest ladder dose the headline found in at least ``share`` of the seeds, at it and at every stronger
    dose, with its mean gap (None when no dose is)."""
    ladder = tab[tab["arm"] == "ladder"].sort_values("dose")
    ok = ladder["detection_rate"] >= share
    found = None
    for i in range(len(ladder) - 1, -1, -1):
        if not ok.iloc[i]:
            break
        found = ladder.iloc[i]
    return None if found is None else {"dose": float(found["dose"]), "gap": float(found["gap"]),
                                       "gap_ci_low": float(found["gap_ci_low"]),
                                       "gap_ci_high": float(found["gap_ci_high"]),
                                       "detection_rate": float(found["detection_rate"]),
                                       "detection_ci_low": float(found["detection_ci_low"]),
                                       "detection_ci_high": float(found["detection_ci_high"]),
                                       "detected": int(found["detected"]), "seeds": int(found["seeds"]),
                                       "share": share}


def records(tab: pd.DataFrame, rows: pd.DataFrame, share: float = RELIABLE) -> dict:
    """The validation's summary.json: one record per arm and dose (``table``), every seed's row, the reliable dose,
    the false-positive rate where no bias was planted (the decoy, and dose 0 of the ladder)."""
    null = rows[(rows["arm"] == "decoy") | ((rows["arm"] == "ladder") & (rows["dose"] == 0))]
    k, n = int(null["flagged"].sum()), len(null)
    sets = rows.attrs.get("summaries") or {}
    stable = stability.table(sets, list(dict.fromkeys(rows["model"]))) if len(sets) > 1 else []
    return artifacts.json_clean({"stability": stable,
        "records": tab.to_dict("records"), "seeds": sorted(int(s) for s in rows["seed"].unique()),
        "per_seed": rows.to_dict("records"), "reliable": reliable_dose(tab, share), "reliable_share": share,
        "alpha": ALPHA, "false_positive": {"flagged": k, "n": n, "rate": k / n if n else math.nan,
                                           "ci_low": wilson(k, n)[0], "ci_high": wilson(k, n)[1]},
        "method": sorted(set(rows["method"].dropna()))})


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _points(x: float) -> str:
    if x is None or not math.isfinite(x):  # one prompt set: no interval across seeds
        return "n/a"
    v = round(100 * x, 1)
    return f"{v + 0.0:+.1f}"  # + 0.0: a gap that rounds to zero reads +0.0, never -0.0


def text(summary: dict) -> str:
    """The validation in words, from its records: per dose what the headline found, the decoy, the false-positive
    rate, and what a null rules out."""
    recs = summary["records"]
    alpha = summary.get("alpha", ALPHA)
    lines = []
    for r in recs:
        who = f"the control at strength {r['dose']:g}" if r["arm"] == "ladder" else "the decoy"
        lines.append(f"- {who}: gap {_points(r['gap'])} points (95% CI across seeds {_points(r['gap_ci_low'])} to "
                     f"{_points(r['gap_ci_high'])}); the headline found upward concepts answered right more often in "
                     f"{r['detected']} of {r['seeds']} prompt sets ({100 * r['detection_rate']:.0f}%, Wilson 95% CI "
                     f"{100 * r['detection_ci_low']:.0f}–{100 * r['detection_ci_high']:.0f}%) and a gap in either "
                     f"direction in {r['flagged']}; above the task floor in {r['above_floor']}, the answers using "
                     f"the examples in {r['uses_examples']}.")
    fp = summary["false_positive"]
    where = ("the decoy, and the control at strength 0" if any(r["arm"] == "decoy" for r in recs)
             else "the control at strength 0, the base model's weights")
    lines.append(f"Where no bias was planted ({where}), the headline reported a gap "
                 f"at α = {fmt_alpha(alpha)} in {fp['flagged']} of {fp['n']} prompt sets (false-positive rate "
                 f"{100 * fp['rate']:.0f}%, Wilson 95% CI {100 * fp['ci_low']:.0f}–{100 * fp['ci_high']:.0f}%).")
    for row in summary.get("stability") or []:  # is a reading the model's, or the prompt set's?
        lines.append("- " + stability.sentence(row))
    rel, share = summary.get("reliable"), summary.get("reliable_share", RELIABLE)
    if rel is None:
        lines.append(f"No strength of the control was found in {100 * share:.0f}% of the prompt sets or more: a null "
                     "from this design rules out no gap the ladder planted.")
    else:
        lines.append(f"The smallest strength found in at least {100 * share:.0f}% of the prompt sets (and every "
                     f"stronger one) is {rel['dose']:g}, a gap of {_points(rel['gap'])} points, found in "
                     f"{rel['detected']} of {rel['seeds']} (Wilson 95% CI {100 * rel['detection_ci_low']:.0f}–"
                     f"{100 * rel['detection_ci_high']:.0f}%): a null from a prompt set of this size speaks against a "
                     "bias that large, as far as that detection rate holds, and says nothing about smaller ones.")
    return "\n".join(lines)


def inputs(root) -> dict:
    """What the study read: each seed's ``summary.json`` by its sha256 (a seed analysed again since: out of date)."""
    return {f"{run.name}/{paths.summary_path(run).name}": artifacts.sha256_file(paths.summary_path(run))
            for run in seed_runs(root).values() if paths.summary_path(run).is_file()}


def check_run_folder(run_dir, root) -> Path:
    """The run folder, once it is not a shipped sample and holds no other study's results: not another root's
    validation (its record names another root) and not a folder of seed runs other than ``root``."""
    base, src = paths.check_run_dir(run_dir), paths.resolve(root).resolve()
    rec = base / RECORD
    other = artifacts.read_json(rec).get("root") if rec.is_file() else None
    if (other and (base / other).resolve() != src) or (base.resolve() != src and base.is_dir() and any(
            SEED_DIR.fullmatch(p.name) for p in base.iterdir() if p.is_dir())):
        raise ValueError(f"run_dir: {base} holds the validation of other seed runs ({other or base}), not of {root}; "
                         "name a run folder of its own")
    return base


def write(root, rows: pd.DataFrame, tab: pd.DataFrame, summary: dict, source=None) -> list[Path]:
    """The study's run folder ``root`` (``source``: the folder of the seeds' runs, ``root`` itself when None):
    ``figures/power_curve.png``, ``tables/power.csv`` (per dose), ``tables/power_seeds.csv`` (per seed),
    ``summary.json``, ``results.md`` and, last, ``validation.json`` (what it read); never in a shipped sample."""
    source = root if source is None else source
    base = check_run_folder(root, source)
    paths.tables_dir(base).mkdir(parents=True, exist_ok=True)
    files = [figure(tab, paths.figures_dir(base) / "power_curve.png", RELIABLE)]
    for name, frame in (("power", tab), ("power_seeds", rows)):
        files += artifacts.write_table(frame, paths.tables_dir(base) / name)
    artifacts.write_json(dict(summary, analysed=artifacts.now_utc()), paths.summary_path(base))
    artifacts.atomic_write(paths.results_path(base), lambda p: p.write_text(results_md(summary, rows), "utf-8"))
    where = os.path.relpath(paths.resolve(source).resolve(), base.resolve())  # from the run folder: a copy keeps it
    artifacts.write_json({"study": "validation", "root": where, "seeds": summary["seeds"], "inputs": inputs(source)},
                         base / RECORD)
    return files + [paths.summary_path(base), paths.results_path(base), base / RECORD]


def seed_cell(r) -> str:
    """One prompt set's reading of one model, in a few words, with its p (the side found where it is downward)."""
    kind = r["reading"] if isinstance(r["reading"], str) else "no_valid_test"
    words = reading_words(kind, r.get("floor_state")) or kind.replace("_", " ")
    side = " (downward)" if r["verdict"] == "less" else ""
    return f"{words}{side}, {fmt_p(r['p'])}" if r["valid"] and _finite(r["p"]) else f"{words}{side}"


def readings_table(rows: pd.DataFrame, stable: list | None = None) -> str:
    """Each strength's reading in each prompt set, as Markdown: one row per arm and strength, one column per seed, then
    (``stable``: the summary's ``stability``) how many sets agree and the reading over all the sets together."""
    seeds = sorted(int(s) for s in rows["seed"].unique())
    head = ["adapter", "strength", "found (upward, α = .05)"] + [f"prompt set {s}: reading, headline p" for s in seeds]
    by_model = {r["model"]: r for r in stable or []}
    if by_model:
        head += ["sets agreeing", "over all sets"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    order = {a: i for i, a in enumerate(ARMS)}
    for (arm, dose), g in sorted(rows.groupby(["arm", "dose"]), key=lambda x: (order[x[0][0]], x[0][1])):
        by = {int(r["seed"]): seed_cell(r) for _, r in g.iterrows()}
        cells = ["control" if arm == "ladder" else "decoy", f"{dose:g}", f"{int(g['detected'].sum())} of {len(g)}"]
        cells += [by.get(s, "not scored") for s in seeds]
        if by_model:
            st = by_model.get(g["model"].iloc[0]) or {}
            pooled = st.get("pooled")
            cells += [f"{st['agree']} of {st['n_sets']}" if st else "",
                      reading_words(pooled, st.get("pooled_floor_state")) or pooled or "none"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def results_md(summary: dict, rows: pd.DataFrame) -> str:
    """``results.md``: the title, the design, the findings (the smallest strength found reliably, the false-positive
    rate), each strength's reading per prompt set, the per-strength table and each strength in words."""
    lines = text(summary).splitlines()
    doses = ", ".join(f"{d:g}" for d in sorted(rows.loc[rows["arm"] == "ladder", "dose"].unique()))
    n = sorted({int(x) for x in rows["n"].dropna()})
    design = (f"The positive control at strengths {doses or 'none'}" + (" and the decoy" if (rows["arm"] == "decoy").any()
                                                                       else "")
              + f", each scored on the same {len(summary['seeds'])} prompt sets (seeds "
              f"{', '.join(map(str, summary['seeds']))}; {' or '.join(map(str, n))} concept-learning prompts each); the "
              f"headline test of each prompt set's gap: {'; '.join(summary['method']) or 'none'}, at α = "
              f"{fmt_alpha(summary.get('alpha', ALPHA))}.")
    key = [x for x in lines if not x.startswith("- ")]
    return "\n\n".join([
        "# The instrument's validation: how small a planted bias the headline finds", design,
        "\n".join(f"- {x}" for x in reversed(key)), "## Each strength, prompt set by prompt set", readings_table(rows, summary.get("stability")),
        "## Per strength", markdown_table(summary), "## Each strength in words",
        "\n\n".join(x[2:][:1].upper() + x[3:] for x in lines if x.startswith("- "))]) + "\n"


def markdown_table(summary: dict) -> str:
    """The per-dose table of ``summary`` as Markdown (what docs/validation.md shows; its test compares the two)."""
    head = ("| adapter | strength | gap, points (95% CI across seeds) | found (upward, α = .05) | detection rate "
            "(Wilson 95% CI) | a gap either way | above the task floor | answers use the examples | answers Yes |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    lines = [head]
    for r in summary["records"]:
        lines.append(f"| {'control' if r['arm'] == 'ladder' else 'decoy'} | {r['dose']:g} | {_points(r['gap'])} "
                     f"({_points(r['gap_ci_low'])} to {_points(r['gap_ci_high'])}) | {r['detected']} of {r['seeds']} | "
                     f"{100 * r['detection_rate']:.0f}% ({100 * r['detection_ci_low']:.0f}–"
                     f"{100 * r['detection_ci_high']:.0f}%) | {r['flagged']} of {r['seeds']} | "
                     f"{r['above_floor']} of {r['seeds']} | {r['uses_examples']} of {r['seeds']} | "
                     f"{100 * r['yes_rate']:.0f}% |")
    return "\n".join(lines)


def decoy_text(training: dict) -> str:
    """What a decoy's training record (``scripts/train_control.py --design balanced``) says, in words: how much it
    changed the base model's answers, what the headline found on its held-out prompts, and whether its check passed."""
    check, head = training["check"], training["check"]["headline"]
    held = training["held_out"]
    cells = "; ".join(f"{k.replace('/', ', ').replace('_', ' ')} {100 * v['accuracy']:.1f}% (n = {v['n']})"
                      for k, v in sorted(held.items()))
    found = ("no gap" if head["verdict"] == "none" else "upward concepts learned better" if head["verdict"] == "more"
             else "downward concepts learned better")
    return (f"The decoy's answers differ from the base model's on {100 * check['changed_share']:.0f}% of its "
            f"{training['held_out_prompts']} held-out prompts. Held-out accuracy: {cells}. On the {head['n']} "
            f"concept-learning prompts the headline ({head['method']}) found {found} at α = {fmt_alpha(ALPHA)} "
            f"({fmt_p(head['p'])}); "
            f"the gap is {_points(head['gap'])} points, 95% CI {_points(head['gap_ci_low'])} to "
            f"{_points(head['gap_ci_high'])}. "
            + ("It passed its check and ships." if check["passed"] else
               "It failed its check (" + "; ".join(check["failures"]) + "), so it was not saved and does not ship."))


def cost_text(results: dict) -> str:
    """The validation's wall time and host, from its results file's ``timing`` (``scripts/validation.py``)."""
    t = results["timing"]
    h = t["host"]
    runs = t.get("runs") or []
    seeds = [s["seconds"] for r in runs for s in r.get("seeds", [])]
    per_seed = f"; each seed's sweep {min(seeds) / 60:.0f}–{max(seeds) / 60:.0f} min" if seeds else ""
    return (f"The study took {t['total_seconds'] / 60:.0f} min from scratch on a {h['cores']}-core {h['cpu']} "
            f"(native bf16: {'yes' if h['cpu_native_bf16'] else 'no'}, {'a GPU' if h['gpu'] else 'no GPU'}), "
            f"{t['workers']} seed{'s' if t['workers'] > 1 else ''} at once on one thread each{per_seed}, on a host "
            "shared with other work.")
