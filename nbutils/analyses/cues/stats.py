"""ICQ's statistics (Huang and Zhu) with the significance tests the paper leaves out.

Cue discovery (per feature f found ``min_count`` times in both splits): the label counts of the extracted training set
R_f and test set S_f, MSE(R_f) = mean over labels of (count − mean count)², JSD(Q(R_f), Q(S_f)) in nats (natural log,
so 0 ≤ JSD ≤ ln 2) and cueness = MSE(R_f) / exp(JSD); LMI and PMI of each (feature, label) on the training split
(p(f, l)·log p(l | f)/p(l), as in Gururangan et al. 2018 and Schuster et al. 2019, with instances for tokens); and a test
that the label distribution depends on f (Fisher's exact test for two labels, chi-square for more), Holm over every
feature tested, so that a cue-free dataset flags nothing at α except by chance (familywise).

Model probing on the test split, over the top-k features: the accuracy test ΔAcc = acc(S_f) − acc(S_nf) with a
Newcombe (Wilson-score) 95% interval and Fisher's exact test, Holm over the k features; the distribution test flattens
S_f by seeded subsampling to equal label counts and compares the model's predicted-label distribution there with
R_f's label distribution and with uniform (JSD; exact multinomial/chi-square p against uniform). Because a model with
a plain response bias (always "Yes") departs from uniform on every flattened set, the distribution test's decision
compares the rate of predicting the cue's label (R_f's majority label) on flattened S_f with the same rate on the
equally flattened rest of the test split (S_nf; Fisher's exact test, Holm over the k features). A feature is flagged
as used only when both tests agree: both significant after Holm and both in the cue's direction (ΔAcc > 0, shift > 0).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps
from statsmodels.stats.proportion import confint_proportions_2indep

from ... import stats as shared
from ...stats import ALPHA
from .params import CueParams

SPLITS = ("train", "test")


def _counts(c) -> np.ndarray:
    c = np.asarray(c, dtype=float)
    if c.ndim != 1 or c.size < 2 or (c < 0).any():
        raise ValueError(f"counts: need one non-negative count per label (at least two labels), got {c!r}")
    return c


def mse(counts) -> float:
    """The paper's MSE of an extracted set: mean over labels of (count − mean count)²."""
    c = _counts(counts)
    return float(np.mean((c - c.mean()) ** 2))


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    m = p > 0
    return float(np.sum(p[m] * np.log(p[m] / q[m])))


def jsd(counts_a, counts_b) -> float:
    """Jensen–Shannon divergence (nats) between two label distributions given as counts or probabilities."""
    a, b = _counts(counts_a), _counts(counts_b)
    if a.size != b.size or a.sum() == 0 or b.sum() == 0:
        raise ValueError("counts: the two distributions need the same labels and at least one instance each")
    p, q = a / a.sum(), b / b.sum()
    m = (p + q) / 2
    return 0.5 * _kl(p, m) + 0.5 * _kl(q, m)


def cueness(counts_train, counts_test) -> float:
    """cue(f, X) = MSE(R_f) / exp(JSD(R_f, S_f))."""
    return mse(counts_train) / float(np.exp(jsd(counts_train, counts_test)))


def assign_split(index: pd.Index, given: pd.Series | None = None, train_fraction: float = 0.5,
                 seed: int = 0) -> tuple[pd.Series, str]:
    """``train``/``test`` per instance: the dataset's own ``split`` column when it has one (values ``train``/``test``;
    ``validation``/``dev`` count as test), else a seeded random split of ``train_fraction``; returns (split, note)."""
    if given is not None:
        s = given.astype(str).str.strip().str.lower().replace({"validation": "test", "dev": "test", "val": "test"})
        bad = sorted(set(s) - set(SPLITS))
        if bad:
            raise ValueError(f"split column: values must be train/test (validation/dev count as test), got {bad[:5]}")
        if not (s == "train").any() or not (s == "test").any():
            raise ValueError("split column: needs both train and test instances")
        return s, "split: the dataset's own split column"
    if not isinstance(train_fraction, (int, float)) or not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction: must be between 0 and 1 (exclusive), got {train_fraction!r}")
    n = len(index)
    if n < 4:
        raise ValueError(f"dataset: {n} instances are too few to split into training and test sets")
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    n_train = min(max(int(round(train_fraction * n)), 1), n - 1)
    split = np.array(["test"] * n, dtype=object)
    split[order[:n_train]] = "train"
    return (pd.Series(split, index=index, name="split"),
            f"split: the dataset has no split column, so a seeded random split was drawn "
            f"({n_train} train / {n - n_train} test, train_fraction={train_fraction}, seed={seed})")


def _independence_p(table: np.ndarray) -> float:
    """p of label ⟂ feature for a 2 × L table (present/absent × label): Fisher exact for 2 labels, chi-square beyond."""
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2 or (table.sum(axis=1) == 0).any():
        return 1.0
    if table.shape[1] == 2:
        return float(sps.fisher_exact(table).pvalue)
    return float(sps.chi2_contingency(table, correction=False).pvalue)


def discover(features: pd.DataFrame, labels: pd.Series, split: pd.Series, min_count: int = CueParams.min_count,
             alpha: float = ALPHA) -> pd.DataFrame:
    """Cue discovery: one row per (feature, label) for every feature present ≥ ``min_count`` times in both splits
    (and absent somewhere), ranked by cueness (rank 1 = strongest; ties by name). Columns: feature, rank, label, count_train, count_test,
    n_train, n_test, share_train, mse, jsd, cueness, lmi, pmi, cue_label, p, p_holm, significant. ``min_count`` and
    ``alpha`` are checked by the cue profile's parameter record (``CueParams``), called here directly too."""
    CueParams(min_count=min_count, alpha=alpha)
    if not (features.index.equals(labels.index) and labels.index.equals(split.index)):
        raise ValueError("features, labels and split must share one index")
    label_set = sorted(labels.unique(), key=str)
    if len(label_set) < 2:
        raise ValueError(f"labels: cue discovery needs at least two labels, found {label_set}")
    cols = ["feature", "rank", "label", "count_train", "count_test", "n_train", "n_test", "share_train", "mse", "jsd",
            "cueness", "lmi", "pmi", "cue_label", "p", "p_holm", "significant"]
    X = features.to_numpy(dtype=bool)
    Y = np.stack([(labels == lab).to_numpy() for lab in label_set], axis=1).astype(float)
    tr = (split == "train").to_numpy()
    te = ~tr
    cr = X[tr].T.astype(float) @ Y[tr]  # features × labels, training split
    cs = X[te].T.astype(float) @ Y[te]
    # a feature on every instance separates nothing (and leaves S_nf empty): never a candidate
    keep = np.flatnonzero((cr.sum(1) >= min_count) & (cs.sum(1) >= min_count) & (X.sum(0) < len(X)))
    if keep.size == 0:
        return pd.DataFrame(columns=cols)
    n_tr = tr.sum()
    p_label = Y[tr].sum(0) / n_tr
    all_counts = X.T.astype(float) @ Y
    totals = Y.sum(0)
    rows = []
    for j in keep:
        r, s = cr[j], cs[j]
        m, d = mse(r), jsd(r, s)
        p = _independence_p(np.vstack([all_counts[j], totals - all_counts[j]]))
        with np.errstate(divide="ignore", invalid="ignore"):
            pmi = np.log((r / r.sum()) / p_label)
            lmi = np.where(r > 0, (r / n_tr) * pmi, 0.0)
        rows.append((features.columns[j], r, s, m, d, m / np.exp(d), lmi, np.where(r > 0, pmi, np.nan), p))
    p_holm = shared.holm([x[-1] for x in rows])
    out = []
    for (name, r, s, m, d, cue, lmi, pmi, p), ph in zip(rows, p_holm):
        for k, lab in enumerate(label_set):
            out.append({"feature": name, "label": lab, "count_train": int(r[k]), "count_test": int(s[k]),
                        "n_train": int(r.sum()), "n_test": int(s.sum()), "share_train": r[k] / r.sum(), "mse": m,
                        "jsd": d, "cueness": cue, "lmi": float(lmi[k]), "pmi": float(pmi[k]),
                        "cue_label": label_set[int(np.argmax(r))], "p": p, "p_holm": float(ph),
                        "significant": bool(ph < alpha)})
    df = pd.DataFrame(out)
    order = (df.drop_duplicates("feature").sort_values(["cueness", "feature"], ascending=[False, True])["feature"])
    df["rank"] = df["feature"].map({f: i + 1 for i, f in enumerate(order)})
    df["_lab"] = df["label"].map({lab: i for i, lab in enumerate(label_set)})
    return df.sort_values(["rank", "_lab"]).drop(columns="_lab")[cols].reset_index(drop=True)


def top_features(cues: pd.DataFrame, top_k: int) -> pd.DataFrame:
    """One row per feature of the ``top_k`` best ranked (feature-level columns only)."""
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise ValueError(f"top_k: must be a positive integer, got {top_k!r}")
    f = cues.drop_duplicates("feature")
    return f[f["rank"] <= top_k][["feature", "rank", "n_train", "n_test", "mse", "jsd", "cueness", "cue_label",
                                  "p", "p_holm", "significant"]].reset_index(drop=True)


def train_distribution(cues: pd.DataFrame, feature: str) -> pd.Series:
    """Q(R_f): R_f's label shares, indexed by label."""
    g = cues[cues["feature"] == feature]
    return pd.Series(g["share_train"].to_numpy(), index=g["label"].to_numpy())


# ---------------------------------------------------------------- model probing

def accuracy_test(correct, has_feature) -> dict:
    """ΔAcc = acc(S_f) − acc(S_nf), its Newcombe 95% interval and Fisher's exact two-sided p."""
    c = np.asarray(correct, dtype=bool)
    f = np.asarray(has_feature, dtype=bool)
    k1, n1, k0, n0 = int(c[f].sum()), int(f.sum()), int(c[~f].sum()), int((~f).sum())
    out = {"n_f": n1, "n_nf": n0, "acc_f": k1 / n1 if n1 else np.nan, "acc_nf": k0 / n0 if n0 else np.nan}
    if n1 == 0 or n0 == 0:
        return {**out, "delta_acc": np.nan, "ci_low": np.nan, "ci_high": np.nan, "p": np.nan}
    lo, hi = confint_proportions_2indep(k1, n1, k0, n0, method="newcomb", compare="diff")
    p = sps.fisher_exact([[k1, n1 - k1], [k0, n0 - k0]]).pvalue
    return {**out, "delta_acc": out["acc_f"] - out["acc_nf"], "ci_low": float(lo), "ci_high": float(hi), "p": float(p)}


def flatten(labels: pd.Series, label_set, rng: np.random.Generator) -> pd.Index:
    """The paper's stress set: every label cut down at random to the rarest label's count (empty when one is absent)."""
    groups = [labels.index[labels.to_numpy() == lab] for lab in label_set]
    m = min(len(g) for g in groups)
    if m == 0:
        return labels.index[:0]
    return pd.Index(np.concatenate([rng.choice(np.asarray(g, dtype=object), m, replace=False) for g in groups]))


def _uniform_p(counts: np.ndarray) -> float:
    """p of the predicted counts against uniform: exact binomial for two labels, chi-square beyond."""
    n = int(counts.sum())
    if n == 0:
        return np.nan
    if counts.size == 2:
        return float(sps.binomtest(int(counts[0]), n, 0.5).pvalue)
    return float(sps.chisquare(counts).pvalue)


def distribution_test(labels: pd.Series, preds: pd.Series, has_feature: pd.Series, train_dist: pd.Series,
                      seed: int = 0) -> dict:
    """The distribution test on one feature: flatten S_f and S_nf (seeded), the model's predicted-label shares on
    flattened S_f (``pred_share``) against Q(R_f) and uniform (JSD, p against uniform), and the shift of the rate of
    predicting the cue label against flattened S_nf (Fisher's exact p). Inputs share the test split's index."""
    label_set = list(train_dist.index)
    cue = train_dist.idxmax()
    rng = np.random.default_rng(seed)
    f = has_feature.to_numpy(dtype=bool)
    flat_f = flatten(labels[f], label_set, rng)
    flat_nf = flatten(labels[~f], label_set, rng)
    out = {"cue_label": cue, "n_flat_f": len(flat_f), "n_flat_nf": len(flat_nf)}
    if len(flat_f) == 0:
        return {**out, "note": "S_f lacks a label: it cannot be flattened", "p_uniform": np.nan, "p_shift": np.nan,
                "jsd_pred_train": np.nan, "jsd_pred_uniform": np.nan, "shift": np.nan}
    pf = preds.loc[flat_f]
    counts = np.array([(pf == lab).sum() for lab in label_set], dtype=float)
    other = [p for p in pf if p not in label_set]  # a prediction outside the label set (rare: MC by position)
    share = counts / max(len(pf), 1)
    out.update({"pred_share": dict(zip(label_set, share)), "train_share": dict(zip(label_set, train_dist.to_numpy())),
                "n_pred_other": len(other),
                "jsd_pred_train": jsd(counts + 0.0, train_dist.to_numpy()) if counts.sum() else np.nan,
                "jsd_pred_uniform": jsd(counts + 0.0, np.ones(len(label_set))) if counts.sum() else np.nan,
                "p_uniform": _uniform_p(counts)})
    if len(flat_nf) == 0:
        return {**out, "note": "S_nf lacks a label: no flattened baseline", "p_shift": np.nan, "shift": np.nan,
                "rate_cue_f": np.nan, "rate_cue_nf": np.nan}
    a = int((pf == cue).sum())
    b = int((preds.loc[flat_nf] == cue).sum())
    out.update({"rate_cue_f": a / len(flat_f), "rate_cue_nf": b / len(flat_nf), "shift": a / len(flat_f) - b / len(flat_nf),
                "p_shift": float(sps.fisher_exact([[a, len(flat_f) - a], [b, len(flat_nf) - b]]).pvalue), "note": ""})
    return out


def probe(items: pd.DataFrame, cues: pd.DataFrame, top_k: int = CueParams.top_k, alpha: float = ALPHA,
          seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both tests for every model and each of the ``top_k`` features, on the test split.

    ``items``: one row per (model, instance) with columns model, label, pred, split and one boolean column per
    feature (named as in ``cues``). Returns (accuracy table, distribution table); the distribution table carries the
    verdict ``used`` (both tests significant after Holm, both in the cue's direction); ``top_k`` and ``alpha`` checked
    by ``CueParams``.
    """
    CueParams(top_k=top_k, alpha=alpha)
    top = top_features(cues, top_k)
    acc_rows, dist_rows = [], []
    for model, g in items[items["split"] == "test"].groupby("model", sort=False):
        correct = g["pred"].astype(str).to_numpy() == g["label"].astype(str).to_numpy()
        for i, r in enumerate(top.itertuples(index=False)):
            has = g[r.feature].astype(bool)
            acc_rows.append({"model": model, "feature": r.feature, "rank": r.rank, "cueness": r.cueness,
                             "cue_label": r.cue_label, **accuracy_test(correct, has)})
            d = distribution_test(g["label"], g["pred"], has, train_distribution(cues, r.feature), seed=seed + i)
            share, tshare = d.pop("pred_share", {}), d.pop("train_share", {})
            dist_rows.append({"model": model, "feature": r.feature, "rank": r.rank, **d,
                              **{f"pred_{k}": v for k, v in share.items()},
                              **{f"train_{k}": v for k, v in tshare.items()}})
    acc = pd.DataFrame(acc_rows)
    dist = pd.DataFrame(dist_rows)
    if acc.empty:
        return acc, dist
    acc["p_holm"] = acc.groupby("model")["p"].transform(lambda p: pd.Series(shared.holm(p), index=p.index))
    acc["flag"] = (acc["p_holm"] < alpha) & (acc["delta_acc"] > 0)
    dist["p_holm"] = dist.groupby("model")["p_shift"].transform(lambda p: pd.Series(shared.holm(p), index=p.index))
    dist["flag"] = (dist["p_holm"] < alpha) & (dist["shift"] > 0)
    dist["accuracy_flag"] = acc["flag"].to_numpy()
    dist["used"] = dist["flag"] & dist["accuracy_flag"]
    return acc, dist
