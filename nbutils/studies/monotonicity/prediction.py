"""Would the gap hold for a prompt nobody tried? A prediction interval for an unseen prompt variant.

The heterogeneity test (``robustness.py``) asks whether the gap differs across the variants that were tried. This
module answers the reader's question instead: the gap a new template, phrase or answer-word pair of the same family
would show. Per model × condition × varied axis, and over the cells of every varied axis crossed (``axis`` "all"), the
per-variant gaps (upward minus downward accuracy, as a proportion) are pooled in a random-effects meta-analysis
(``statsmodels.stats.meta_analysis.combine_effects``; between-variant variance τ² by Paule–Mandel, the
DerSimonian–Laird estimate beside it as a cross-check), each gap weighted by its variance (at Agresti–Caffo
proportions). The 95% prediction interval for a new variant's gap is the pooled gap ± √(t_{k−1}²·SE_HK² + b²·τ²_q):
the pooled gap's own 95% CI (t_{k−1} times its Hartung–Knapp SE, so the interval never claims a new variant surer than
the pooled gap) widened by the spread of a new variant's deviation, with τ²_q the upper limit of the one-sided
Q-profile confidence interval for τ² at level q (Viechtbauer, "Confidence intervals for the amount of heterogeneity in
meta-analysis"). The constants (q, b) depend only on the number of variants k (``constants``): chosen so that in
normal theory the worst coverage over every between-variant spread is as close to 95% as possible
(``benchmarks/prediction_limits.py``). Its coverage of a new variant's true gap is measured in
``benchmarks/results/calibration_prediction.json`` beside the confidence-distribution interval of Nagashima, Noma and
Furukawa and the Hartung–Knapp and Higgins–Thompson–Spiegelhalter intervals (docs/statistics.md gives the table)
and quoted in ``COVERAGE``; with 24 variants no interval never narrower than the pooled gap's own CI can hold 90–97%
at every spread with room for Monte-Carlo error (``benchmarks/prediction_limits.py``), and this one over-covers where
the variants agree. Variants whose gaps agree exactly take the pooled gap's SE from their own sampling error
(the modified Hartung–Knapp SE), never a zero-width interval; an interval over every gap there can be (−100 to 100
points) is said to say nothing. Fewer than 3 variants: no interval is given. Nor for the crossed cells (``axis``
"all"): they share their templates and phrases, and taken as independent variants they give an interval that falls
short. The
specification curve (``figures/specification_curve.png``) draws every crossed cell ordered by its gap.
"""
from __future__ import annotations

import json
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

from ...results import fmt_num
from ...stats import claim, record

MIN_VARIANTS = 3
WHOLE = 0.005  # an interval within half a point of both ends of [−1, 1] spans every gap there can be
AGREE_NOTE = ("the variants' gaps agree exactly, so the spread between them gives the pooled gap no SE; it is taken "
              "from their own sampling error instead (the modified Hartung–Knapp SE)")
LEVEL = 0.95
REPORTED = "minimax_ci"
METHODS = (REPORTED, "cd", "hk_pm_adhoc", "hk_pm", "hts_pm")  # the reported construction first; the others beside it
ALL = "all"  # the axis of the crossed cells of every varied axis
NAMES = {"template": ("template", "templates"), "phrase": ("phrase", "phrases"),
         "answer_words": ("answer-word pair", "answer-word pairs"), ALL: ("combination", "combinations")}
COLUMNS = ["model", "condition", "axis", "n_variants", "pooled_gap", "pooled_se", "tau2", "tau2_dl", "pi_low",
           "pi_high", "pi_df", "gap_min", "gap_max", "share_same_sign", "valid", "note"]
CONDITIONS = {"concept_learning": "concept learning", "explicit": "the concept stated"}
# the reported interval's coverage of a new variant's true gap in benchmarks/results/calibration_prediction.json
# (lowest and highest over the cells with 3–4 variants, and with 24 independent variants; and over the crossed
# template × phrase × answer-word cells, where no interval is given); a test checks them
COVERAGE = {"variants": (0.925, 0.975), "many": (0.9225, 0.9825), "crossed_axes": (0.8725, 0.985)}


CROSSED_NOTE = ("the combinations share their templates and phrases, so they are not independent variants: an interval "
                "that takes them as such held a new combination's gap as little as "
                f"{100 * COVERAGE['crossed_axes'][0]:.1f}% of the time in simulation when the spread came from the "
                "templates and phrases; the intervals per axis stand instead")


def effects(n_up, k_up, n_down, k_down) -> tuple[np.ndarray, np.ndarray]:
    """Per-variant gaps (upward minus downward accuracy) and their variances, each arm's p(1 − p)/n taken at the
    Agresti–Caffo proportion (one success and one failure added: finite at 0% and 100%)."""
    n_up, k_up, n_down, k_down = (np.asarray(x, dtype=float) for x in (n_up, k_up, n_down, k_down))
    gap = k_up / n_up - k_down / n_down
    pu, pd_ = (k_up + 1) / (n_up + 2), (k_down + 1) / (n_down + 2)
    return gap, pu * (1 - pu) / n_up + pd_ * (1 - pd_) / n_down


GRID = np.concatenate([[0.0], np.geomspace(1e-6, 4.0, 600)])  # τ² values the Q-profile is read on
DRAWS = 4000  # draws from the predictive distribution (a fixed seed: the same data give the same interval)


def q_profile(gap, var) -> np.ndarray:
    """The generalised Q statistic Σ w_i(τ²)(y_i − μ̂(τ²))², w_i = 1/(v_i + τ²), on ``GRID`` (held falling in τ²
    against rounding)."""
    w = 1 / (var[None, :] + GRID[:, None])
    mu = (w * gap).sum(1) / w.sum(1)
    return np.minimum.accumulate((w * (gap[None, :] - mu[:, None]) ** 2).sum(1))


def tau2_at(q: np.ndarray, c) -> np.ndarray:
    """τ² solving Q(τ²) = c for each c (0 where even Q(0) falls short of c), read off ``GRID``."""
    c = np.asarray(c, dtype=float)
    return np.where(c >= q[0], 0.0, np.interp(c, q[::-1], GRID[::-1]))


def tau2_draws(gap, var, rng: np.random.Generator, size: int = DRAWS) -> np.ndarray:
    """Draws from the Q-profile confidence distribution of τ² (Viechtbauer, "Confidence intervals for the amount of
    heterogeneity in meta-analysis"): the generalised Q statistic (``q_profile``) is χ²_{k−1} at the true τ² and falls
    as τ² grows, so τ² solving Q(τ²) = χ²_{k−1} quantile at U ~ U(0, 1) is a draw (τ² = 0 where even Q(0) falls
    short: with probability the homogeneity test's p). The draw where the quantile is k − 1 is the Paule–Mandel
    estimate. Read off a grid of τ² from 0 to 4 (a gap of accuracies has a variance below 1)."""
    gap, var = np.asarray(gap, dtype=float), np.asarray(var, dtype=float)
    return tau2_at(q_profile(gap, var), sps.chi2.isf(rng.random(size), len(gap) - 1))


K_TABLE = 100  # the constants are tabulated for 3 to K_TABLE variants


@lru_cache(maxsize=1)
def _constants() -> dict:
    return json.loads((Path(__file__).parent / "data" / "prediction_constants.json").read_text())["k"]


def constants(k: int) -> tuple[float, float]:
    """The reported interval's (q, b) for k variants, from ``data/prediction_constants.json``
    (``benchmarks/prediction_limits.py --constants`` makes it): q the level of the one-sided Q-profile interval whose
    upper limit is plugged in for τ², b the factor on it, chosen per k so that the interval's worst coverage of a new
    variant's true gap in normal theory, over every ratio of τ² to the within-variance, is nearest 95% (94.2–95.8%
    with 3 variants, 92.5–97.5% with 24, 91.7–98.3% with 100). Above 100 variants the constants for 100 stand (in
    normal theory 90.5–98.5% at 300 variants and 88.9–98.6% at 1000: the band widens slowly, and prompt families of
    that size are not in the catalogue)."""
    if k < MIN_VARIANTS:
        raise ValueError(f"k={k}: the prediction interval needs at least {MIN_VARIANTS} variants")
    row = _constants()[str(min(k, K_TABLE))]
    return row["q"], row["b"]


def predict(gap, var, method: str = REPORTED, level: float = LEVEL, seed: int = 0) -> dict:
    """The random-effects pooled gap, τ² and the prediction interval for a new variant's gap. ``method``:
    ``minimax_ci`` (the reported one: μ̂ ± √(t_{k−1}²·SE_HK² + b²·τ²_q), μ̂ and its Hartung–Knapp SE the Paule–Mandel
    fit's, so it holds the pooled gap's own 95% CI; τ²_q the upper limit of the one-sided Q-profile confidence
    interval for τ² at level q, (q, b) per k from ``constants``; 95% only), ``cd`` (the predictive distribution
    sampled as Nagashima, Noma and Furukawa, "Prediction intervals for random-effects meta-analysis: a confidence
    distribution approach": τ² drawn from its Q-profile confidence distribution (``tau2_draws``), then the new gap
    μ̂(τ²) + z·τ − t_{k−1}·SE_HK(τ²); the interval is the draws' 2.5% and 97.5% quantiles), ``hk_pm_adhoc`` (Paule–Mandel τ², Hartung–Knapp SE with its
    scale held at ≥ 1 and t_{k−1}), ``hk_pm`` (the same without the correction), ``hts_pm`` / ``hts_dl``
    (Higgins–Thompson–Spiegelhalter: model SE, t_{k−2}, with the Paule–Mandel or DerSimonian–Laird τ²). μ̂, its SE
    and τ² are the Paule–Mandel fit's (the DerSimonian–Laird τ² beside), whatever the interval."""
    from statsmodels.stats.meta_analysis import combine_effects

    gap, var = np.asarray(gap, dtype=float), np.asarray(var, dtype=float)
    k = len(gap)
    out = {"k": k, "mu": np.nan, "se": np.nan, "tau2": np.nan, "tau2_dl": np.nan, "lo": np.nan, "hi": np.nan,
           "df": np.nan, "valid": False, "note": ""}
    if method == REPORTED and level != LEVEL:
        raise ValueError(f"level={level}: the {REPORTED} interval's constants are for level {LEVEL} only")
    if k < MIN_VARIANTS:
        out["note"] = f"{k} variant{'s' if k != 1 else ''}: a prediction interval needs at least {MIN_VARIANTS}"
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dl = combine_effects(gap, var, method_re="dl")
        res = dl if method == "hts_dl" else combine_effects(gap, var, method_re="pm")
    tau2 = max(float(res.tau2), 0.0)  # DL's moment estimate can be negative: truncated at 0, weights refitted
    w = 1 / (var + tau2)
    mu = float((w * gap).sum() / w.sum())
    hk_scale = (w * (gap - mu) ** 2).sum() / (k - 1)  # Hartung–Knapp: the SE's scale estimated from the spread
    se, df = float(np.sqrt(hk_scale / w.sum())), k - 1
    if method == REPORTED and hk_scale <= 0:
        # variants that agree exactly leave no spread to scale the SE by, and their gaps still carry their own
        # sampling error: the scale is taken as 1 (the modified Hartung–Knapp SE), never a zero-width interval
        se, out["note"] = float(np.sqrt(1 / w.sum())), AGREE_NOTE
    if method == REPORTED:
        q, b = constants(k)
        t2 = float(tau2_at(q_profile(gap, var), sps.chi2.ppf(1 - q, k - 1)))
        half = np.sqrt((sps.t.ppf(0.5 + level / 2, k - 1) * se) ** 2 + b ** 2 * t2)
        lo, hi = mu - half, mu + half
    elif method == "cd":
        rng = np.random.default_rng(seed)
        t2 = tau2_draws(gap, var, rng)
        wb = 1 / (var[None, :] + t2[:, None])
        mb = (wb * gap).sum(1) / wb.sum(1)
        vb = (wb * (gap[None, :] - mb[:, None]) ** 2).sum(1) / (k - 1) / wb.sum(1)
        new = mb + rng.standard_normal(len(t2)) * np.sqrt(t2) - rng.standard_t(k - 1, len(t2)) * np.sqrt(vb)
        lo, hi = np.quantile(new, [0.5 - level / 2, 0.5 + level / 2])
    else:
        if method in ("hk_pm", "hk_pm_adhoc"):
            se = float(np.sqrt((max(hk_scale, 1.0) if method == "hk_pm_adhoc" else hk_scale) / w.sum()))
        else:
            se, df = float(np.sqrt(1 / w.sum())), k - 2
        half = sps.t.ppf(0.5 + level / 2, df) * np.sqrt(tau2 + se ** 2)
        lo, hi = mu - half, mu + half
    # a gap of accuracies lies in [−1, 1]: the interval is cut there (which cannot lower its coverage)
    out.update(mu=mu, se=se, tau2=tau2, tau2_dl=max(float(dl.tau2), 0.0), lo=max(float(lo), -1.0),
               hi=min(float(hi), 1.0), df=df, valid=True)
    return out


def cells(scores: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    """Per model × condition × cell of ``axes`` (one axis: its variants; several: their crossed cells): prompts,
    correct answers upward and downward, the gap and its variance (``effects``). Cells lacking a direction are left
    out (no gap)."""
    up = scores["monotonicity"] == "upward"
    d = scores.assign(_up=up, _cu=up & scores["correct"].astype(bool), _cd=~up & scores["correct"].astype(bool))
    g = d.groupby(["model", "condition", *axes], sort=False)
    t = pd.DataFrame({"n_up": g["_up"].sum(), "n": g.size(), "k_up": g["_cu"].sum(), "k_down": g["_cd"].sum()})
    t["n_down"] = t["n"] - t["n_up"]
    t = t[(t["n_up"] > 0) & (t["n_down"] > 0)].reset_index()
    t["gap"], t["var"] = effects(t["n_up"], t["k_up"], t["n_down"], t["k_down"])
    return t


def table(scores: pd.DataFrame, varied: list[str]) -> pd.DataFrame:
    """One row per model × condition × varied axis (and "all", the crossed cells, when two or more axes vary):
    the pooled gap, τ², the 95% prediction interval, the range of the variants' gaps and the share of them with
    the pooled gap's sign. ``valid`` False (and ``note``) where fewer than 3 variants allow no interval."""
    rows = []
    for axis, axes in [(a, [a]) for a in varied] + ([(ALL, varied)] if len(varied) > 1 else []):
        c = cells(scores, axes)
        for (model, condition), g in c.groupby(["model", "condition"], sort=False):
            p = predict(g["gap"], g["var"])
            if axis == ALL and p["valid"]:  # crossed cells share their templates and phrases: no interval
                p.update(lo=np.nan, hi=np.nan, valid=False, note=CROSSED_NOTE)
            sign = np.sign(p["mu"]) if np.isfinite(p["mu"]) else np.sign(g["gap"].mean())
            rows.append({"model": model, "condition": condition, "axis": axis, "n_variants": len(g),
                         "pooled_gap": p["mu"], "pooled_se": p["se"], "tau2": p["tau2"], "tau2_dl": p["tau2_dl"],
                         "pi_low": p["lo"], "pi_high": p["hi"], "pi_df": p["df"], "gap_min": g["gap"].min(),
                         "gap_max": g["gap"].max(), "share_same_sign": float((np.sign(g["gap"]) == sign).mean())
                         if sign != 0 else np.nan, "valid": p["valid"], "note": p["note"]})
    return pd.DataFrame(rows, columns=COLUMNS)


def with_intervals(variant_table: pd.DataFrame, pred: pd.DataFrame) -> pd.DataFrame:
    """``tables/robustness.csv``: the per-variant rows with their axis's pooled gap and prediction interval beside."""
    cols = ["model", "condition", "axis", "pooled_gap", "pi_low", "pi_high", "tau2"]
    return variant_table.merge(pred[cols].rename(columns={"pooled_gap": "re_pooled_gap", "tau2": "re_tau2"}),
                               on=["model", "condition", "axis"], how="left")


def model_blocks(models: dict, pred: pd.DataFrame) -> None:
    """Each model's block of ``summary.json`` gets ``prediction_interval``: per condition and axis the pooled gap, the
    95% prediction interval for a new variant, the number of variants and ``valid`` (a run without variants: none)."""
    from ...artifacts import json_clean

    for r in pred.itertuples(index=False):
        block = models.setdefault(r.model, {}).setdefault("prediction_interval", {}).setdefault(r.condition, {})
        block[r.axis] = json_clean({"pooled_gap": r.pooled_gap, "pi_low": r.pi_low, "pi_high": r.pi_high,
                                    "n_variants": int(r.n_variants), "valid": bool(r.valid)})


def prediction_claim(axis: str) -> dict:
    many = NAMES.get(axis, (axis, axis))[1]
    return claim(f"the upward vs downward gap a new one of these {many} would show", "", "",
                 "", scale="points", sided="none", symbol="gap under a new variant")


def records(pred: pd.DataFrame) -> list[dict]:
    """``test: prediction_interval`` records (``term`` the axis, or "all"): estimate the random-effects pooled gap,
    ``ci_low``/``ci_high`` the 95% prediction interval for a new variant's gap (proportions), ``tau2``, the range of
    the variants' gaps, ``share_same_sign``; no p (an interval, not a test)."""
    from ...artifacts import json_clean

    out = []
    for r in pred.itertuples(index=False):
        out.append(record("prediction_interval", r.axis, r.pooled_gap, se=r.pooled_se, ci_low=r.pi_low,
                          ci_high=r.pi_high, p=None, valid=bool(r.valid), condition=r.condition, model=r.model,
                          n_variants=int(r.n_variants), tau2=r.tau2, tau2_dl=r.tau2_dl, df=r.pi_df,
                          gap_min=r.gap_min, gap_max=r.gap_max, share_same_sign=r.share_same_sign, level=LEVEL,
                          method="random-effects (Paule–Mandel τ², Hartung–Knapp SE); prediction interval pooled gap "
                                 "± √(t(k−1)²·SE² + b²·τ²_q), τ²_q an upper Q-profile confidence limit, (q, b) per "
                                 "number of variants for 95% worst-case coverage",
                          hypothesis=prediction_claim(r.axis),
                          note=r.note or "the gap a new variant of the same family would show; an interval, no test"))
    return json_clean(out)


def _pts(x: float) -> str:
    return fmt_num(100 * x, 0).replace("-", "−")


def pooled_ci(r: dict) -> tuple[float, float]:
    """The pooled gap's own 95% CI from a record: estimate ± t_df · SE (Hartung–Knapp), cut at ±100 points as the
    prediction interval is (a gap of accuracies lies in [−1, 1])."""
    half = sps.t.ppf(0.975, r["df"]) * r["se"]
    return max(r["estimate"] - half, -1.0), min(r["estimate"] + half, 1.0)


def _show(n: int) -> str:
    return "shows" if n == 1 else "show"


def why_zero(r: dict, many: str) -> str:
    """Why the prediction interval of record ``r`` includes or excludes 0, from its numbers: the pooled gap's own CI,
    how many variants show the other sign (or none), and the spread between them (τ)."""
    lo, hi = pooled_ci(r)
    k, share = r["n_variants"], r.get("share_same_sign")
    other = k - round(share * k) if share is not None else k
    side = "includes" if lo <= 0 <= hi else "excludes"
    ci = f"the pooled gap's own 95% CI, {_pts(lo)} to {_pts(hi)} points, {side} 0"
    tau = f"the spread between the {many} (τ = {_pts(np.sqrt(r['tau2']))} points)"
    if not r["ci_low"] <= 0 <= r["ci_high"]:
        return f"{ci}, and {tau} does not reach 0"  # the interval holds the CI: it excludes 0 only if the CI does
    if lo <= 0 <= hi:
        return ci + (f", and {other} of the {k} {many} {_show(other)} the other sign or none" if other else "")
    if other:
        return f"{ci}, but {other} of the {k} {many} {_show(other)} the other sign or none"
    return f"{ci}, but {tau}, estimated from {k} of them, leaves room for a new one of the other sign"


def sentences(summary: dict) -> list[str]:
    """One line per prediction-interval record: the range over the variants tried, the interval for a new one (or
    that none can be given), the share with the pooled gap's sign, and what the heterogeneity test found."""
    recs = summary.get("records", [])
    het = {(r.get("model"), r.get("condition"), r.get("term")): r for r in recs if r.get("test") == "heterogeneity"}
    lines = []
    for r in recs:
        if r.get("test") != "prediction_interval":
            continue
        one, many = NAMES.get(r["term"], (r["term"], r["term"]))
        k = r.get("n_variants")
        who = f"{r.get('model')}, {CONDITIONS.get(r.get('condition'), r.get('condition'))}"
        tried = (f"across the {k} {many if k != 1 else one} tried, the gap was {_pts(r['gap_min'])} to "
                 f"{_pts(r['gap_max'])} points")
        if not r.get("valid"):
            lines.append(f"{who}: {tried}; no prediction interval for a new {one} can be given ({r.get('note')}).")
            continue
        sign = "positive" if r["estimate"] > 0 else "negative" if r["estimate"] < 0 else "zero"
        share = r.get("share_same_sign")
        same = (f"{round(share * k)} of {k} {many} show a gap with the pooled gap's sign ({sign}, "
                f"{_pts(r['estimate'])} points)") if share is not None else "the pooled gap is zero"
        h = het.get((r.get("model"), r.get("condition"), r["term"]))
        found = ("the heterogeneity test was not run on the crossed combinations" if h is None else
                 "the heterogeneity test could not be estimated" if not h.get("valid") or h.get("p") is None else
                 f"the heterogeneity test {'found' if h['p'] < 0.05 else 'found no'} differences "
                 f"(p {'< .001' if h['p'] < 0.001 else '= ' + fmt_num(h['p'], 3).lstrip('0')})")
        zero = f"{'includes' if r['ci_low'] <= 0 <= r['ci_high'] else 'excludes'} 0: {why_zero(r, many)}"
        lo, hi = COVERAGE["many" if k > 4 else "variants"]
        # with many variants the highest coverage is where they agree (an interval that holds the pooled gap's CI
        # cannot avoid it); with 3–4 it has no such place
        cal = (f"in simulation it held a new {one}'s gap {100 * lo:.1f}–{100 * hi:.1f}% of the time"
               + (f", the most when the {many} agree" if k > 4 else ""))
        if r["ci_low"] <= -1 + WHOLE and r["ci_high"] >= 1 - WHOLE:  # every gap there can be: no finding
            lines.append(f"{who}: {tried}; the 95% prediction interval for a new {one} spans every gap there can be "
                         f"({_pts(r['ci_low'])} to {_pts(r['ci_high'])} points), so {k} {many} of this size say "
                         f"nothing about the gap a new one would show ({cal}); {same}; {found}.")
            continue
        lines.append(f"{who}: {tried}; a new {one} of this kind would show a gap between {_pts(r['ci_low'])} and "
                     f"{_pts(r['ci_high'])} points (95% prediction interval, which {zero}; {cal}); {same}; {found}.")
    return lines


def specifications(scores: pd.DataFrame, varied: list[str]) -> pd.DataFrame:
    """The specifications the curve draws: the crossed cells of every varied axis (each one prompt wording), per
    model × condition, with the gap and its 95% Wald CI (variance at Agresti–Caffo proportions), cut at ±1."""
    c = cells(scores, varied)
    half = sps.norm.ppf(0.975) * np.sqrt(c["var"])
    return c.assign(ci_low=(c["gap"] - half).clip(lower=-1), ci_high=(c["gap"] + half).clip(upper=1))


def curve(spec: pd.DataFrame, pred: pd.DataFrame, varied: list[str]):
    """The specification curve: per model × condition (a column each), every specification ordered by its gap with
    its CI, the pooled gap (solid) and the 95% prediction interval (shaded) across it — for a new specification where
    one axis varies, else for a new variant of the axis with the most variants (the crossed cells get none); below, a
    panel marking the template, phrase and answer words each specification used. Readable from 4 to 48
    specifications."""
    import matplotlib.pyplot as plt

    units = list(spec.groupby(["model", "condition"], sort=False).groups)
    levels = [(a, sorted(spec[a].astype(str).unique())) for a in varied]
    nrow = sum(len(v) for _, v in levels)
    nmax = spec.groupby(["model", "condition"]).size().max()
    width = max(3.2, 0.16 * nmax + 1.6)
    fig, grid = plt.subplots(2, len(units), figsize=(width * len(units) + 1.2, 3.2 + 0.17 * nrow + 0.6),
                             gridspec_kw={"height_ratios": [3.2, 0.17 * nrow + 0.3]}, squeeze=False, sharex="col")
    axis_key = ALL if len(varied) > 1 else varied[0]
    for j, (model, condition) in enumerate(units):
        d = spec[(spec["model"] == model) & (spec["condition"] == condition)].sort_values("gap", kind="stable")
        x = np.arange(len(d))
        top, low = grid[0][j], grid[1][j]
        p = pred[(pred["model"] == model) & (pred["condition"] == condition) & pred["valid"].astype(bool)]
        # the crossed cells' own interval where there is one, else that of the axis with the most variants
        p = p[p["axis"] == axis_key] if (p["axis"] == axis_key).any() else p.sort_values("n_variants").tail(1)
        if len(p):
            what = "specification" if p["axis"].iloc[0] == axis_key else NAMES[p["axis"].iloc[0]][0]
            top.axhspan(100 * p["pi_low"].iloc[0], 100 * p["pi_high"].iloc[0], color="#1f77b4", alpha=0.12,
                        label=f"95% prediction interval, new {what}")
            top.axhline(100 * p["pooled_gap"].iloc[0], color="#1f77b4", lw=1.2, label="pooled gap (random effects)")
        top.errorbar(x, 100 * d["gap"], yerr=[100 * (d["gap"] - d["ci_low"]), 100 * (d["ci_high"] - d["gap"])],
                     fmt="o", ms=3, lw=0.8, capsize=0, color="black", label="specification gap, 95% CI")
        top.axhline(0, color="grey", lw=0.8)
        top.set_ylim(-105, 105)
        top.set_title(f"{model}\n{CONDITIONS.get(condition, condition)}", fontsize=8)
        top.set_ylabel("upward − downward accuracy (pp)" if j == 0 else "", fontsize=8)
        row, ticks = 0, []
        for axis, names in levels:
            for name in names:
                used = (d[axis].astype(str) == name).to_numpy()
                low.scatter(x[used], np.full(used.sum(), row), s=9, marker="s", color="black")
                low.scatter(x[~used], np.full((~used).sum(), row), s=4, marker="s", color="#dddddd")
                ticks.append(f"{NAMES[axis][0]}: {name}")
                row += 1
        low.set_yticks(range(row), ticks if j == 0 else [""] * row, fontsize=7)
        low.set_ylim(row - 0.5, -0.5)
        low.set_xticks(x, [""] * len(x))
        low.set_xlabel(f"{len(d)} specifications, ordered by gap", fontsize=8)
    handles, labels = grid[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=3, bbox_to_anchor=(0.5, 0.0), frameon=False, fontsize=7)
    fig.tight_layout()
    return fig
