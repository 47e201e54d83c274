"""What did the model learn? Candidate rules' answers to every prompt, and how well each matches the model's answers.

Accuracy says whether a model learned "less than 1/3"; agreement with a grid of alternative rules says what it
learned instead. The papers' Discussion (Wang) hypothesises that downward concepts carry a hidden negation and
that models fall back to the simpler upward counterpart, here the rule ``mirror`` ("more than 1/3" for
"less than 1/3"). Every answer is recomputed from the prompt's own text with exact integer arithmetic, so a query
exactly at the threshold (4 of 12 for 1/3) is answered as the concept's definition says, never as a float rounds.

Note for reading the mirror test: the mirror gives the opposite answer to the true concept everywhere except at the
threshold itself (both say No there), so agreement with ``mirror`` is close to 1 − accuracy. The rule grid and the informative-prompt
agreement are what tell a model that learned the mirror from one that learned some other wrong rule.
"""
from __future__ import annotations

import re
import string
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pandas as pd
from scipy import stats as sps

from ...artifacts import json_clean
from ...stats import holm, wilson
from . import variants
from .quantifiers import Concept, parse_concept

PROPORTION_GRID = tuple(sorted({Fraction(i, 10) for i in range(1, 10)} | {Fraction(1, d) for d in range(2, 7)}))
CARDINAL_GRID = tuple(Fraction(n) for n in range(5, 100, 5))
BASE_RULES = ("true_concept", "mirror", "always_yes", "always_no", "last_label", "nearest_example", "knn_majority")
CONCEPT_KEYS = ["family", "quantifier", "threshold", "monotonicity"]

_LINE_RE = re.compile(
    r"There\s+are\s+(?P<total>\d+)\s+(?P<noun>.+?)\s*\.\s*Alice\s+has\s+(?P<count>\d+)\s+of\s+the\s+(?P=total)\s+(?P=noun)"
    r"\s*\.\s*Does\s+Alice\s+have\s+(?P<phrase>.+?)\s+of\s+the\s+(?P=noun)\s*\?(?:\s*(?P<answer>Yes|No)\s*\.?)?"
)


def _variant_res() -> list[re.Pattern]:
    """The papers' line pattern (spacing as written by hand), then one per template of the variant catalogue with
    any of its answer words."""
    cat = variants.catalogue()
    answers = "|".join(re.escape(w) for pair in cat["answer_words"].values() for w in pair)
    out = [_LINE_RE]
    for text in cat["templates"].values():
        seen, parts = set(), []
        for literal, field, _, _ in string.Formatter().parse(text):
            parts.append(r"\s+".join(re.escape(w) for w in literal.split(" ")))
            if field:
                group = {"T": "total", "N": "count", "obj": "noun", "phrase": "phrase"}[field]
                pat = {"total": r"\d+", "count": r"\d+", "noun": r".+?", "phrase": r".+?"}[group]
                parts.append(f"(?P={group})" if group in seen else f"(?P<{group}>{pat})")
                seen.add(group)
        out.append(re.compile("".join(parts) + rf"(?:\s*(?P<answer>{answers})\s*\.?)?"))
    return out


def _match_line(line: str):
    """The first template pattern the line matches in full (None: none does)."""
    return next((m for m in (p.fullmatch(line) for p in _VARIANT_RES) if m), None)


def _is_yes(answer: str) -> bool:
    """Whether an answer word is its pair's affirmative one (Yes, True, …)."""
    return answer in _AFFIRMATIVE


_AFFIRMATIVE = {pair[0] for pair in variants.catalogue()["answer_words"].values()}
_VARIANT_RES = _variant_res()


@dataclass(frozen=True)
class Rule:
    """A candidate rule; threshold rules carry their quantifier, exact value and family."""

    name: str
    kind: str  # "concept" | "mirror" | "constant" | "memory" | "grid"
    quantifier: str | None = None
    value: Fraction | None = None
    family: str | None = None

    def answer(self, total: np.ndarray, count: np.ndarray) -> np.ndarray:
        """A threshold rule's answers, exact: count·den vs num·total (proportions) or count·den vs num (cardinals)."""
        lhs = np.asarray(count, dtype=np.int64) * self.value.denominator
        rhs = self.value.numerator * (np.asarray(total, dtype=np.int64) if self.family == "proportional" else 1)
        return lhs > rhs if self.quantifier == "more_than" else lhs < rhs


def _spell(quantifier: str, value: Fraction) -> str:
    return f"{quantifier.replace('_', ' ')} {value}"


def rule_rank(rule: Rule) -> tuple:
    """Display order shared by every concept: the named rules, then the grid (proportions before cardinals,
    "more than" before "less than", by threshold)."""
    if rule.kind != "grid":
        return (0, BASE_RULES.index(rule.name))
    return (1, rule.family != "proportional", rule.quantifier != "more_than", rule.value)


def candidate_rules(concept: Concept) -> list[Rule]:
    """Every rule compared with a concept's answers, in display order (grid rules equal to the concept or its
    mirror are left out: they are ``true_concept`` and ``mirror`` under another name)."""
    other = "less_than" if concept.quantifier == "more_than" else "more_than"
    rules = [Rule("true_concept", "concept", concept.quantifier, concept.value, concept.family),
             Rule("mirror", "mirror", other, concept.value, concept.family),
             Rule("always_yes", "constant"), Rule("always_no", "constant"),
             Rule("last_label", "memory"), Rule("nearest_example", "memory"), Rule("knn_majority", "memory")]
    grids = [("proportional", PROPORTION_GRID)] + ([("cardinal", CARDINAL_GRID)] if concept.family == "cardinal" else [])
    for family, grid in grids:
        for quant in ("more_than", "less_than"):
            for v in grid:
                if not (family == concept.family and v == concept.value):
                    rules.append(Rule(_spell(quant, v), "grid", quant, v, family))
    return rules


@dataclass
class Examples:
    """The labeled examples and the query of prompts that share one number of examples, as (prompts × n) arrays."""

    prompt_id: np.ndarray
    total: np.ndarray
    count: np.ndarray
    label: np.ndarray
    query_total: np.ndarray
    query_count: np.ndarray


def parse_examples(prompts: pd.DataFrame) -> Examples:
    """Read each prompt's examples back from its text; one clear ValueError naming the prompt when it does not fit.

    Every prompt must hold ``n_examples`` answered lines of the papers' template and a final unanswered query whose
    numbers equal ``query_total``/``query_count``; all prompts passed together must share ``n_examples``.
    """
    ns = prompts["n_examples"].unique()
    if len(ns) != 1:
        raise ValueError(f"parse_examples: prompts with different n_examples ({sorted(ns)}) must be parsed separately")
    n = int(ns[0])
    p = len(prompts)
    total, count = np.empty((p, n), np.int64), np.empty((p, n), np.int64)
    label = np.empty((p, n), bool)
    ids = prompts["prompt_id"].to_numpy()
    qt_col, qc_col = prompts["query_total"].to_numpy(), prompts["query_count"].to_numpy()
    for i, (pid, text) in enumerate(zip(ids, prompts["text"])):
        lines = [line.strip() for line in str(text).splitlines() if line.strip()]
        matches = [_match_line(line) for line in lines]
        bad = next((j for j, m in enumerate(matches) if m is None), None)
        if bad is not None:
            raise ValueError(f"prompt {pid}: line {bad + 1} does not follow the template "
                             f"'There are T N. Alice has C of the T N. Does Alice have ... of the N? Yes.' nor another "
                             f"template of the variant catalogue: {lines[bad]!r}")
        if len(matches) != n + 1:
            raise ValueError(f"prompt {pid}: has {len(matches)} lines, expected n_examples={n} examples and one query")
        answers = [m["answer"] for m in matches]
        if any(a is None for a in answers[:-1]) or answers[-1] is not None:
            raise ValueError(f"prompt {pid}: every example line must end with 'Yes.' or 'No.' (or the catalogue's other "
                             "answer words) and the last (query) "
                             "line must have no answer")
        nums = np.array([(int(m["total"]), int(m["count"])) for m in matches])
        if (nums[:, 1] > nums[:, 0]).any():
            raise ValueError(f"prompt {pid}: an example has a count larger than its total")
        if (nums[-1, 0], nums[-1, 1]) != (qt_col[i], qc_col[i]):
            raise ValueError(f"prompt {pid}: query line says {nums[-1, 1]} of {nums[-1, 0]} but the columns say "
                             f"query_count={qc_col[i]}, query_total={qt_col[i]}")
        total[i], count[i] = nums[:-1, 0], nums[:-1, 1]
        label[i] = [_is_yes(a) for a in answers[:-1]]
    return Examples(ids, total, count, label, qt_col.astype(np.int64), qc_col.astype(np.int64))


def _proportion_distance(t1, c1, t2, c2) -> np.ndarray:
    """|c1/t1 − c2/t2| as one correctly rounded division of exact integers, so equal distances compare equal."""
    return np.abs(c1 * t2 - c2 * t1) / (t1 * t2)


def _nearest_first(dist: np.ndarray) -> np.ndarray:
    """Indices along the last axis by increasing distance; equal distances go to the later (more recent) example."""
    n = dist.shape[-1]
    return n - 1 - np.argsort(dist[..., ::-1], axis=-1, kind="stable")


def _vote(labels_sorted: np.ndarray, k: int) -> np.ndarray:
    """Majority label of the first k; a tied vote (even k) goes to the nearest example's label."""
    yes = labels_sorted[..., :k].sum(axis=-1)
    return np.where(2 * yes == k, labels_sorted[..., 0], 2 * yes > k)


def check_k(k, n_examples: int) -> int:
    """``rules_k`` must be a whole number between 1 and the number of examples per prompt."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n_examples:
        raise ValueError(f"rules_k: the knn_majority rule needs an integer 1 ≤ k ≤ {n_examples} (the examples per "
                         f"prompt), got {k!r}")
    return int(k)


def rule_matrix(prompts: pd.DataFrame, concept: Concept, k: int = 5) -> tuple[list[Rule], np.ndarray, np.ndarray]:
    """Answers (prompts × rules, bool) and examples labeled correctly (prompts × rules, int) for one concept.

    Memory rules label an example the way they answer the query: ``last_label`` from the example shown just before
    it (the first example, with nothing before it, counts as not labeled), ``nearest_example`` and ``knn_majority``
    from the other examples (leave one out; at most n − 1 neighbours). Distances are between proportions for
    proportional concepts and between counts for cardinal ones, the quantity the concept is defined on.
    """
    ex = parse_examples(prompts)
    n = ex.total.shape[1]
    if n < 2:
        raise ValueError(f"n_examples: rule agreement needs at least 2 examples per prompt, got {n}")
    k = check_k(k, n)
    rules = candidate_rules(concept)
    qt, qc = ex.query_total, ex.query_count
    if concept.family == "proportional":
        dq = _proportion_distance(ex.total, ex.count, qt[:, None], qc[:, None])
        dx = _proportion_distance(ex.total[:, :, None], ex.count[:, :, None], ex.total[:, None, :], ex.count[:, None, :])
    else:
        dq = np.abs(ex.count - qc[:, None]).astype(float)
        dx = np.abs(ex.count[:, :, None] - ex.count[:, None, :]).astype(float)
    dx[:, np.arange(n), np.arange(n)] = np.inf  # leave the example itself out
    lab_q = np.take_along_axis(ex.label, _nearest_first(dq), axis=1)  # (P, n) labels, nearest first
    lab_x = np.take_along_axis(np.broadcast_to(ex.label[:, None, :], dx.shape), _nearest_first(dx), axis=2)[..., :-1]
    answers = np.empty((len(qt), len(rules)), bool)
    correct = np.empty((len(qt), len(rules)), np.int64)
    for j, r in enumerate(rules):
        if r.value is not None:
            answers[:, j], on_ex = r.answer(qt, qc), r.answer(ex.total, ex.count)
        elif r.name in ("always_yes", "always_no"):
            answers[:, j] = r.name == "always_yes"
            on_ex = np.full(ex.label.shape, r.name == "always_yes")
        elif r.name == "last_label":
            answers[:, j] = ex.label[:, -1]
            on_ex = np.concatenate([~ex.label[:, :1], ex.label[:, :-1]], axis=1)  # first example: never right
        elif r.name == "nearest_example":
            answers[:, j], on_ex = lab_q[:, 0], lab_x[..., 0]
        else:
            answers[:, j], on_ex = _vote(lab_q, k), _vote(lab_x, min(k, n - 1))
        correct[:, j] = (on_ex == ex.label).sum(axis=1)
    return rules, answers, correct


def predict(prompts: pd.DataFrame, k: int = 5) -> pd.DataFrame:
    """Long table: for every prompt and candidate rule, the rule's answer and how many of the examples it labels right."""
    frames = []
    for (concept, _), g in prompts.drop_duplicates("prompt_id").groupby(["concept", "n_examples"], sort=False):
        rules, answers, correct = rule_matrix(g, parse_concept(concept, "concept"), k)
        frames.append(pd.DataFrame({
            "prompt_id": np.repeat(g["prompt_id"].to_numpy(), len(rules)),
            "concept": concept, "rule": np.tile([r.name for r in rules], len(g)),
            "rule_kind": np.tile([r.kind for r in rules], len(g)),
            "answer": answers.ravel(), "examples_correct": correct.ravel(),
            "n_examples": np.repeat(g["n_examples"].to_numpy(), len(rules))}))
    return pd.concat(frames, ignore_index=True)


def _best(agree: np.ndarray, answers: np.ndarray, names: list[str]) -> dict:
    """Best rule and runner-up among rules that answer differently somewhere (identical answers form one class,
    named by its first rule in display order); ``tied`` lists other classes with the best's agreement."""
    _, inverse = np.unique(answers.T, axis=0, return_inverse=True)
    inverse = np.asarray(inverse).ravel()
    reps = sorted({int(np.flatnonzero(inverse == c)[0]) for c in np.unique(inverse)}, key=lambda j: (-agree[j], j))
    b = reps[0]
    out = {"best_rule": names[b], "best_agreement": agree[b],
           "equivalent": ";".join(names[j] for j in np.flatnonzero(inverse == inverse[b]) if j != b),
           "tied": ";".join(names[j] for j in reps[1:] if agree[j] == agree[b]), "_best": b}
    if len(reps) > 1:
        out.update(runner_up=names[reps[1]], runner_up_agreement=agree[reps[1]], margin=agree[b] - agree[reps[1]])
    else:
        out.update(runner_up=None, runner_up_agreement=np.nan, margin=np.nan)
    return out


DEFAULT_K = 5  # neighbours of the knn_majority rule when none is asked for (fewer when a prompt has fewer examples)


def rule_tables(scores: pd.DataFrame, k: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per model × condition × concept: agreement of the model's answers with every rule (``rules``) and the best
    rule with its margin over the runner-up (``best_rule``); one pass, rules computed once per prompt. ``k``: the
    knn_majority rule's neighbours; None takes ``DEFAULT_K``, or the prompts' number of examples when it is smaller."""
    if scores.empty:
        return pd.DataFrame(), pd.DataFrame()
    rule_rows, best_rows = [], []
    every = {rule_rank(r) for c in scores["concept"].unique() for r in candidate_rules(parse_concept(c, "concept"))}
    rank_of = {key: i for i, key in enumerate(sorted(every))}
    for (concept_name, _), g in scores.groupby(["concept", "n_examples"], sort=False):
        concept = parse_concept(concept_name, "concept")
        g = g.reset_index(drop=True)
        uniq = g.drop_duplicates("prompt_id")
        n_ex = int(uniq["n_examples"].iloc[0])
        rules, answers, correct = rule_matrix(uniq, concept, min(DEFAULT_K, n_ex) if k is None else k)
        if "label" in uniq and (answers[:, 0] != uniq["label"].to_numpy(bool)).any():
            bad = uniq["prompt_id"].to_numpy()[answers[:, 0] != uniq["label"].to_numpy(bool)][0]
            raise ValueError(f"prompt {bad}: its label disagrees with {concept_name!r} applied to its query")
        names, kinds = [r.name for r in rules], [r.kind for r in rules]
        order = [rank_of[rule_rank(r)] for r in rules]
        row_of = pd.Index(uniq["prompt_id"]).get_indexer(g["prompt_id"])
        for (model, condition), pos in g.groupby(["model", "condition"], sort=False).indices.items():
            h, idx = g.iloc[pos], row_of[pos]
            a, y = answers[idx], h["pred_yes"].to_numpy(bool)
            agree_m = a == y[:, None]
            inform = a != a[:, :1]
            n, n_agree = len(y), agree_m.sum(axis=0)
            n_inf, k_inf = inform.sum(axis=0), (agree_m & inform).sum(axis=0)
            c = correct[idx]
            keys = {"model": model, "condition": condition, "concept": concept_name,
                    **{col: h[col].iloc[0] for col in CONCEPT_KEYS}}
            agreement = n_agree / n
            for j, name in enumerate(names):
                lo, hi = wilson(int(n_agree[j]), n)
                ilo, ihi = wilson(int(k_inf[j]), int(n_inf[j]))
                rule_rows.append({**keys, "rule": name, "rule_kind": kinds[j], "rule_order": order[j], "n": n, "n_agree": int(n_agree[j]),
                                  "agreement": agreement[j], "ci_low": lo, "ci_high": hi,
                                  "n_informative": int(n_inf[j]),
                                  "agreement_informative": k_inf[j] / n_inf[j] if n_inf[j] else np.nan,
                                  "informative_ci_low": ilo, "informative_ci_high": ihi,
                                  "rule_yes_rate": a[:, j].mean(), "model_yes_rate": y.mean(),
                                  "examples_correct_mean": c[:, j].mean(),
                                  "examples_consistent": (c[:, j] == n_ex).mean(), "k": k})
            best = _best(agreement, a, names)
            lo, hi = wilson(int(n_agree[best.pop("_best")]), n)
            best_rows.append({**keys, "n": n, **best, "best_ci_low": lo, "best_ci_high": hi,
                              "accuracy": agreement[0], "mirror_agreement": agreement[1]})
    return pd.DataFrame(rule_rows), pd.DataFrame(best_rows)


def exact_stratified_p(strata: list[tuple[int, int, int, int]]) -> float:
    """One-sided exact conditional test that group A agrees more than group B, stratified (Birch's exact test).

    Each stratum is (k_a, n_a, k_b, n_b). Given each stratum's margins, A's agreements follow a hypergeometric
    law under the null of equal rates within the stratum; the statistic Σ k_a is their sum, whose exact law is
    the convolution. With one stratum this is Fisher's exact test (alternative "greater").
    """
    pmf, observed = np.array([1.0]), 0
    for k_a, n_a, k_b, n_b in strata:
        support = np.arange(0, n_a + 1)
        pmf = np.convolve(pmf, sps.hypergeom(n_a + n_b, k_a + k_b, n_a).pmf(support))
        observed += k_a
    return float(min(1.0, pmf[observed:].sum()))


def mirror_test(rules: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The papers' hypothesis: downward concepts are answered as their mirror above chance, and more often than
    upward concepts are answered as theirs (paired by threshold).

    Above chance: Fisher's exact test (one-sided) on model answer × mirror answer, i.e. chance is what a model
    with its own yes-rate, answering independently of the mirror, would reach — a plain binomial against 50%
    would count a pure response bias as agreement whenever the mirror's yes-rate is not exactly one half. Holm
    over the downward concepts of a model and condition. Versus upward: the two concepts of a threshold have
    different prompts, so Fisher's exact test per threshold (Holm over thresholds), and pooled over thresholds
    the exact stratified test (each threshold compared only with itself; no large-sample approximation, which
    small runs would not support), Holm over models within a condition.
    """
    m = rules[rules["rule"] == "mirror"] if len(rules) else rules
    if m.empty:
        return pd.DataFrame(), pd.DataFrame()
    rows, pooled = [], []
    for (model, condition), g in m.groupby(["model", "condition"], sort=False):
        up = {(r.family, r.threshold): r for r in g[g["monotonicity"] == "upward"].itertuples(index=False)}
        strata, summed = [], np.zeros((2, 2), dtype=int)
        for r in g[g["monotonicity"] == "downward"].itertuples(index=False):
            yes_both = round((r.n_agree + r.model_yes_rate * r.n + r.rule_yes_rate * r.n - r.n) / 2)
            yes_model, yes_rule = round(r.model_yes_rate * r.n), round(r.rule_yes_rate * r.n)
            table = [[yes_both, yes_model - yes_both], [yes_rule - yes_both, r.n - yes_model - yes_rule + yes_both]]
            summed += np.array(table, dtype=int)
            row = {"model": model, "condition": condition, "concept": r.concept, "family": r.family,
                   "threshold": r.threshold, "n_down": r.n, "mirror_agreement_down": r.agreement,
                   "p_above_chance": float(sps.fisher_exact(table, alternative="greater").pvalue)}
            u = up.get((r.family, r.threshold))
            if u is not None:
                strata.append((r.n_agree, r.n, u.n_agree, u.n))
                row.update(upward_concept=u.concept, n_up=u.n, mirror_agreement_up=u.agreement,
                           difference=r.agreement - u.agreement,
                           p_vs_upward=exact_stratified_p([(r.n_agree, r.n, u.n_agree, u.n)]))
            rows.append(row)
        if strata:
            k_d, n_d, k_u, n_u = (sum(s[i] for s in strata) for i in range(4))
            pooled.append({"model": model, "condition": condition, "n_thresholds": len(strata), "n_down": n_d,
                           "n_up": n_u, "mirror_agreement_down": k_d / n_d, "mirror_agreement_up": k_u / n_u,
                           "difference": k_d / n_d - k_u / n_u, "p_exact_stratified": exact_stratified_p(strata),
                           # beyond chance: the downward answers agree with the mirror more than answers with the
                           # model's own Yes-rate, given independently of it, would (Fisher, one-sided, the
                           # downward concepts' tables summed)
                           "p_down_above_chance": float(sps.fisher_exact(summed, alternative="greater").pvalue)})
    out = pd.DataFrame(rows)
    if len(out):
        out["p_above_chance_holm"] = out.groupby(["model", "condition"])["p_above_chance"].transform(lambda s: holm(s.to_numpy()))
        if "p_vs_upward" in out:
            out["p_vs_upward_holm"] = out.groupby(["model", "condition"])["p_vs_upward"].transform(lambda s: holm(s.to_numpy()))
    pooled = pd.DataFrame(pooled)
    if len(pooled):
        pooled["p_holm_models"] = pooled.groupby("condition")["p_exact_stratified"].transform(lambda s: holm(s.to_numpy()))
    return out, pooled


def summary_records(best: pd.DataFrame) -> list[dict]:
    """For summary.json: the best rule per model × condition × concept, with its margin and the accuracy."""
    cols = ["model", "condition", "concept", "n", "best_rule", "best_agreement", "runner_up", "margin", "accuracy",
            "mirror_agreement"]
    return json_clean(best[cols].to_dict("records")) if len(best) else []
