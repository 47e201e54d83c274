"""Statistics of a custom prompt set, per model and group: accuracy against chance, response bias, d′ and c, group
contrasts, a clustered model when items repeat across groups, margins by gold answer.

Inference comes from scipy and statsmodels; intervals and corrections are the suite's shared ones (``nbutils.stats``).
Every table is long (one row per model × group × …) so it can be filtered, plotted and written as CSV alike.
"""
from __future__ import annotations

import itertools
import json
import warnings

import numpy as np
import pandas as pd
from scipy import stats as sps

from ...artifacts import json_clean
from ...stats import claim, holm, record, wilson
from ..common import claims

ALL = "(all)"  # the pooled row beside the groups


def _mean(g: pd.DataFrame, column: str) -> float:
    """The mean of a column, NaN where the scores lack it (an imported log records no per-token normalisation)."""
    return float(g[column].mean()) if column in g else np.nan


def _positions(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Position (0-based) of each row's chosen and gold option in its own option list (chosen: -1 where the model
    chose none, as an imported Inspect log records when its scorer read no answer)."""
    scored = df["scored"].map(json.loads)
    chosen = np.array([s.index(c) if c in s else -1 for s, c in zip(scored, df["choice"])])
    gold = np.array([s.index(a) for s, a in zip(scored, df["answer"])])
    return chosen, gold


def fixed_options(df: pd.DataFrame) -> list[str] | None:
    """The option set shared by every row (as scored), or None when rows have their own."""
    sets = df["scored"].unique()
    return json.loads(sets[0]) if len(sets) == 1 else None


def is_yes_no(df: pd.DataFrame) -> bool:
    """True when every row is answered Yes or No."""
    return fixed_options(df) == ["Yes", "No"]


def _by_group(df: pd.DataFrame):
    """(model, group, rows) per group, then each model's rows pooled as group ``(all)`` when there are several groups."""
    for model, m in df.groupby("model", sort=False):
        groups = list(m.groupby("group", sort=False))
        for group, g in groups:
            yield model, group, g
        if len(groups) > 1:
            yield model, ALL, m


def accuracy_by_group(df: pd.DataFrame) -> pd.DataFrame:
    """Accuracy per model × group with its 95% Wilson interval and an exact two-sided binomial test against chance
    (1/k for k options); Holm over the groups of a model (the pooled row is not in the family). Accuracies of the
    per-token and per-character normalised choices stand beside the raw one."""
    rows = []
    for model, group, g in _by_group(df):
        n, k = len(g), int(g["correct"].sum())
        lo, hi = wilson(k, n)
        chance = float((1.0 / g["n_options"]).mean())
        rows.append({"model": model, "group": group, "n": n, "n_correct": k, "accuracy": k / n, "ci_low": lo,
                     "ci_high": hi, "chance": chance, "p_binom": sps.binomtest(k, n, chance).pvalue,
                     "acc_norm_token": _mean(g, "correct_norm_token"), "acc_norm_char": _mean(g, "correct_norm_char")})
    out = pd.DataFrame(rows)
    out["p_holm"] = np.nan
    for model, m in out.groupby("model", sort=False):
        fam = m.index[m["group"] != ALL]
        out.loc[fam, "p_holm"] = holm(out.loc[fam, "p_binom"].to_numpy())
    return out


def choice_distribution(df: pd.DataFrame) -> pd.DataFrame:
    """How often each option is chosen and how often it is the gold answer, per model × group. Options are named by
    their text when every row shares them, else by position (``option 1`` …): position bias."""
    chosen, gold = _positions(df)
    fixed = fixed_options(df)
    d = df.assign(_chosen=chosen, _gold=gold)
    rows = []
    for model, group, g in _by_group(d):
        k = int(g["n_options"].max())
        for j in range(k):
            nc, ng = int((g["_chosen"] == j).sum()), int((g["_gold"] == j).sum())
            lo, hi = wilson(nc, len(g))
            rows.append({"model": model, "group": group, "position": j + 1,
                         "option": fixed[j] if fixed else f"option {j + 1}", "n": len(g), "n_chosen": nc,
                         "share_chosen": nc / len(g), "ci_low": lo, "ci_high": hi, "n_gold": ng,
                         "share_gold": ng / len(g)})
    return pd.DataFrame(rows)


def response_bias(dist: pd.DataFrame) -> pd.DataFrame:
    """Does a model choose the options in the proportions they are correct? With two options an exact binomial test
    of choosing the first against its share of gold answers; with more a chi-square goodness-of-fit test of the
    choice counts against the gold counts (approximate when an expected count is below 5)."""
    rows = []
    for (model, group), g in dist.groupby(["model", "group"], sort=False):
        n, chose = int(g["n"].iloc[0]), int(g["n_chosen"].sum())  # fewer chose where a model chose no option
        top = g.loc[g["share_chosen"].idxmax()]
        row = {"model": model, "group": group, "n": n, "most_chosen": top["option"], "share_most_chosen": top["share_chosen"],
               "share_gold_of_most_chosen": top["share_gold"], "test": None, "statistic": np.nan, "p": np.nan, "note": ""}
        if chose < n:
            g = g.assign(n_chosen=g["n_chosen"], n_gold=g["n_gold"] * chose / n, share_gold=g["share_gold"])
            row["note"] = f"{n - chose} of {n} chose no option (left out of the test)"
        if chose == 0:
            row["note"] = "no answer chose an option: no bias test"
        elif len(g) == 2:
            first = g.iloc[0]
            row.update(test="binomial", statistic=first["n_chosen"] / chose,
                       p=sps.binomtest(int(first["n_chosen"]), chose, float(first["share_gold"])).pvalue
                       if 0 < first["share_gold"] < 1 else np.nan,
                       note="; ".join(filter(None, [f"share choosing {first['option']!r} vs its share of gold answers",
                                                    row["note"]])))
            if not 0 < first["share_gold"] < 1:
                row["note"] = "every gold answer is the same option: no bias test"
        elif (g["n_gold"] > 0).all():
            res = sps.chisquare(g["n_chosen"].to_numpy(float), g["n_gold"].to_numpy(float))
            row.update(test="chi2_gof", statistic=float(res.statistic), p=float(res.pvalue),
                       note="; ".join(filter(None, ["choice counts vs gold counts" + (
                           "; expected counts < 5: p approximate" if (g["n_gold"] < 5).any() else ""), row["note"]])))
        else:
            row["note"] = "an option is never the gold answer: no goodness-of-fit test"
        rows.append(row)
    out = pd.DataFrame(rows)
    if len(out):
        out["p_holm"] = np.nan
        for _, m in out.groupby("model", sort=False):
            fam = m.index[m["group"] != ALL]
            out.loc[fam, "p_holm"] = holm(out.loc[fam, "p"].to_numpy())
    return out


def signal_detection(df: pd.DataFrame) -> pd.DataFrame:
    """Two shared options (Yes/No): hit rate, false-alarm rate, d′ and criterion c per model × group, the first
    option (Yes) as the signal. Rates use the log-linear correction ((k + 0.5) / (n + 1)) so d′ stays finite;
    c < 0 is a bias towards the first option. Empty for other option sets."""
    fixed = fixed_options(df)
    if not fixed or len(fixed) != 2:
        return pd.DataFrame()
    sig = fixed[0]
    rows = []
    for model, group, g in _by_group(df):
        pos, neg = g[g["answer"] == sig], g[g["answer"] != sig]
        h = ((pos["choice"] == sig).sum() + 0.5) / (len(pos) + 1)
        f = ((neg["choice"] == sig).sum() + 0.5) / (len(neg) + 1)
        zh, zf = sps.norm.ppf(h), sps.norm.ppf(f)
        rows.append({"model": model, "group": group, "signal": sig, "n_signal": len(pos), "n_noise": len(neg),
                     "rate_signal_chosen": float((g["choice"] == sig).mean()),
                     "hit_rate": (pos["choice"] == sig).mean() if len(pos) else np.nan,
                     "false_alarm_rate": (neg["choice"] == sig).mean() if len(neg) else np.nan,
                     "d_prime": zh - zf, "criterion": -(zh + zf) / 2,
                     "note": "" if len(pos) and len(neg) else "one gold answer only: d′ and c are not identified"})
    return pd.DataFrame(rows)


def pairwise_contrasts(df: pd.DataFrame) -> pd.DataFrame:
    """Accuracy of every pair of groups within a model: difference (first − second) with a 95% CI and p, Holm over
    the pairs of a model. Groups holding the same items: exact McNemar test on the discordant items and a t interval
    of the paired differences. Otherwise: Fisher's exact test and Newcombe's interval for independent proportions."""
    from statsmodels.stats.proportion import confint_proportions_2indep

    rows = []
    for model, m in df.groupby("model", sort=False):
        groups = list(m["group"].drop_duplicates())
        for a, b in itertools.combinations(groups, 2):
            ga, gb = m[m["group"] == a], m[m["group"] == b]
            row = {"model": model, "group_a": a, "group_b": b, "n_a": len(ga), "n_b": len(gb),
                   "acc_a": ga["correct"].mean(), "acc_b": gb["correct"].mean()}
            row["diff"] = row["acc_a"] - row["acc_b"]
            if set(ga["item_id"]) == set(gb["item_id"]):
                pair = ga.set_index("item_id")["correct"].astype(bool).to_frame("a").join(
                    gb.set_index("item_id")["correct"].astype(bool).rename("b"))
                r = paired_accuracy(pair["a"], pair["b"])
                row.update(test="mcnemar_exact", paired=True, n_discordant=r["only_first"] + r["only_second"],
                           ci_low=r["ci_low"], ci_high=r["ci_high"], p=r["p"])
            else:
                ka, kb = int(ga["correct"].sum()), int(gb["correct"].sum())
                p = float(sps.fisher_exact([[ka, len(ga) - ka], [kb, len(gb) - kb]]).pvalue)
                lo, hi = confint_proportions_2indep(ka, len(ga), kb, len(gb), method="newcomb", compare="diff")
                row.update(test="fisher_exact", paired=False, n_discordant=np.nan, ci_low=float(lo), ci_high=float(hi), p=p)
            rows.append(row)
    out = pd.DataFrame(rows)
    if len(out):
        out["p_holm"] = out.groupby("model")["p"].transform(lambda s: holm(s.to_numpy()))
    return out


def paired_accuracy(x: pd.Series, y: pd.Series) -> dict:
    """Two right-or-wrong answers to the same items (aligned boolean series): ``diff`` (x's accuracy minus y's), its
    95% t interval of the paired differences, the exact McNemar p (statsmodels) on the 2×2 table, and the discordant
    counts (``only_first``: right in x alone; ``only_second``: in y alone)."""
    from statsmodels.stats.contingency_tables import mcnemar

    x, y = x.astype(bool), y.astype(bool)
    table = [[int((x & y).sum()), int((x & ~y).sum())], [int((~x & y).sum()), int((~x & ~y).sum())]]
    diffs = x.astype(float) - y.astype(float)
    if diffs.nunique() > 1:
        lo, hi = sps.ttest_1samp(diffs, 0.0).confidence_interval(0.95)
    else:
        lo = hi = float(diffs.iloc[0])
    return {"diff": float(diffs.mean()), "ci_low": float(lo), "ci_high": float(hi),
            "p": float(mcnemar(table, exact=True).pvalue), "only_first": table[0][1], "only_second": table[1][0],
            "both_right": table[0][0], "both_wrong": table[1][1]}


def items_repeat(df: pd.DataFrame) -> bool:
    """True when some item appears in more than one group (what makes a clustered model worth fitting)."""
    per_item = df.drop_duplicates(["item_id", "group"]).groupby("item_id").size()
    return df["group"].nunique() > 1 and bool((per_item > 1).any())


def clustered_model(df: pd.DataFrame) -> pd.DataFrame:
    """Items seen in several groups: ``correct ~ C(group)`` as a logistic GEE clustered by item, per model.

    Why not a Bayesian mixed GLM: statsmodels' BinomialBayesMixedGLM gives a variational posterior, not p-values.
    The GEE (exchangeable working correlation, cluster = item) estimates population-averaged log-odds of each group
    against the first, with a sandwich covariance that stays valid when the working correlation is wrong; the
    bias-reduced (Mancl–DeRouen) variant corrects the sandwich's downward bias with few items. Rows: each group term
    (coefficient, 95% CI, p) and the joint Wald test that all groups are equal. Beside it, Cochran's Q on the items
    seen in every group: a model-free chi-square test of the same null that survives separation.
    """
    import statsmodels.api as sm
    import statsmodels.formula.api as smf
    from statsmodels.stats.contingency_tables import cochrans_q

    rows = []
    for model, m in df.groupby("model", sort=False):
        groups = list(m["group"].drop_duplicates())
        d = m.assign(correct=m["correct"].astype(float), grp=pd.Categorical(m["group"], categories=groups))
        n_items = d["item_id"].nunique()
        base = {"model": model, "n": len(d), "n_items": n_items, "n_groups": len(groups), "reference": groups[0]}
        notes = []
        if n_items < 20:
            notes.append(f"{n_items} items: bias-reduced robust p-values, still approximate")
        wide = d.pivot_table(index="item_id", columns="group", values="correct", aggfunc="first").dropna()
        if len(wide) >= 2 and wide.to_numpy().std() > 0:
            q = cochrans_q(wide.to_numpy())
            rows.append({**base, "test": "cochran_q", "term": "all groups equal", "estimate": float(q.statistic),
                         "p": float(q.pvalue), "note": f"{len(wide)} items seen in every group"})
        if d["correct"].nunique() < 2:
            rows.append({**base, "test": "gee_logit", "term": None, "note": "every answer equally correct: no model fitted"})
            continue
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fit = smf.gee("correct ~ C(grp)", "item_id", d, family=sm.families.Binomial(),
                              cov_struct=sm.cov_struct.Exchangeable()).fit(cov_type="bias_reduced")
            if any("converge" in str(w.message).lower() for w in caught):
                notes.append("GEE did not converge (a group may be all correct or all wrong): read the coefficients with care")
            ci = fit.conf_int()
            terms = [t for t in fit.params.index if t.startswith("C(grp)")]
            for t in terms:
                rows.append({**base, "test": "gee_logit", "term": t.split("[T.", 1)[-1].rstrip("]") + f" vs {groups[0]}",
                             "estimate": float(fit.params[t]), "se": float(fit.bse[t]), "ci_low": float(ci.loc[t, 0]),
                             "ci_high": float(ci.loc[t, 1]), "odds_ratio": float(np.exp(fit.params[t])),
                             "p": float(fit.pvalues[t]), "note": "; ".join(notes)})
            if terms:
                r = np.zeros((len(terms), len(fit.params)))
                for i, t in enumerate(terms):
                    r[i, list(fit.params.index).index(t)] = 1.0
                w = fit.wald_test(r, scalar=True)
                rows.append({**base, "test": "gee_wald", "term": "all groups equal", "estimate": float(np.squeeze(w.statistic)),
                             "p": float(np.squeeze(w.pvalue)), "note": f"df={len(terms)}; " + "; ".join(notes)})
        except Exception as err:  # noqa: BLE001 - a failed fit is reported in the table, never a crash
            rows.append({**base, "test": "gee_logit", "term": None, "note": f"GEE failed: {type(err).__name__}: {err}"})
    return pd.DataFrame(rows)


def margin_by_answer(df: pd.DataFrame) -> pd.DataFrame:
    """The decision margin (two options: first − second, e.g. Yes − No; more: best − runner-up) per model × group ×
    gold answer: mean with a 95% t interval, sd, n."""
    rows = []
    for model, group, g in _by_group(df):
        for answer, a in g.groupby("answer", sort=True):
            x = a["margin"].to_numpy(float)
            lo, hi = (sps.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=sps.sem(x)) if len(x) > 1 and x.std() > 0
                      else (np.nan, np.nan))
            rows.append({"model": model, "group": group, "answer": answer, "n": len(x), "mean_margin": float(x.mean()),
                         "sd_margin": float(x.std(ddof=1)) if len(x) > 1 else np.nan, "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows)


def margin_separation(df: pd.DataFrame) -> pd.DataFrame:
    """Two shared options: does the margin rank gold-first items above gold-second ones? AUC (= Mann–Whitney U /
    n₁n₂; 0.5 is chance) with the exact or asymptotic two-sided Mann–Whitney p, per model × group."""
    fixed = fixed_options(df)
    if not fixed or len(fixed) != 2:
        return pd.DataFrame()
    rows = []
    for model, group, g in _by_group(df):
        pos, neg = g.loc[g["answer"] == fixed[0], "margin"], g.loc[g["answer"] == fixed[1], "margin"]
        if len(pos) and len(neg):
            res = sps.mannwhitneyu(pos, neg, alternative="two-sided")
            rows.append({"model": model, "group": group, "n_first": len(pos), "n_second": len(neg),
                         "auc": float(res.statistic) / (len(pos) * len(neg)), "p": float(res.pvalue)})
    return pd.DataFrame(rows)


def per_item(df: pd.DataFrame) -> pd.DataFrame:
    """One row per model × prompt: the gold answer, the choice (raw and normalised), correctness, margin, log-probs."""
    logp = [c for c in df.columns if c.startswith("logp_")]
    keep = ["model", "row_id", "item_id", "group", "row", "answer", "answer_text", "choice", "choice_norm_token",
            "choice_norm_char", "correct", "correct_norm_token", "correct_norm_char", "margin", *logp, "prompt"]
    return df[[c for c in keep if c in df.columns]].sort_values(["model", "row"]).reset_index(drop=True)


def group_record(model, test, group, estimate, ci_low=None, ci_high=None, p=None, note="", hypothesis=None) -> dict:
    """A record in the shared format (``nbutils.stats.record``; ``term`` is the group), plus ``model`` and ``group``;
    ``valid`` is False where the estimate is undefined; ``hypothesis`` (``nbutils.stats.claim``) for its words."""
    try:
        valid = bool(np.isfinite(float(estimate)))
    except (TypeError, ValueError):
        valid = False
    return record(test, group, estimate, ci_low=ci_low, ci_high=ci_high, p=p, valid=valid, note=note or "",
                  model=model, group=group, hypothesis=hypothesis)


def _group_words(group) -> str:
    return "all prompts" if group == ALL else f"group {group!r}"


def _bias_claim(group) -> dict:
    return claim(f"whether the choices of {_group_words(group)} follow the gold answers' shares", "", "",
                 f"the choices of {_group_words(group)} lean towards some options more than the gold answers do",
                 sided="none", symbol="statistic")


def _number_claim(what: str, symbol: str) -> dict:
    return claim(what, f"{what} is above 0", f"{what} is below 0", symbol=symbol)


def _contrast_claim(a, b) -> dict:
    return claim(f"accuracy of group {a!r} minus group {b!r}", f"group {a!r} was answered better than group {b!r}",
                 f"group {b!r} was answered better than group {a!r}", f"groups {a!r} and {b!r} differ in accuracy",
                 scale="points")


def _clustered_claim(test, term) -> dict:
    if test == "gee_logit" and isinstance(term, str) and " vs " in term:
        a, b = term.split(" vs ", 1)
        return claim(f"the odds of a correct answer in group {a!r} vs {b!r}, clustered by item",
                     f"group {a!r} was answered better than group {b!r}", f"group {b!r} was answered better than group {a!r}",
                     f"groups {a!r} and {b!r} differ in accuracy", scale="log_odds_ratio")
    return claim("whether every group is answered equally well", "", "", "the groups differ in accuracy", sided="none",
                 symbol="χ²" if test == "cochran_q" else "Wald χ²")


def _auc_claim(group) -> dict:
    return claim(f"how well the margin separates the answers of {_group_words(group)} (AUC)",
                 "the margin separates the answers better than chance", "the margin separates the answers worse than chance",
                 "the margin's separation differs from chance", null=0.5, symbol="AUC")


def summary_records(t: dict[str, pd.DataFrame]) -> list[dict]:
    """The headline results as flat records in the shared format (test, condition, term, estimate, se, ci_low, ci_high,
    p, valid, note) plus model and group."""
    out = []
    for r in t["accuracy"].itertuples(index=False):
        p = r.p_holm if r.group != ALL else r.p_binom
        out.append(group_record(r.model, "accuracy_vs_chance", r.group, r.accuracy, r.ci_low, r.ci_high, p,
                           f"n={r.n}, chance={r.chance:.3f}; Wilson CI, exact binomial"
                           + (", Holm over groups" if r.group != ALL else ""),
                           claims.accuracy_vs_chance(_group_words(r.group), r.chance)))
    for r in t["response_bias"].itertuples(index=False):
        if r.test:
            out.append(group_record(r.model, f"response_bias_{r.test}", r.group, r.statistic, None, None,
                               r.p_holm if r.group != ALL else r.p, r.note, _bias_claim(r.group)))
    for r in t.get("signal_detection", pd.DataFrame()).itertuples(index=False):
        out.append(group_record(r.model, "d_prime", r.group, r.d_prime, note=f"criterion c={r.criterion:.3f}; log-linear corrected" +
                           (f"; {r.note}" if r.note else ""), hypothesis=_number_claim(f"d′ of {_group_words(r.group)}", "d′")))
        out.append(group_record(r.model, "criterion_c", r.group, r.criterion, note="c < 0: bias towards " + repr(r.signal),
                                hypothesis=_number_claim(f"criterion c of {_group_words(r.group)}", "c")))
    for r in t["contrasts"].itertuples(index=False):
        out.append(group_record(r.model, "group_contrast", f"{r.group_a} − {r.group_b}", r.diff, r.ci_low, r.ci_high, r.p_holm,
                           f"{r.test}, Holm over pairs", _contrast_claim(r.group_a, r.group_b)))
    for r in t["clustered_model"].itertuples(index=False):
        out.append(group_record(r.model, r.test, r.term, getattr(r, "estimate", None), getattr(r, "ci_low", None),
                           getattr(r, "ci_high", None), getattr(r, "p", None), r.note, _clustered_claim(r.test, r.term)))
    for r in t.get("margin_separation", pd.DataFrame()).itertuples(index=False):
        out.append(group_record(r.model, "margin_auc", r.group, r.auc, p=r.p, note="Mann–Whitney; 0.5 is chance",
                                hypothesis=_auc_claim(r.group)))
    return json_clean(out)
