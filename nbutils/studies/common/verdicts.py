"""What a quantifier study's gap means: can the model do the task at all (the task floor), do its answers use what
the labelled examples say (or, with the concept stated, what the statement says) beyond the query itself, and does it
answer one way to nearly every prompt.

- **Task floor.** Accuracy per model and condition (and over both) against what a responder with no information about
  the answer gets: the share of the commoner gold answer (50% in a balanced design). One-sided exact binomial test,
  Wilson CI. A model that is not above the floor cannot show how well it learns anything.
- **Use of the examples.** A logistic model of the model's Yes answers on the query's position alone (a cubic in the
  query's proportion, or count for whole-number thresholds, per family) against the same model plus the answer the
  labelled examples imply (the gold label, one term for upward and one for downward concepts). The score (Rao) test
  of the two label terms needs only the query-only fit, so it stays finite when the label predicts every answer. A
  model whose answers follow a prior on the query (a "large proportions are Yes" rule) answers the same whatever
  the examples say: its label terms add nothing. R's ``anova(glm, test = "Rao")`` gives the same statistic.
- **Near-constant responders.** One answer on at least ``CONSTANT_SHARE`` of a condition's prompts: its accuracy is
  mostly the share of prompts whose gold answer is that one, and a gap between concept directions mostly the gap in
  that share.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy import stats as sps

from ...stats import ALPHA, claim, record, wilson

CONSTANT_SHARE = 0.9  # one answer on this share of a condition's prompts or more: a near-constant responder
STEP_MIN_N = 400  # prompts per model and condition from which the query-only model has a step at every threshold
CONDITION_WORDS = {"concept_learning": "under concept learning", "explicit": "with the concept stated", None: "overall"}


def query_position(df: pd.DataFrame) -> pd.Series:
    """Where the query lies on its concept's scale: the proportion ``count / total`` for fractional thresholds, the
    count for whole-number ones (each family's own scale)."""
    prop = df["query_count"].astype(float) / df["query_total"].astype(float)
    card = df["query_count"].astype(float)
    return prop.where(df["family"].astype(str) != "cardinal", card)


def chance_level(labels: pd.Series) -> float:
    """The accuracy of a responder that knows nothing of the answer: the share of the commoner gold answer."""
    share = float(pd.Series(labels).astype(bool).mean()) if len(labels) else 0.5
    return max(share, 1 - share)


def floor_test(correct, labels) -> dict:
    """Accuracy against the task floor: k of n correct, the chance level, one-sided exact binomial p, Wilson CI."""
    correct = np.asarray(correct, dtype=bool)
    n, k = len(correct), int(correct.sum())
    chance = chance_level(pd.Series(labels))
    if n == 0:
        return {"n": 0, "k": 0, "accuracy": np.nan, "ci_low": np.nan, "ci_high": np.nan, "p": np.nan,
                "chance": chance, "above": None}
    lo, hi = wilson(k, n)
    p = float(sps.binomtest(k, n, chance, alternative="greater").pvalue)
    return {"n": n, "k": k, "accuracy": k / n, "ci_low": lo, "ci_high": hi, "p": p, "chance": chance}


def _query_basis(g: pd.DataFrame) -> np.ndarray:
    """The query-only design: an intercept and, per family, its indicator and a cubic in the standardised position."""
    pos = query_position(g).to_numpy(dtype=float)
    fam = g["family"].astype(str).to_numpy()
    cols = [np.ones(len(g))]
    families = list(dict.fromkeys(fam))
    for i, f in enumerate(families):
        ind = (fam == f).astype(float)
        x = pos[fam == f]
        z = (pos - x.mean()) / (x.std() or 1.0) * ind
        if i:
            cols.append(ind)
        cols += [z, z ** 2, z ** 3]
        # a step at each of the family's thresholds: a prior that answers by a sharp cut at one of them (say, Yes
        # above one half) is a function of the query alone, and a smooth cubic would leave it to the label terms
        # (only where the prompts are many: at a demo's size the extra terms cost the test its calibration)
        for t in (sorted(set(_threshold_values(g[fam == f]))) if len(g) >= STEP_MIN_N else []):
            cols.append(((pos > t) & (fam == f)).astype(float))
    X = np.column_stack(cols)
    # drop columns the data cannot separate from the ones before (few distinct positions): a full-rank basis
    keep = []
    for j in range(X.shape[1]):
        trial = X[:, keep + [j]]
        if np.linalg.matrix_rank(trial) == len(keep) + 1:
            keep.append(j)
    return X[:, keep]


def _threshold_values(g: pd.DataFrame) -> list[float]:
    """The thresholds of ``g``'s concepts on the query's scale (``1/3`` → 0.333…, ``10`` → 10)."""
    from fractions import Fraction

    return [float(Fraction(str(t))) for t in g["threshold"].astype(str).unique()]


def label_terms(g: pd.DataFrame) -> np.ndarray:
    """What the examples say, as the two terms added to the query-only model: the gold label of upward concepts' and
    of downward concepts' prompts (0 elsewhere); a term that does not vary is left out."""
    lab = g["label"].astype(float).to_numpy()
    up = (g["monotonicity"].astype(str) == "upward").to_numpy(dtype=float)
    cols = [c for c in (lab * up, lab * (1 - up)) if np.ptp(c) > 0]
    return np.column_stack(cols) if cols else np.empty((len(g), 0))


def _score_test(y: np.ndarray, X0: np.ndarray, extra: np.ndarray, scores: list | None = None
                ) -> tuple[float, float, int, str]:
    """Rao's score test of adding ``extra`` to the logistic model of ``y`` on ``X0``: (statistic, p, df, note);
    ``scores``, where given, receives each extra term's score (its sign: the direction the term would move)."""
    import statsmodels.api as sm

    if extra.shape[1] == 0:
        return np.nan, np.nan, 0, "the examples' labels do not vary: nothing to test"
    both = np.column_stack([X0, extra])
    df = int(np.linalg.matrix_rank(both) - np.linalg.matrix_rank(X0))
    if df == 0:
        return np.nan, np.nan, 0, "the examples' labels are a function of the query's position here: nothing to test"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.GLM(y, X0, family=sm.families.Binomial()).fit()
    mu = fit.fittedvalues
    if np.all((mu < 1e-6) | (mu > 1 - 1e-6)):
        # the query alone predicts every answer (a step at some position): the labels cannot add anything
        return 0.0, 1.0, df, "the query's position alone predicts every answer"
    # written out, not statsmodels' ``score_test``: where the query-only fit nearly separates (fitted values at 1e-100)
    # that one inverts the whole ill-conditioned information matrix and its statistic drifts (0.008 against 0.143 here
    # on a sharp prior); the efficient information of the extra terms, with a pseudo-inverse, stays stable
    w = mu * (1 - mu)
    resid = y - mu
    u = extra.T @ resid
    # efficient information of the extra terms given the query-only terms (the score test's variance)
    xtwx = X0.T @ (X0 * w[:, None])
    cross = extra.T @ (X0 * w[:, None])
    info = extra.T @ (extra * w[:, None]) - cross @ np.linalg.pinv(xtwx) @ cross.T
    stat = float(u @ np.linalg.pinv(info) @ u)
    if scores is not None:
        scores.extend(float(v) for v in u)
    # referred to F(df, n − parameters) rather than χ²(df): the same test in large samples, and at a demo's 60
    # prompts it keeps the false-positive rate near α where χ² runs over it (benchmarks/calibration_verdicts.py)
    resid_df = len(y) - X0.shape[1] - df
    p = float(sps.f.sf(stat / df, df, resid_df)) if resid_df > 0 else float(sps.chi2.sf(stat, df))
    return stat, p, df, ""


def examples_test(g: pd.DataFrame) -> dict:
    """Do one model's answers in one condition follow what the examples say beyond the query? The score test of the
    label terms (``label_terms``) added to the query-only model, and the query-only model's own test against an
    intercept (do the answers follow the query at all?)."""
    y = g["pred_yes"].astype(float).to_numpy()
    n = len(y)
    out = {"n": n, "statistic": np.nan, "df": 0, "p": np.nan, "query_statistic": np.nan, "query_p": np.nan, "note": ""}
    if n == 0 or np.ptp(y) == 0:
        out["note"] = "one answer to every prompt: nothing to test"
        return out
    X0 = _query_basis(g)
    u: list = []
    out["statistic"], out["p"], out["df"], out["note"] = _score_test(y, X0, label_terms(g), u)
    names = [d for d in ("upward", "downward") if d in set(g["monotonicity"].astype(str))
             and np.ptp(g["label"].astype(float)[g["monotonicity"].astype(str) == d]) > 0]
    if len(u) == len(names):  # each label term's score: > 0 where the answers lean toward the gold answer
        out.update({f"score_{d}": v for d, v in zip(names, u)})
    qs, qp, _, _ = _score_test(y, np.ones((n, 1)), X0[:, 1:])
    out["query_statistic"], out["query_p"] = qs, qp
    return out


def constant_share(pred_yes) -> dict:
    """The commoner answer, how often it was given and its share."""
    pred = np.asarray(pred_yes, dtype=bool)
    yes = int(pred.sum())
    answer, count = ("Yes", yes) if yes * 2 >= len(pred) else ("No", len(pred) - yes)
    return {"answer": answer, "count": count, "n": len(pred), "share": count / len(pred) if len(pred) else np.nan}


def table(scores: pd.DataFrame) -> pd.DataFrame:
    """Per model × condition (and per model over both, ``condition`` None): the task floor, the examples test and the
    commoner answer."""
    rows = []
    for model, gm in scores.groupby("model", sort=False):
        parts = [(c, g) for c, g in gm.groupby("condition", sort=False)]
        if len(parts) > 1:
            parts.append((None, gm))
        for cond, g in parts:
            fl = floor_test(g["correct"], g["label"])
            ex = examples_test(g) if cond is not None else {}
            const = constant_share(g["pred_yes"])
            rows.append({"model": model, "condition": cond, **{f"floor_{k}": v for k, v in fl.items()},
                         **{f"examples_{k}": v for k, v in ex.items()},
                         **{f"constant_{k}": v for k, v in const.items()}})
    return pd.DataFrame(rows)


def floor_claim(condition) -> dict:
    """The task floor's hypothesis: accuracy above what a responder with no information gets (one-sided)."""
    where = CONDITION_WORDS.get(condition, f"in condition {condition}")
    return claim(f"accuracy {where} against the task floor", f"the model is above the task floor {where}",
                 f"the model is below the task floor {where}", scale="proportion", sided="greater")


def examples_claim(condition) -> dict:
    """The examples test's hypothesis: the answers depend on what the examples (or the stated concept) say."""
    what = "the stated concept" if condition == "explicit" else "the labelled examples"
    return claim(f"whether the answers follow what {what} say beyond the query", "", "",
                 f"the answers use what {what} say", sided="none", symbol="")


def records(t: pd.DataFrame) -> list[dict]:
    """The floor and examples tests as ``summary.json`` records (``floor_binomial``, ``examples_score_test``)."""
    out = []
    for r in t.itertuples(index=False):
        cond = r.condition if isinstance(r.condition, str) else None
        out.append(record("floor_binomial", "accuracy", r.floor_accuracy, None, r.floor_ci_low, r.floor_ci_high,
                          r.floor_p, valid=r.floor_n > 0, condition=cond, model=r.model, n=int(r.floor_n),
                          chance=r.floor_chance,
                          note="accuracy against the share of the commoner gold answer: one-sided exact binomial "
                               "test, Wilson CI", hypothesis={**floor_claim(cond), "null": float(r.floor_chance)}))
        if cond is None:
            continue
        ok = bool(pd.notna(r.examples_p))
        out.append(record("examples_score_test", "label", None, p=r.examples_p if ok else None, valid=ok,
                          condition=cond, model=r.model, n=int(r.examples_n), statistic=r.examples_statistic,
                          df=int(r.examples_df), query_statistic=r.examples_query_statistic,
                          query_p=r.examples_query_p,
                          note="the gold labels (upward, downward) added to a logistic model of the Yes answers on "
                               "a cubic in the query's position; Rao score test"
                               + (f"; {r.examples_note}" if r.examples_note else ""),
                          hypothesis=examples_claim(cond)))
    return out


def summary_blocks(t: pd.DataFrame, alpha: float = ALPHA) -> dict:
    """Per model and condition, what the headline needs: ``floor``, ``uses_examples`` and ``constant`` (for
    ``summary["models"][model]["conditions"][condition]``; over both conditions under ``overall``)."""
    out: dict = {}
    for r in t.itertuples(index=False):
        cond = r.condition if isinstance(r.condition, str) else "overall"
        p = r.floor_p
        block = {"floor": {"accuracy": r.floor_accuracy, "ci_low": r.floor_ci_low, "ci_high": r.floor_ci_high,
                           "p": p, "n": int(r.floor_n), "chance": r.floor_chance,
                           "above": bool(p < alpha) if np.isfinite(p) else None}}
        if cond != "overall":
            ep = r.examples_p
            block["uses_examples"] = {"uses": bool(ep < alpha) if np.isfinite(ep) else None, "p": ep,
                                      "statistic": r.examples_statistic, "df": int(r.examples_df),
                                      "query_p": r.examples_query_p, "note": r.examples_note or ""}
            for d in ("upward", "downward"):  # the direction each label term leans (> 0: toward the gold answer)
                v = getattr(r, f"examples_score_{d}", np.nan)
                if isinstance(v, float) and np.isfinite(v):
                    block["uses_examples"][f"score_{d}"] = v
        share = r.constant_share
        block["constant"] = ({"answer": r.constant_answer, "count": int(r.constant_count), "n": int(r.constant_n),
                              "share": share} if np.isfinite(share) and share >= CONSTANT_SHARE else None)
        out.setdefault(r.model, {})[cond] = block
    return out
