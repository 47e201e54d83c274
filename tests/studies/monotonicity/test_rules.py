"""Rule agreement: simulated models whose rule is known are identified; rule answers match the definitions exactly."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from nbutils.studies.common import rules
from nbutils.studies.common.quantifiers import PHRASE, parse_concept, render_line
from nbutils.studies.monotonicity import analysis
from nbutils.studies.monotonicity.dataset import generate_prompts
from notebook_checks import assert_figure

CONCEPTS = ["more than 1/2", "less than 1/2", "more than 1/3", "less than 1/3", "more than 20", "less than 20"]


@pytest.fixture(scope="module")
def prompts() -> pd.DataFrame:
    return generate_prompts(CONCEPTS, prompts_per_concept=60, n_examples=20, seed=5)


def answered(prompts: pd.DataFrame, model: str, pred) -> pd.DataFrame:
    pred = np.asarray(pred, dtype=bool)
    return prompts.assign(model=model, pred_yes=pred, correct=pred == prompts["label"].to_numpy(), margin=0.0)


def mirror_answers(prompts: pd.DataFrame) -> list[bool]:
    """Downward concepts answered as "more than" the same threshold, upward ones correctly (the seeds' hypothesis)."""
    out = []
    for r in prompts.itertuples(index=False):
        if r.monotonicity == "upward":
            out.append(bool(r.label))
        else:
            out.append(parse_concept(f"more than {r.threshold}").holds(r.query_total, r.query_count))
    return out


def test_mirror_model_is_identified(prompts):
    rt, best = rules.rule_tables(answered(prompts, "mirror-bot", mirror_answers(prompts)), k=5)
    for b in best.itertuples(index=False):
        want = "mirror" if b.monotonicity == "downward" else "true_concept"
        assert b.best_rule == want and b.best_agreement == 1.0 and b.margin > 0, (b.concept, b.condition, b.best_rule)
    mirror = rt[(rt.rule == "mirror") & (rt.monotonicity == "downward")]
    assert (mirror["agreement_informative"] == 1).all() and (mirror["n_informative"] > 40).all()
    per_concept, pooled = rules.mirror_test(rt)
    assert len(per_concept) == 3 * 2 and (per_concept["p_above_chance_holm"] < 1e-6).all()
    assert (per_concept["p_vs_upward_holm"] < 1e-6).all() and (per_concept["difference"] > 0.9).all()
    assert (pooled["n_thresholds"] == 3).all() and (pooled["p_exact_stratified"] < 1e-12).all()


def test_accurate_model_does_not_support_the_hypothesis(prompts):
    rt, best = rules.rule_tables(answered(prompts, "oracle", prompts["label"]), k=5)
    assert (best["best_rule"] == "true_concept").all()
    per_concept, pooled = rules.mirror_test(rt)
    assert (per_concept["p_above_chance"] > 0.5).all() and (pooled["p_exact_stratified"] > 0.05).all()


def test_last_label_model_is_identified(prompts):
    last_shown = prompts["text"].str.split("\n").str[-2].str.endswith("Yes.")  # the line before the query
    _, best = rules.rule_tables(answered(prompts, "copycat", last_shown), k=5)
    assert (best["best_rule"] == "last_label").all() and (best["best_agreement"] == 1).all()
    assert (best["margin"] > 0.1).all()


def test_random_model_is_not_above_chance_on_the_mirror(prompts):
    rng = np.random.default_rng(0)
    rt, _ = rules.rule_tables(answered(prompts, "coin", rng.random(len(prompts)) < 0.5), k=5)
    per_concept, pooled = rules.mirror_test(rt)
    assert (per_concept["p_above_chance_holm"] > 0.01).all() and (pooled["p_holm_models"] > 0.01).all()


def hand_prompt(concept: str, examples: list[tuple[int, int]], query: tuple[int, int], pid: str = "hand") -> pd.DataFrame:
    """One prompt in the generator's template; example labels come from the concept, as in the real dataset."""
    c = parse_concept(concept)
    lines = [render_line(t, n, "apples", PHRASE, c.holds(t, n)) for t, n in examples]
    lines.append(render_line(*query, "pears", PHRASE, None))
    return pd.DataFrame([{"prompt_id": pid, "pair_id": pid, "concept": c.name, "family": c.family,
                          "quantifier": c.quantifier, "threshold": c.threshold, "monotonicity": c.monotonicity,
                          "condition": "concept_learning", "n_examples": len(examples), "text": "\n".join(lines),
                          "label": c.holds(*query), "query_total": query[0], "query_count": query[1]}])


def oracle(rule: str, total: int, count: int) -> bool:
    """A grid rule's answer from its definition, in exact rationals."""
    quant, value = rule.rsplit(" ", 1)
    ref = Fraction(count, total) if "/" in value else Fraction(count)
    return ref > Fraction(value) if quant == "more than" else ref < Fraction(value)


@pytest.mark.parametrize("concept,query", [("less than 3/10", (10, 3)), ("more than 3/10", (70, 21)),
                                           ("less than 1/3", (12, 4)), ("more than 7/10", (30, 21)),
                                           ("less than 20", (40, 20)), ("more than 1/6", (36, 6))])
def test_rule_answers_match_the_definitions_at_the_threshold(concept, query):
    examples = [(10, 1), (10, 9), (50, 5), (50, 45), (20, 6), (30, 10), (90, 27), (60, 40)]
    p = hand_prompt(concept, examples, query)
    got = rules.predict(p, k=3).set_index("rule")
    assert not got.loc["true_concept", "answer"], "a query exactly at the threshold is never 'more' or 'less'"
    assert not got.loc["mirror", "answer"]
    assert got.loc["always_yes", "answer"] and not got.loc["always_no", "answer"]
    for name in got.index[got["rule_kind"] == "grid"]:
        assert got.loc[name, "answer"] == oracle(name, *query), name
        assert got.loc[name, "examples_correct"] == sum(oracle(name, t, n) == parse_concept(concept).holds(t, n)
                                                        for t, n in examples), name
    assert got.loc["true_concept", "examples_correct"] == len(examples)
    assert got.loc["always_yes", "examples_correct"] == sum(parse_concept(concept).holds(t, n) for t, n in examples)


def test_memory_rules_by_hand():
    # "more than 1/2": labels No, Yes, No, Yes, Yes for 2/10, 6/10, 4/10, 9/10, 7/10
    examples = [(10, 2), (10, 6), (10, 4), (10, 9), (10, 7)]
    got = rules.predict(hand_prompt("more than 1/2", examples, (10, 5)), k=3).set_index("rule")
    assert got.loc["last_label", "answer"]  # 7/10 was shown last
    # 4/10 and 6/10 are equally close to 5/10 (exactly, not in floating point): the later one shown, 4/10 (No), wins
    assert not got.loc["nearest_example", "answer"]
    assert got.loc["knn_majority", "answer"]  # 4/10 No, 6/10 Yes, 7/10 Yes
    # last_label labels example i with example i-1's label: right only for 7/10 (after 9/10, both Yes)
    assert got.loc["last_label", "examples_correct"] == 1
    # leave one out: 2→4 (No ✓), 6→7 (Yes ✓), 4→ tie of 2 and 6, the later 6 (Yes ✗), 9→7 (Yes ✓), 7→6 (Yes ✓)
    assert got.loc["nearest_example", "examples_correct"] == 4


def test_cardinal_memory_rules_use_counts():
    # "less than 20": 30 of 100 is far from 19 of 20 in proportion but close in count
    examples = [(100, 30), (20, 19), (100, 2), (40, 25)]
    got = rules.predict(hand_prompt("less than 20", examples, (100, 21)), k=1).set_index("rule")
    assert got.loc["nearest_example", "answer"]  # nearest count to 21 is 19 (Yes), not 25 or 30
    assert got.loc["nearest_example", "answer"] == got.loc["knn_majority", "answer"]


def test_grid_is_the_issue_grid():
    names = {r.name for r in rules.candidate_rules(parse_concept("less than 1/3"))}
    for q in ["1/10", "1/5", "3/10", "2/5", "1/2", "3/5", "7/10", "4/5", "9/10", "1/4", "1/6"]:
        assert {f"more than {q}", f"less than {q}"} <= names
    assert "less than 1/3" not in names and "more than 1/3" not in names, "they are true_concept and mirror"
    assert not any(n.endswith(" 20") for n in names)
    card = {r.name for r in rules.candidate_rules(parse_concept("more than 20"))}
    assert {f"more than {n}" for n in range(5, 100, 5) if n != 20} <= card and "more than 20" not in card
    assert set(rules.BASE_RULES) <= card


def test_malformed_prompts_raise_a_clear_error():
    p = hand_prompt("more than 1/2", [(10, 2), (10, 8)], (10, 6), pid="bad-1")
    broken = p.assign(text=p["text"].str.replace("Alice has 8", "Bob has 8"))
    with pytest.raises(ValueError, match="prompt bad-1: line 2 does not follow the template"):
        rules.predict(broken)
    with pytest.raises(ValueError, match="prompt bad-1: query line says 6 of 10.*query_count=7"):
        rules.predict(p.assign(query_count=7), k=1)
    with pytest.raises(ValueError, match="prompt bad-1: has 3 lines, expected n_examples=4"):
        rules.predict(p.assign(n_examples=4), k=1)
    with pytest.raises(ValueError, match="rules_k: .*1 ≤ k ≤ 2"):
        rules.predict(p, k=3)


def test_exact_stratified_test_is_fisher_for_one_stratum_and_adds_up_strata():
    assert rules.exact_stratified_p([(9, 12, 3, 10)]) == pytest.approx(
        sps.fisher_exact([[9, 3], [3, 7]], alternative="greater").pvalue, rel=1e-9)
    # two identical strata are stronger evidence than one, and a reversed one cancels it
    one = rules.exact_stratified_p([(9, 12, 3, 10)])
    assert rules.exact_stratified_p([(9, 12, 3, 10)] * 2) < one
    assert rules.exact_stratified_p([(9, 12, 3, 10), (3, 12, 9, 10)]) > 0.3


@pytest.mark.slow  # ~10 s: the whole analysis and its figures
def test_analysis_writes_rule_tables_figure_and_summary(prompts, tmp_path):
    scores = pd.concat([answered(prompts, "mirror-bot", mirror_answers(prompts)),
                        answered(prompts, "oracle", prompts["label"])], ignore_index=True)
    a = analysis.compute(scores, n_boot=50, rules_k=3, use_r=False)  # the GLMM is tested elsewhere
    assert {"rules", "best_rule", "mirror_test"} <= set(a.tables)
    assert (a.tables["rules"]["k"] == 3).all()
    files = analysis.write(a, tmp_path)
    table = pd.read_csv(tmp_path / "tables" / "rules.csv")
    assert {"model", "condition", "concept", "rule", "agreement", "ci_low", "ci_high", "n"} <= set(table.columns)
    assert (table["ci_low"] <= table["agreement"] + 1e-12).all() and (table["agreement"] <= table["ci_high"] + 1e-12).all()
    best = pd.read_csv(tmp_path / "tables" / "best_rule.csv")
    assert len(best) == 2 * 2 * len(CONCEPTS)
    assert_figure(tmp_path / "figures" / "rule_agreement.png")
    assert tmp_path / "figures" / "rule_agreement.pdf" in files
    recs = {(r["model"], r["condition"], r["concept"]): r["best_rule"] for r in a.summary["rules"]}
    assert recs[("mirror-bot", "concept_learning", "less than 1/3")] == "mirror"
    assert recs[("oracle", "explicit", "less than 1/3")] == "true_concept"
