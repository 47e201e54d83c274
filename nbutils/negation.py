"""Negation-bias probe (seed 003): 2×2 stimuli (context × form), perplexity per sentence, linear mixed models.

RESEARCH STIMULI. The shipped roots state social stereotypes on purpose, so that a model's sensitivity to them can
be measured. They are not claims about any group.
"""
from __future__ import annotations

import time
import warnings
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from . import artifacts
from .paths import model_slug, resolve

ROOT_COLUMNS = ["root_id", "category", "source_idea", "consistent_actor", "consistent_synonym", "inconsistent_actor",
                "inconsistent_synonym", "consistent_behaviour", "inconsistent_behaviour", "consistent_trait",
                "consistent_antonym", "inconsistent_trait", "inconsistent_antonym", "adverb"]
STRUCTURES = {  # the seed's four sentence structures; B = behaviour clause, D = description clause
    "because": "{Actor} {behaviour} because {actor} is {description}.",
    "who": "{Actor}, who {behaviour}, is {description}.",
    "which_means": "{Actor} {behaviour}, which means {actor} is {description}.",
    "thats_why": "{Actor} is {description}, that's why {actor} {behaviour}.",
}
CONDITIONS = {("consistent", "affirmative"): "SA", ("consistent", "negated"): "SN",
              ("inconsistent", "affirmative"): "NA", ("inconsistent", "negated"): "NN"}
STIMULUS_COLUMNS = ["item_id", "context", "form", "sentence"]


def load_roots(path: str | Path | None = None) -> pd.DataFrame:
    """The shipped root items (or a CSV with the same columns)."""
    if path is None:
        with resources.files("nbutils").joinpath("data/negation_roots.csv").open() as f:
            roots = pd.read_csv(f, dtype=str)
    else:
        roots = pd.read_csv(resolve(path), dtype=str)
    missing = [c for c in ROOT_COLUMNS if c not in roots.columns]
    if missing:
        raise ValueError(f"roots: missing columns {missing}; required: {ROOT_COLUMNS}")
    return roots


def expand_stimuli(roots: pd.DataFrame | None = None, structures=tuple(STRUCTURES), synonyms: bool = True) -> pd.DataFrame:
    """Roots × group-label variants (original, synonym) × sentence structures → items, each in the four cells."""
    roots = load_roots() if roots is None else roots
    bad = [s for s in structures if s not in STRUCTURES]
    if bad:
        raise ValueError(f"structures: unknown {bad}; allowed: {list(STRUCTURES)}")
    rows = []
    for r in roots.itertuples(index=False):
        variants = [("original", r.consistent_actor, r.inconsistent_actor)]
        if synonyms:
            variants.append(("synonym", r.consistent_synonym, r.inconsistent_synonym))
        for label, c_actor, i_actor in variants:
            for structure in structures:
                item_id = f"{r.root_id}-{label}-{structure}"
                for context, actor, behaviour, trait, antonym in (
                        ("consistent", c_actor, r.consistent_behaviour, r.consistent_trait, r.consistent_antonym),
                        ("inconsistent", i_actor, r.inconsistent_behaviour, r.inconsistent_trait, r.inconsistent_antonym)):
                    for form, description in (("affirmative", f"{r.adverb} {trait}"), ("negated", f"not {antonym}")):
                        text = STRUCTURES[structure].format(Actor=f"The {actor}", actor=f"the {actor}",
                                                            behaviour=behaviour, description=description)
                        rows.append({"item_id": item_id, "root_id": r.root_id, "category": r.category,
                                     "label_variant": label, "structure": structure, "context": context, "form": form,
                                     "condition": CONDITIONS[(context, form)], "sentence": text})
    return pd.DataFrame(rows)


def load_stimuli_csv(path: str | Path) -> pd.DataFrame:
    """A user-supplied stimulus CSV (item_id, context, form, sentence); every item needs all four cells."""
    p = resolve(path)
    if not p.exists():
        raise ValueError(f"stimuli_csv: {p} does not exist")
    df = pd.read_csv(p, dtype=str)
    missing = [c for c in STIMULUS_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"stimuli_csv: {p} lacks columns {missing}; required: {STIMULUS_COLUMNS}")
    for col, allowed in (("context", {"consistent", "inconsistent"}), ("form", {"affirmative", "negated"})):
        bad = df.index[~df[col].isin(allowed)]
        if len(bad):
            raise ValueError(f"stimuli_csv: row {bad[0] + 2} has {col}={df.loc[bad[0], col]!r}; allowed: {sorted(allowed)}")
    empty = df.index[df["sentence"].fillna("").str.strip() == ""]
    if len(empty):
        raise ValueError(f"stimuli_csv: row {empty[0] + 2} has an empty sentence")
    dup = df.index[df.duplicated(["item_id", "context", "form"], keep="first")]
    if len(dup):
        raise ValueError(f"stimuli_csv: row {dup[0] + 2} repeats item {df.loc[dup[0], 'item_id']!r} "
                         f"({df.loc[dup[0], 'context']}, {df.loc[dup[0], 'form']})")
    counts = df.groupby("item_id", sort=False).size()
    incomplete = counts[counts != 4]
    if len(incomplete):
        item = incomplete.index[0]
        row = int(df.index[df["item_id"] == item][0]) + 2
        raise ValueError(f"stimuli_csv: item {item!r} (first at row {row}) has {incomplete.iloc[0]} of the 4 cells "
                         "(consistent/inconsistent × affirmative/negated)")
    df["root_id"] = df["root_id"] if "root_id" in df else df["item_id"]
    df["condition"] = [CONDITIONS[(c, f)] for c, f in zip(df["context"], df["form"])]
    return df


def write_stimuli(df: pd.DataFrame, run_dir, parameters: dict, overwrite: bool = False) -> dict:
    """``{run_dir}/stimuli.parquet`` + sidecar; refuses to replace a different stimulus set."""
    return artifacts.write_dataset(df, resolve(run_dir) / "stimuli.parquet", {"parameters": parameters}, overwrite)


def score_stimuli(run_dir, lm, masked: bool = False, variant: str = "original", batch_size: int = 32,
                  overwrite: bool = False) -> tuple[pd.DataFrame, dict]:
    """Perplexity (causal) or pseudo-perplexity (masked) of every sentence → ``{run_dir}/scores/{slug}.parquet``."""
    from .runs import check_existing, identity
    from .scoring import pseudo_logprobs, sentence_logprobs

    run = resolve(run_dir)
    spath = run / "stimuli.parquet"
    if not spath.exists():
        raise ValueError(f"run_dir: no stimuli file at {spath}; run notebooks/negation/01_stimuli.ipynb first")
    stimuli = pd.read_parquet(spath)
    meta = dict(lm.meta, prompts_sha256=artifacts.sha256_file(spath), scorer="pseudo_perplexity" if masked else "perplexity",
                pll_variant=variant if masked else None, batch_size=batch_size)
    final = run / "scores" / f"{model_slug(lm.meta['model'])}.parquet"
    old = check_existing(final.with_suffix(".json"), identity(meta), "scores", overwrite)
    if old is not None and final.exists():
        return pd.read_parquet(final), old
    t0 = time.perf_counter()
    sentences = stimuli["sentence"].tolist()
    if masked:
        s = pseudo_logprobs(lm.model, lm.tokenizer, sentences, variant=variant, batch_size=batch_size)
    else:
        s = sentence_logprobs(lm.model, lm.tokenizer, sentences, batch_size=batch_size)
    elapsed = time.perf_counter() - t0
    df = pd.concat([stimuli[["item_id", "root_id", "context", "form", "condition"]].reset_index(drop=True),
                    s[["n_tokens", "sum_logprob", "mean_logprob", "ppl"]]], axis=1)
    df["log_ppl"] = np.log(df["ppl"])
    lengths = df.pivot_table(index=["item_id", "context"], columns="form", values="n_tokens", aggfunc="first")
    diff = (lengths["negated"] - lengths["affirmative"]).rename("token_diff_neg_minus_aff").reset_index()
    df = df.merge(diff, on=["item_id", "context"], how="left")
    meta.update(complete=True, n_sentences=len(df), elapsed_seconds=round(elapsed, 3),
                sentences_per_second=round(len(df) / elapsed, 2) if elapsed else None,
                share_equal_token_length=round(float((diff["token_diff_neg_minus_aff"] == 0).mean()), 4),
                created=artifacts.now_utc(), versions=artifacts.versions())
    artifacts.write_parquet(df, final)
    artifacts.write_json(meta, final.with_suffix(".json"))
    return df, meta


def load_negation_scores(run_dir) -> pd.DataFrame:
    """Every complete model's sentence scores in a negation run (one row per model × sentence)."""
    run = resolve(run_dir)
    frames = []
    for sidecar in sorted((run / "scores").glob("*.json")):
        meta = artifacts.read_json(sidecar)
        if meta.get("complete") and meta.get("scorer") in ("perplexity", "pseudo_perplexity"):
            frames.append(pd.read_parquet(sidecar.with_suffix(".parquet")).assign(model=sidecar.stem, scorer=meta["scorer"]))
    if not frames:
        raise ValueError(f"run_dir: no complete negation scores under {run / 'scores'}; run notebooks/negation/02_score.ipynb")
    return pd.concat(frames, ignore_index=True)


def _stars(p: float) -> str:
    return "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else ""


def fit_lmm(df: pd.DataFrame, outcome: str = "ppl", covariate: bool = False) -> tuple[pd.DataFrame, dict]:
    """``outcome ~ context * form`` (+ n_tokens), random intercepts and context slopes by root item (statsmodels MixedLM).

    Coded as the seed: stereotype-consistent context = 1, affirmative form = 1. Returns the fixed effects with p,
    95% CI and stars, and fit information; a fit that did not converge is flagged, never reported as valid.
    """
    import statsmodels.formula.api as smf
    from statsmodels.tools.sm_exceptions import ConvergenceWarning

    d = df.assign(context=(df["context"] == "consistent").astype(float), form=(df["form"] == "affirmative").astype(float))
    formula = f"{outcome} ~ context * form" + (" + n_tokens" if covariate else "")
    info = {"formula": formula, "outcome": outcome, "n": len(d), "n_items": int(d["root_id"].nunique()), "converged": False, "note": ""}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fit = smf.mixedlm(formula, d, groups=d["root_id"], re_formula="~context").fit(reml=True)
        except Exception as err:  # noqa: BLE001 - reported, not raised
            info["note"] = f"fit failed: {type(err).__name__}: {err}"
            return pd.DataFrame(), info
    conv_warn = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
    info["converged"] = bool(fit.converged) and not conv_warn
    if not info["converged"]:
        info["note"] = "did not converge" + (f": {conv_warn[0]}" if conv_warn else "")
    ci = fit.conf_int()
    names = [n for n in fit.fe_params.index]
    table = pd.DataFrame({"term": names, "coef": fit.fe_params.values, "se": fit.bse_fe.values,
                          "p": fit.pvalues[names].values, "ci_low": ci.loc[names, 0].values, "ci_high": ci.loc[names, 1].values})
    table["term"] = table["term"].replace({"context:form": "context × form"})
    table["stars"] = table["p"].map(_stars)
    return table, info


def lmm_tables(scores: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per model: the seed's LMM on perplexity, on log-perplexity, and on log-perplexity with token count.

    Returns the long coefficient table (non-converged fits marked ``valid=False``) and one row per model
    saying whether the interaction's sign and significance agree across the three specifications.
    """
    specs = {"ppl": ("ppl", False), "log_ppl": ("log_ppl", False), "log_ppl+tokens": ("log_ppl", True)}
    rows, agree = [], []
    for model, g in scores.groupby("model", sort=False):
        verdicts = {}
        for spec, (outcome, cov) in specs.items():
            table, info = fit_lmm(g, outcome, cov)
            if table.empty:
                rows.append({"model": model, "spec": spec, "valid": False, "note": info["note"]})
                continue
            for r in table.to_dict("records"):
                rows.append({"model": model, "spec": spec, **r, "valid": info["converged"], "note": info["note"]})
            inter = table[table.term == "context × form"].iloc[0]
            verdicts[spec] = (np.sign(inter["coef"]), inter["p"] < 0.05) if info["converged"] else None
        valid = [v for v in verdicts.values() if v is not None]
        agree.append({"model": model, "specs_converged": len(valid),
                      "interaction_conclusions_agree": bool(valid) and len(set(valid)) == 1,
                      **{f"interaction_{k}": (None if v is None else f"{'negative' if v[0] < 0 else 'positive'}"
                                                f"{', p < .05' if v[1] else ', n.s.'}") for k, v in verdicts.items()}})
    return pd.DataFrame(rows), pd.DataFrame(agree)


def seed_table(coefs: pd.DataFrame, spec: str = "ppl") -> pd.DataFrame:
    """Seed 003's Table-1 shape: per model the three effects with coefficient (stars), p and 95% CI."""
    t = coefs[(coefs["spec"] == spec) & coefs["term"].isin(["context", "form", "context × form"])].copy()
    t["cell"] = [f"{c:.3f}{s}" if v else f"({c:.3f}, not converged)" for c, s, v in zip(t["coef"], t["stars"], t["valid"])]
    t["ci"] = [f"[{lo:.3f}, {hi:.3f}]" for lo, hi in zip(t["ci_low"], t["ci_high"])]
    return t[["model", "term", "cell", "p", "ci", "valid"]].reset_index(drop=True)


def predicted_cells(coefs: pd.DataFrame, spec: str = "ppl") -> pd.DataFrame:
    """Model-predicted outcome for the four cells (fixed effects only) from ``lmm_tables``' coefficients."""
    rows = []
    for model, g in coefs[coefs["spec"] == spec].groupby("model", sort=False):
        if "term" not in g or g["term"].isna().all():
            continue
        b = dict(zip(g["term"], g["coef"]))
        for context in (0.0, 1.0):
            for form in (0.0, 1.0):
                y = b["Intercept"] + b["context"] * context + b["form"] * form + b["context × form"] * context * form
                rows.append({"model": model, "context": "consistent" if context else "inconsistent",
                             "form": "affirmative" if form else "negated", "predicted": y,
                             "converged": bool(g["valid"].all())})
    return pd.DataFrame(rows)


def interaction_plot(pred: pd.DataFrame):
    """Predicted perplexity by context, lines by form (solid affirmative, dashed negated), one panel per model."""
    import matplotlib.pyplot as plt

    models = list(pred["model"].unique())
    fig, axes = plt.subplots(1, len(models), figsize=(3.6 * len(models), 3.2), squeeze=False)
    for ax, model in zip(axes[0], models):
        d = pred[pred.model == model]
        for form, style in (("affirmative", "-"), ("negated", "--")):
            f = d[d.form == form].set_index("context").loc[["consistent", "inconsistent"]]
            ax.plot([0, 1], f["predicted"], style, marker="o", label=form)
        ax.set_xticks([0, 1], ["consistent", "inconsistent"])
        ax.set_title(model + ("" if d["converged"].all() else " (not converged)"), fontsize=9)
        ax.set_ylabel("predicted perplexity")
    axes[0][0].legend(frameon=False)
    fig.tight_layout()
    return fig


def cell_means(scores: pd.DataFrame) -> pd.DataFrame:
    """Mean and median perplexity per model and cell (SA, SN, NA, NN)."""
    return (scores.groupby(["model", "condition", "context", "form"], sort=False)["ppl"]
                  .agg(mean="mean", median="median", n="size").reset_index())


def analyze_negation(run_dir) -> dict:
    """All negation tables and the interaction figure for a run; writes them and summary.json; returns the tables."""
    import matplotlib.pyplot as plt

    from .plots import save

    run = resolve(run_dir)
    scores = load_negation_scores(run)
    coefs, agreement = lmm_tables(scores)
    tables = {"lmm_coefficients": coefs, "spec_agreement": agreement, "table1_ppl": seed_table(coefs, "ppl"),
              "table1_log_ppl": seed_table(coefs, "log_ppl"), "cell_means": cell_means(scores),
              "token_length": (scores.drop_duplicates(["model", "item_id", "context"])
                               .groupby("model")["token_diff_neg_minus_aff"]
                               .agg(mean_diff="mean", share_equal=lambda s: float((s == 0).mean())).reset_index())}
    for name, t in tables.items():
        artifacts.write_table(t, run / "tables" / name, latex=name.startswith("table1"), float_format="%.3g")
    pred = predicted_cells(coefs)
    tables["predicted"] = pred
    if not pred.empty:
        fig = interaction_plot(pred)
        save(fig, run / "figures" / "interaction")
        plt.close(fig)
    summary = {}
    for model, g in coefs.groupby("model", sort=False):
        summary[model] = {}
        for spec, s in g.groupby("spec", sort=False):
            inter = s[s["term"] == "context × form"]
            summary[model][spec] = None if inter.empty else {
                "interaction_coef": float(inter["coef"].iloc[0]), "p": float(inter["p"].iloc[0]),
                "ci95": [float(inter["ci_low"].iloc[0]), float(inter["ci_high"].iloc[0])],
                "converged": bool(inter["valid"].iloc[0])}
    for r in agreement.itertuples(index=False):
        summary[r.model]["conclusions_agree"] = bool(r.interaction_conclusions_agree)
    artifacts.write_json(summary, run / "summary.json")
    tables["summary"] = summary
    return tables
