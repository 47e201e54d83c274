"""Twin prompts: what a concept-learning answer is made of, by design rather than by model fit.

Each concept-learning prompt can be asked again in a twin that changes one thing the answer may depend on:

- ``label_flip``: the same examples' numbers and the same query, every label complemented, so the examples describe
  the complementary concept and the query's gold answer flips. An answer that follows the labels' direction flips
  with them; one made from the query alone, or from the examples' threshold read as "more than", does not.
- ``threshold_shift``: the same query, the examples drawn around another threshold of the design (the same
  quantifier) on the query's other side, so the gold answer flips. An answer that reads the threshold from the
  examples moves with it, in the concept's own direction (a learner) or as "more than" whatever the concept (the
  mirror: the papers' signature); one made from the query alone does not move.
- ``copy``: the same examples, and the query repeats one of them word for word: its gold answer is the label the
  model was just shown. A model that does not copy it is not using the examples in any sense.

Every twin is a row of the dataset (``twin`` names its kind, ``twin_of`` its original's ``prompt_id``), scored like
any prompt; the headline analysis leaves twins out, and this module pairs each twin with its original.

**The paired tests.** A pair is *discordant* where the two answers differ. It *follows* where both answers are
right (the answer moved the way the gold answer moved) and goes *against* where both are wrong. Where the answers
do not depend on what the twin changed, the two prompts of a pair are exchangeable, so a discordant pair follows or
goes against with probability 1/2 (McNemar's argument): the exact McNemar test of the follow and against counts.
The estimate is the net share of pairs that follow, (follow − against) / pairs, in points: +100 for a model that
always follows, 0 for one that ignores the change. Its 95% CI is the Agresti–Min adjusted Wald interval for a
paired difference of proportions. Each prompt pair is drawn independently of the others (its own examples and
query), so pairs are the unit of the test.

The components of the evidence, on that one scale:

- **labels** (label-flip twins, both directions pooled): do the answers follow the labels' direction?
- **threshold** (threshold-shift twins, per direction of the concept): do the answers move with the examples'
  threshold? A learner follows in both directions; the mirror follows for upward concepts and goes against for
  downward ones (it answers "more than the examples' threshold" everywhere); a prior on the query does neither.
  Its test is exact: the sum of the two directions' squared McNemar statistics, referred to its exact distribution
  under the null (each direction's discordant pairs split as fair coins). The **upward reading** pools the pairs
  that move as "more than the examples' threshold" moves (upward following, downward going against) against those
  that move the other way: the mirror's own pattern, tested one-sided (exact McNemar), as its direction is fixed
  before the data.
- **prior** (threshold-shift twins): the share of each direction's prompts answered right by an answer that did not
  move with the threshold, upward minus downward: the part of the accuracy gap that the query alone carries, with
  the Agresti–Caffo CI of a difference of two independent proportions.
- **copy** (copy probes): accuracy on prompts whose answer is a label just shown, against one half (one-sided exact
  binomial test, Wilson CI).
"""
from __future__ import annotations

import math
import zlib
from functools import lru_cache

import numpy as np
import pandas as pd
from scipy import stats as sps

from ...stats import ALPHA, wilson
from ..common.quantifiers import Concept, example_space

KINDS = ("label_flip", "threshold_shift", "copy")
# The equivalence margin that shows a prior: a use of the examples is excluded when the 90% CI (a one-sided 95%
# bound) of every component that measures it lies within ± this many points. A reference learner that is right 65%
# of the time, independently on each prompt, follows in 0.65² − 0.35² = 30 points of pairs; the margin is half of
# that, so "excluded" means "less than half the use of a weak learner".
EQUIVALENCE_MARGIN = 0.15
REFERENCE_ACCURACY = 0.65  # the weak learner and mirror learner that power is stated against


def check(twins) -> list[str]:
    """The ``twins`` generation parameter: a list of names from ``KINDS`` (empty: no twins), or a ValueError."""
    if twins is None:
        return []
    if isinstance(twins, str) or not isinstance(twins, (list, tuple)) or \
            any(not isinstance(t, str) or t not in KINDS for t in twins):
        raise ValueError(f"twins: must be a list drawn from {list(KINDS)} (or empty for none), got {twins!r}")
    if len(set(twins)) != len(twins):
        raise ValueError(f"twins: duplicates are not allowed, got {list(twins)!r}")
    return [t for t in KINDS if t in twins]  # one order whatever the file's


def rng_for(concept: Concept, seed: int) -> np.random.Generator:
    """The twins' own random stream per concept: adding twins never changes an original prompt."""
    return np.random.default_rng([seed, zlib.crc32(concept.name.encode()), 7919])


def shifted_concept(concept: Concept, design: list[Concept], total: int, count: int) -> Concept | None:
    """The concept of the design with ``concept``'s quantifier and family at the threshold nearest to its own for
    which the query (``count`` of ``total``) gets the other answer; None where no threshold of the design does."""
    want = not concept.holds(total, count)
    same = [c for c in design if c.family == concept.family and c.value != concept.value]
    cands = [Concept(concept.quantifier, c.threshold, c.value) for c in same]
    cands = [c for c in dict.fromkeys(cands) if c.holds(total, count) == want]
    if not cands:
        return None
    return min(cands, key=lambda c: (abs(c.value - concept.value), c.value))


def draw_examples(concept: Concept, n: int, rng: np.random.Generator, exclude: tuple[int, int]) -> list[tuple]:
    """``n`` labelled examples of ``concept`` (half positive, half negative, shuffled), none equal to ``exclude``."""
    pos, neg = ([s for s in side if tuple(s) != exclude] for side in example_space(concept))
    pi = rng.choice(len(pos), n // 2, replace=False)
    ni = rng.choice(len(neg), n // 2, replace=False)
    ex = [(*pos[j], True) for j in pi] + [(*neg[j], False) for j in ni]
    return [ex[j] for j in rng.permutation(len(ex))]


# --------------------------------------------------------------------------------------------------- the statistics


def agresti_min(follow: int, against: int, n: int, level: float = 0.95) -> tuple[float, float, float, float]:
    """The net share of pairs that follow, (follow − against) / n, its unadjusted SE, and the Agresti–Min adjusted
    Wald CI (half a pair added to each of the four cells), clipped to [−1, 1]."""
    if n <= 0:
        return (math.nan,) * 4
    est = (follow - against) / n
    se = math.sqrt(max((follow + against) / n - est ** 2, 0.0) / n)
    b, c, m = follow + 0.5, against + 0.5, n + 2.0
    adj = (b - c) / m
    se_adj = math.sqrt(max((b + c) / m - adj ** 2, 0.0) / m)
    z = sps.norm.ppf(0.5 + level / 2)
    return est, se, max(-1.0, adj - z * se_adj), min(1.0, adj + z * se_adj)


def mcnemar_exact(follow: int, against: int, alternative: str = "two-sided") -> float:
    """Exact McNemar p: the follow count among discordant pairs against Binomial(m, 1/2) (``alternative``
    ``greater``: more follow than go against)."""
    m = follow + against
    return 1.0 if m == 0 else float(sps.binomtest(follow, m, 0.5, alternative=alternative).pvalue)


@lru_cache(maxsize=4096)
def _exact_two(m1: int, m2: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact null distribution of (b1 − c1)²/m1 + (b2 − c2)²/m2: its support and probabilities."""
    def one(m):
        if m == 0:
            return np.array([0.0]), np.array([1.0])
        b = np.arange(m + 1)
        return (2 * b - m) ** 2 / m, sps.binom.pmf(b, m, 0.5)
    s1, p1 = one(m1)
    s2, p2 = one(m2)
    return (s1[:, None] + s2[None, :]).ravel(), (p1[:, None] * p2[None, :]).ravel()


def threshold_p(cells: list[tuple[int, int]]) -> float:
    """The exact p of the threshold test: (follow, against) per direction; the sum of squared McNemar statistics
    against its exact distribution where every direction's discordant pairs split as fair coins."""
    cells = [(b, c) for b, c in cells if b + c > 0]
    if not cells:
        return 1.0
    stat = sum((b - c) ** 2 / (b + c) for b, c in cells)
    if len(cells) == 1:
        b, c = cells[0]
        return mcnemar_exact(b, c)
    (b1, c1), (b2, c2) = cells[0], cells[1]
    sup, prob = _exact_two(b1 + c1, b2 + c2)
    return float(min(1.0, prob[sup >= stat - 1e-9].sum()))


def is_original(df: pd.DataFrame) -> pd.Series:
    """Which rows are prompts of the design rather than twins (every row of a dataset without twins)."""
    if "twin" not in df:
        return pd.Series(True, index=df.index)
    return df["twin"].isna() | (df["twin"].astype(str) == "")


def originals(df: pd.DataFrame) -> pd.DataFrame:
    """The prompts of the design without their twins (its ``attrs`` kept): what every statistic but the twins'
    reads."""
    keep = is_original(df)
    if keep.all():
        return df
    out = df[keep].reset_index(drop=True)
    out.attrs = dict(df.attrs)
    return out


def pair_frame(scores: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Each ``kind`` twin beside its original, per model: the original's and the twin's gold and answer, the
    concept's direction, ``follow`` (both right) and ``against`` (both wrong)."""
    tw = scores[scores["twin"].astype(str) == kind]
    orig = scores[is_original(scores)]
    cols = ["model", "prompt_id", "label", "pred_yes", "correct"]
    m = tw[["model", "twin_of", "label", "pred_yes", "correct", "monotonicity", "concept", "threshold"]].merge(
        orig[cols], left_on=["model", "twin_of"], right_on=["model", "prompt_id"], suffixes=("_twin", ""),
        how="inner")
    m["follow"] = m["correct"].astype(bool) & m["correct_twin"].astype(bool)
    m["against"] = ~m["correct"].astype(bool) & ~m["correct_twin"].astype(bool)
    if kind == "copy":  # a copy probe has no pairing to test: it is read on its own
        m["follow"] = m["correct_twin"].astype(bool)
    return m


def counts_component(follow: int, against: int, n: int, name: str = "", direction: str | None = None) -> dict:
    """One twin component from its counts: the net share of ``n`` pairs that follow, its SE, 95% and 90% CIs and the
    exact McNemar p."""
    est, se, lo, hi = agresti_min(follow, against, n)
    _, _, lo90, hi90 = agresti_min(follow, against, n, level=0.90)
    return {"component": name, "direction": direction, "n": n, "follow": follow, "against": against, "estimate": est,
            "se": se, "ci_low": lo, "ci_high": hi, "ci90_low": lo90, "ci90_high": hi90,
            "p": mcnemar_exact(follow, against)}


def _component(name: str, g: pd.DataFrame, direction: str | None = None) -> dict:
    return counts_component(int(g["follow"].sum()), int(g["against"].sum()), len(g), name, direction)


def joint_component(dirs: dict, n: int) -> dict:
    """Both directions of the threshold twins (``dirs``: direction → its component): the exact joint test, and where
    both directions are there the upward reading ("more than the examples' threshold" everywhere: upward pairs
    following, downward ones going against), tested one-sided as its direction is fixed before the data."""
    out = {"component": "threshold", "direction": "both", "n": n,
           "follow": sum(r["follow"] for r in dirs.values()), "against": sum(r["against"] for r in dirs.values()),
           "p": threshold_p([(r["follow"], r["against"]) for r in dirs.values()])}
    up, down = dirs.get("upward"), dirs.get("downward")
    if up and down:
        b, c = up["follow"] + down["against"], up["against"] + down["follow"]
        est, _, lo, hi = agresti_min(b, c, n)
        out.update(upward_reading=est, upward_reading_ci_low=lo, upward_reading_ci_high=hi,
                   upward_reading_p=mcnemar_exact(b, c, "greater"))
    return out


def copy_component(k: int, n: int) -> dict:
    """Copy probes: ``k`` of ``n`` right against one half (one-sided exact binomial test, Wilson CI)."""
    lo, hi = wilson(k, n)
    return {"component": "copy", "direction": None, "n": n, "follow": k, "estimate": k / n, "ci_low": lo,
            "ci_high": hi, "p": float(sps.binomtest(k, n, 0.5, alternative="greater").pvalue)}


def table(scores: pd.DataFrame) -> pd.DataFrame:
    """Per model, the twin components (labels; threshold per direction and jointly; prior; copy) as rows."""
    if "twin" not in scores or not scores["twin"].notna().any():
        return pd.DataFrame()
    rows = []
    label = pair_frame(scores, "label_flip")
    shift = pair_frame(scores, "threshold_shift")
    copy = pair_frame(scores, "copy")
    models = list(dict.fromkeys(scores["model"]))
    for model in models:
        lg, sg, cg = (f[f["model"] == model] for f in (label, shift, copy))
        if len(lg):
            rows.append({"model": model, **_component("labels", lg)})
        if len(sg):
            dirs = {d: _component("threshold", dg, d) for d in ("upward", "downward")
                    if len(dg := sg[sg["monotonicity"] == d])}
            rows += [{"model": model, **r} for r in dirs.values()]
            rows.append({"model": model, **joint_component(dirs, len(sg))})
            rows.append({"model": model, **prior_component(sg)})
        if len(cg):
            rows.append({"model": model, **copy_component(int(cg["correct_twin"].sum()), len(cg))})
    return pd.DataFrame(rows)


def prior_component(sg: pd.DataFrame) -> dict:
    """The part of the accuracy gap carried by answers that did not move with the threshold: right and unmoved
    upward minus right and unmoved downward, with the Agresti–Caffo CI (two independent proportions)."""
    from statsmodels.stats.proportion import confint_proportions_2indep, test_proportions_2indep

    still = sg["correct"].astype(bool) & (sg["pred_yes"] == sg["pred_yes_twin"])
    up, down = still[sg["monotonicity"] == "upward"], still[sg["monotonicity"] == "downward"]
    out = {"component": "prior", "direction": None, "n": len(sg), "estimate": math.nan, "ci_low": math.nan,
           "ci_high": math.nan, "p": math.nan}
    if len(up) and len(down):
        k1, n1, k2, n2 = int(up.sum()), len(up), int(down.sum()), len(down)
        with np.errstate(divide="ignore", invalid="ignore"):  # statsmodels also computes a ratio it does not return
            lo, hi = confint_proportions_2indep(k1, n1, k2, n2, method="agresti-caffo")
            p = test_proportions_2indep(k1, n1, k2, n2, method="agresti-caffo").pvalue
        out.update(estimate=k1 / n1 - k2 / n2, ci_low=float(lo), ci_high=float(hi), p=float(p),
                   still_up=k1 / n1, still_down=k2 / n2)
    return out


# ------------------------------------------------------------------------------------------------------ the power


@lru_cache(maxsize=1024)
def mcnemar_power(p_follow: float, p_against: float, n: int, alpha: float = ALPHA, one_sided: bool = False) -> float:
    """The exact power of the exact McNemar test (two-sided, or ``one_sided`` for more follow) with ``n`` pairs whose
    cells follow, go against and agree with these probabilities (summed over the number of discordant pairs)."""
    pd_ = p_follow + p_against
    if n <= 0 or pd_ <= 0:
        return 0.0
    q = p_follow / pd_
    ms = np.arange(n + 1)
    w = sps.binom.pmf(ms, n, pd_)
    power = 0.0
    for m, wm in zip(ms, w):
        if wm < 1e-12 or m == 0:
            continue
        b = np.arange(m + 1)
        pv = sps.binom.sf(b - 1, m, 0.5) if one_sided else \
            np.minimum(1.0, 2 * np.minimum(sps.binom.cdf(b, m, 0.5), sps.binom.sf(b - 1, m, 0.5)))
        power += wm * sps.binom.pmf(b, m, q)[pv < alpha].sum()
    return float(power)


def reference_cells(kind: str, model: str, acc: float = REFERENCE_ACCURACY) -> tuple[float, float]:
    """(follow, against) probabilities of a pair under a reference model that is right ``acc`` of the time,
    independently on each prompt: a learner follows the gold answer in both prompts, the mirror (answering "more
    than the examples' threshold") follows a label flip only by chance and, on threshold twins, follows the
    upward reading; a prior on the query follows nothing."""
    both, neither = acc * acc, (1 - acc) * (1 - acc)
    if model == "prior" or (model == "mirror" and kind == "labels"):
        return (acc * (1 - acc), acc * (1 - acc)) if model == "mirror" else (0.0, 0.0)
    return both, neither  # a learner on labels or threshold; the mirror on its upward reading


def power_block(n_label: int, n_threshold: int, alpha: float = ALPHA, share: float | None = None) -> dict:
    """The power the label test had against a learner and the threshold test against the mirror (each right
    ``REFERENCE_ACCURACY`` of the time) at these numbers of pairs, and the concept-learning prompts at which both reach
    80% (``share``: the prompts that get a threshold-shifted twin; default, as here)."""
    if share is None:
        share = n_threshold / n_label if n_label else 0.0
    return {"learner": mcnemar_power(*reference_cells("labels", "learner"), n_label, alpha),
            "mirror": mcnemar_power(*reference_cells("threshold", "mirror"), n_threshold, alpha, True),
            "n_label_pairs": n_label, "n_threshold_pairs": n_threshold,
            "prompts_needed": prompts_needed(share, 0.8, alpha),
            "reference_accuracy": REFERENCE_ACCURACY}


def prompts_needed(share: float, target: float = 0.8, alpha: float = ALPHA, stop: int = 20000) -> int | None:
    """The fewest concept-learning prompts (each with one twin of every kind; ``share`` of them get a threshold-shifted
    one) at which the label test against a learner and the threshold test against a mirror both reach ``target``."""
    if not share > 0:
        return None
    n = 4
    while n < stop:
        if mcnemar_power(*reference_cells("labels", "learner"), n, alpha) >= target and \
                mcnemar_power(*reference_cells("threshold", "mirror"), int(n * share), alpha, True) >= target:
            return n
        n += 2 if n < 200 else 10
    return None


__all__ = ["KINDS", "EQUIVALENCE_MARGIN", "check", "rng_for", "shifted_concept", "draw_examples", "agresti_min",
           "mcnemar_exact", "threshold_p", "pair_frame", "table", "prior_component", "mcnemar_power",
           "reference_cells", "prompts_needed", "counts_component", "joint_component", "copy_component", "is_original",
           "originals", "power_block"]
