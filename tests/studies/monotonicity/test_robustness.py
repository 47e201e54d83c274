"""The robustness multiverse: the variant catalogue, how the generator deals variants (the defaults give the prompts of
before, byte for byte), the answer words scored, the rule analysis reading every template back, and the analysis
(the gap per variant, the heterogeneity test, its records, sentence, table and figure) on simulated scores."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nbutils.results import _words as results

from nbutils.stats import r_available
from nbutils.studies.common import quantifier_mixed_models as qmixed, rules, variants
from nbutils.studies.monotonicity import analysis, dataset, robustness
from nbutils.studies.monotonicity.dataset import COLUMNS, generate_prompts
from notebook_checks import assert_figure

ROOT = Path(__file__).resolve().parents[3]
OLD_COLUMNS = COLUMNS[:-3]  # the columns a dataset had before the variant axes
PAIR = ["more than 1/2", "less than 1/2"]

# sha256 of the rows (as strings, every column of before) that the generator gave before the variant axes existed,
# recorded with that generator: the defaults must give exactly these prompts
BEFORE = [
    (dict(concepts=["more than 1/2", "less than 3/10", "more than 20", "less than 20"], prompts_per_concept=40,
          n_examples=20, seed=7), 320, "7043ed40dc1f4cedfe089653d501d28dd400d26e30c4a8adc51f704779fc1788"),
    (dict(concepts=PAIR, prompts_per_concept=24, n_examples=20, seed=0, conditions=["concept_learning"]), 48,
     "710a7f579f67ddc217f42a4144dcdda5bbd70a535e97da7255656d425e8859df"),
]


def _sha(df: pd.DataFrame) -> str:
    return hashlib.sha256(json.dumps(df.astype(str).to_dict("records"), sort_keys=True).encode()).hexdigest()


@pytest.mark.parametrize("params,rows,sha", BEFORE, ids=["four-concepts-seed7", "one-condition"])
def test_default_parameters_give_the_prompts_of_before(params, rows, sha):
    df = generate_prompts(**params)
    assert len(df) == rows and _sha(df[OLD_COLUMNS]) == sha
    assert (df["template"] == "paper").all() and (df["phrase"] == "desired_quantity").all()
    assert (df["answer_words"] == "yes_no").all()
    explicit = generate_prompts(**params, templates=["paper"], phrases=["desired_quantity"], answer_words=["yes_no"])
    pd.testing.assert_frame_equal(df, explicit)


@pytest.fixture(scope="module")
def multi() -> pd.DataFrame:
    return generate_prompts(PAIR + ["more than 1/3", "less than 1/3"], prompts_per_concept=24, templates="all",
                            phrases="all", answer_words="all", seed=3)


def test_catalogue_holds_the_promised_variants():
    assert len(variants.names("template")) >= 4 and "paper" in variants.names("template")
    assert variants.template("paper").format(T="{T}", N="{N}", obj="{obj}", phrase="{phrase}") == \
        "There are {T} {obj}. Alice has {N} of the {T} {obj}. Does Alice have {phrase} of the {obj}?"
    phrases = [variants.phrase(n) for n in variants.names("phrase")]
    assert len(phrases) >= 3 and "the desired quantity" in phrases and "bnik" in phrases
    assert variants.words("yes_no") == ("Yes", "No") and variants.words("true_false") == ("True", "False")


def test_variants_are_dealt_balanced_seeded_and_twins_keep_them(multi):
    assert len(multi) == 4 * 24 * 2  # as many prompts as the plain design
    for axis in variants.AXES:
        counts = multi.groupby(["concept", "condition"])[axis].value_counts().unstack(fill_value=0)
        assert list(counts.columns.sort_values()) == sorted(variants.names(axis))
        assert (counts.max(axis=1) - counts.min(axis=1)).max() <= 1, axis
        by_label = multi.groupby(["concept", "condition", "label"])[axis].value_counts().unstack(fill_value=0)
        assert (by_label.max(axis=1) - by_label.min(axis=1)).max() <= 1, axis
    assert (multi.groupby("pair_id")[list(variants.AXES)].nunique() == 1).all().all()
    again = generate_prompts(PAIR + ["more than 1/3", "less than 1/3"], prompts_per_concept=24, templates="all",
                             phrases="all", answer_words="all", seed=3)
    pd.testing.assert_frame_equal(multi, again)
    other = generate_prompts(PAIR + ["more than 1/3", "less than 1/3"], prompts_per_concept=24, templates="all",
                             phrases="all", answer_words="all", seed=4)
    assert (other["template"] != multi["template"]).any()


def test_text_follows_the_variants_and_the_explicit_twin_states_the_concept(multi):
    for r in multi.itertuples():
        yes, no = variants.words(r.answer_words)
        lines = r.text.split("\n")
        assert all(line.endswith((f" {yes}.", f" {no}.")) for line in lines[:-1]) and lines[-1].endswith("?")
        stem = variants.template(r.template).split("{phrase}")[0].split("{")[0]
        assert all(line.startswith(stem) for line in lines)
        phrase = variants.phrase(r.phrase) if r.condition == "concept_learning" else r.concept
        assert all(f" {phrase} of the " in line for line in lines)


def test_scored_options_and_gold_follow_the_answer_words(multi):
    items = dataset.choice_items(multi)
    assert [tuple(o) for o in items.options] == [variants.words(n) for n in multi["answer_words"]]
    assert items.gold == [variants.words(n)[0 if b else 1] for n, b in zip(multi["answer_words"], multi["label"])]
    plain = generate_prompts(PAIR, prompts_per_concept=4)
    assert dataset.choice_items(plain).options == ("Yes", "No")
    assert dataset.choice_items(plain.drop(columns=["template", "phrase", "answer_words"])).options == ("Yes", "No")
    tf = generate_prompts(PAIR, prompts_per_concept=4, answer_words=["true_false"])
    assert dataset.choice_items(tf).options == ("True", "False")


@pytest.mark.parametrize("kwargs,match", [
    (dict(templates=["paper", "sonnet"]), r"^templates: unknown template variant\(s\) \['sonnet'\]"),
    (dict(phrases="every"), r"^phrases: must be 'all' or a non-empty list"),
    (dict(answer_words=[]), r"^answer_words: must be 'all' or a non-empty list"),
    (dict(templates=["paper", "paper"]), r"^templates: duplicates"),
])
def test_a_bad_variant_parameter_names_itself_and_the_allowed_names(kwargs, match):
    with pytest.raises(ValueError, match=match):
        generate_prompts(PAIR, prompts_per_concept=4, **kwargs)


def test_sidecar_parameters_name_the_variant_axes_only_when_they_differ_from_the_papers():
    base = dataset.parameters(PAIR, ["concept_learning"], 4, 20, 0)
    assert set(base) == {"concepts", "conditions", "prompts_per_concept", "n_examples", "seed"}
    assert dataset.parameters(PAIR, ["concept_learning"], 4, 20, 0, ["paper"], ["desired_quantity"], ["yes_no"]) == base
    assert dataset.parameters(PAIR, ["concept_learning"], 4, 20, 0, "all", ["nonce"], ["yes_no"]) == \
        {**base, "templates": "all", "phrases": ["nonce"]}


def test_rules_read_the_examples_of_every_template_back(multi):
    ex = rules.parse_examples(multi)
    assert (ex.query_total == multi["query_total"]).all() and (ex.query_count == multi["query_count"]).all()
    for i, c in enumerate(multi["concept"]):
        concept = rules.parse_concept(c)
        assert all(concept.holds(t, k) == lab for t, k, lab in zip(ex.total[i], ex.count[i], ex.label[i]))


# ---------------------------------------------------------------- the analysis, on simulated scores

def _scores(prompts: pd.DataFrame, seed: int, gap_only_paper: bool = False, model: str = "sim") -> pd.DataFrame:
    """A scores frame: correct with a gap of log 3 under every template, or of log 8 under ``paper`` only."""
    rng = np.random.default_rng(seed)
    up = (prompts["monotonicity"] == "upward").to_numpy()
    gap = np.log(8.0) * (prompts["template"] == "paper").to_numpy() if gap_only_paper else np.log(3.0)
    correct = rng.random(len(prompts)) < 1 / (1 + np.exp(-(0.2 + up * gap)))
    return prompts.assign(model=model, correct=correct, pred_yes=np.where(correct, prompts["label"], ~prompts["label"]),
                          margin=np.where(correct, 1.0, -1.0))


@pytest.fixture(scope="module")
def big() -> pd.DataFrame:
    return generate_prompts(PAIR + ["more than 1/3", "less than 1/3"], prompts_per_concept=80, templates="all",
                            phrases="all", answer_words="all", seed=3)


@pytest.fixture(scope="module")
def analysed(big):
    return analysis.compute(_scores(big, 0, gap_only_paper=True), n_boot=50, use_r=False)


def test_robustness_table_has_a_row_per_model_condition_axis_variant(analysed, big):
    t = analysed.tables["robustness"]
    for col in ("model", "condition", "axis", "variant", "n", "acc_up", "acc_down", "gap", "log_or", "log_or_ci_low",
                "log_or_ci_high", "p"):
        assert col in t
    assert len(t) == 2 * sum(len(variants.names(a)) for a in variants.AXES)
    s = _scores(big, 0, gap_only_paper=True)
    for r in t.itertuples():
        g = s[(s["condition"] == r.condition) & (s[r.axis] == r.variant)]
        assert r.n == len(g)
        assert r.gap == pytest.approx(g[g.monotonicity == "upward"]["correct"].mean()
                                      - g[g.monotonicity == "downward"]["correct"].mean())
        assert r.gap_ci_low <= r.gap <= r.gap_ci_high and r.log_or_ci_low <= r.log_or <= r.log_or_ci_high
    assert list(t.columns[:5]) == ["model", "condition", "axis", "variant", "wording"]  # what the variant says
    words = {(r.axis, r.variant): r.wording for r in t.itertuples()}
    assert words[("template", "question_first")] == variants.template("question_first")
    assert words[("phrase", "nonce")] == f"“{variants.phrase('nonce')}”"
    assert words[("answer_words", "true_false")] == "True / False"


def test_the_glmm_cross_check_has_its_validity_and_no_p_where_its_fit_is_invalid(big, monkeypatch):
    """``robustness_tests``: ``glmm_lrt_valid`` beside ``p_glmm_lrt``; an invalid fit's p is left blank (the lme4
    fit's outcome is given here: what R returns for a singular or failed fit, the table and records must not show)."""
    s = _scores(big, 0, gap_only_paper=True)
    fits = {}

    def lrt(units, seed=0):
        fits.update({k: {"method": "glmm_lrt", "statistic": 1.0, "df": 3, "p": 0.4, "valid": k.endswith("template"),
                         "note": "" if k.endswith("template") else "singular fit", "random_effects": "(1 | noun)"}
                     for k in units})
        return fits

    monkeypatch.setattr(robustness, "glmm_lrt", lrt)
    het = robustness.heterogeneity(s, use_r=True)
    assert list(het.columns[12:14]) == ["p_glmm_lrt", "glmm_lrt_valid"]
    for r in het.itertuples():
        assert r.glmm_lrt_valid == (r.axis == "template")
        assert (r.p_glmm_lrt == 0.4) if r.glmm_lrt_valid else np.isnan(r.p_glmm_lrt)
    recs = robustness.records(robustness.variant_table(s), het)
    assert all((r["p_glmm_lrt"] is None) == (not r["glmm_lrt_valid"]) for r in recs)
    assert robustness.heterogeneity(s, use_r=False)["glmm_lrt_valid"].isna().all(), "no R: not computed"


def test_heterogeneity_records_and_sentence_agree(analysed):
    recs = [r for r in analysed.summary["records"] if r["test"] == "heterogeneity"]
    assert sorted((r["condition"], r["term"]) for r in recs) == sorted(
        (c, a) for c in ("concept_learning", "explicit") for a in variants.AXES)
    paper_only = next(r for r in recs if r["condition"] == "concept_learning" and r["term"] == "template")
    assert paper_only["valid"] and paper_only["method"] == "gee_wald" and paper_only["p"] < 0.01
    assert paper_only["n_variants"] == 4 and paper_only["df"] == 3
    line = next(x for x in robustness.sentences(analysed.summary) if "concept learning, templates" in x)
    assert f"under {paper_only['n_positive_gap']} of 4 templates" in line
    assert f"F(3, {int(paper_only['df_denom'])}) = " in line and "; the gap differs across the templates:" in line
    assert results.verdict(paper_only) == "effect"  # the sentence engine reads the record as the line says
    assert line in analysed.text
    placebo = next(r for r in recs if r["condition"] == "explicit" and r["term"] == "phrase")
    assert "placebo" in placebo["note"] or "should find nothing" in placebo["note"]


def test_one_wording_gives_no_robustness_rows_records_or_sentence():
    plain = generate_prompts(PAIR + ["more than 1/3", "less than 1/3"], prompts_per_concept=12)
    a = analysis.compute(_scores(plain, 1), n_boot=50, use_r=False)
    assert a.tables["robustness"].empty and a.tables["robustness_tests"].empty
    assert not [r for r in a.summary["records"] if r["test"] == "heterogeneity"]
    assert "templates" not in a.text


def test_outputs_are_written(analysed, tmp_path):
    analysis.write(analysed, tmp_path)
    t = pd.read_csv(tmp_path / "tables" / "robustness.csv")
    assert len(t) == len(analysed.tables["robustness"]) and set(t["axis"]) == set(analysed.tables["robustness"]["axis"])
    assert_figure(tmp_path / "figures" / "robustness.png")
    written = json.loads((tmp_path / "summary.json").read_text())["records"]
    assert [r for r in written if r["test"] == "heterogeneity"] == [
        r for r in analysed.summary["records"] if r["test"] == "heterogeneity"] != []


@pytest.fixture(scope="module")
def cal(load_benchmark):
    return load_benchmark("calibration_robustness")


def test_gee_wald_keeps_its_level_under_a_common_gap_and_finds_a_gap_under_one_template(cal):
    """60 seeded null datasets of the demo's size: at most 9 rejections (a 5% test does more with probability < .01);
    the alternative of the calibration (gap under one template) is found in most of 20."""
    rng = np.random.default_rng(11)
    ps = [robustness.gee_wald(cal.simulate(cal.SCENARIOS["null_common_gap"], cal.DESIGNS["study"], rng), "template")
          for _ in range(60)]
    assert all(p["valid"] for p in ps) and sum(p["p"] < 0.05 for p in ps) <= 9
    alt = [robustness.gee_wald(cal.simulate(cal.SCENARIOS["gap_under_one_template"], cal.DESIGNS["study"], rng),
                               "template")["p"] for _ in range(20)]
    assert sum(p < 0.05 for p in alt) >= 12


def test_committed_calibration_holds_the_claims():
    res = json.loads((ROOT / "benchmarks" / "results" / "calibration_robustness.json").read_text())
    nulls = [r for r in res["results"] if r["null"]]
    assert nulls and res["sims"] >= 200 and not res["failures"]
    for r in nulls:  # the reported test holds its level; the GLMM LRT (a cross-check) is reported as measured
        assert r["gee_wald"]["n_sims"] >= 200 and r["gee_wald"]["rate"] <= 0.075
    alt = [r for r in res["results"] if not r["null"] and r["design"]["name"] == "study"]
    assert alt and alt[0]["gee_wald"]["rate"] > 0.5  # the power the study page states
    docs = (ROOT / "docs" / "studies" / "monotonicity.md").read_text()
    assert f"{100 * alt[0]['gee_wald']['rate']:.1f}%" in docs


@pytest.mark.slow
@pytest.mark.skipif(not r_available("lme4"), reason="R with lme4 is not installed")
def test_glmm_lrt_agrees_with_the_wald_test_and_the_headline_glmm_takes_the_axes(cal):
    rng = np.random.default_rng(5)
    alt = cal.simulate(cal.Scenario("strong", gap=float(np.log(8.0)), only_first=True), cal.DESIGNS["study"], rng)
    null = cal.simulate(cal.SCENARIOS["null_no_gap"], cal.DESIGNS["study"], rng)
    out = robustness.glmm_lrt({"a|concept_learning|template": (alt, "template"),
                               "n|concept_learning|template": (null, "template")})
    a, n = out["a|concept_learning|template"], out["n|concept_learning|template"]
    assert a["valid"] and a["df"] == 3 and a["p"] < 0.01 and robustness.gee_wald(alt, "template")["p"] < 0.01
    assert n["valid"] and n["p"] > 0.01
    data = qmixed.glmm_input(alt.assign(pair_id=np.arange(len(alt)).astype(str)))
    assert "template" in data
    info, _ = qmixed.run_glmm(data)
    said = f"{info['random'].iloc[0]} {info['note'].iloc[0]}"
    assert "(1 | template)" in said and "(0 + uc | template)" in said  # fitted, or dropped at zero variance and said so


@pytest.mark.notebooks
def test_a_multiverse_sweep_scores_the_answer_words_and_reports_robustness(tmp_path):
    """One small sweep on the real embedded model: 16 prompts in every template, phrase and answer-word pair."""
    import yaml

    from nbutils.studies.monotonicity.scores import load_scores
    from nbutils.sweep import run_sweep

    data = tmp_path / "dataset.yaml"
    data.write_text(yaml.safe_dump(dict(concepts=PAIR, prompts_per_concept=4, n_examples=20, seed=0,
                                        templates="all", phrases="all", answer_words="all")))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump(dict(study="monotonicity", run_dir=str(tmp_path / "run"), dataset=str(data),
                                         models=[str(ROOT / "params" / "models" / "smollm2-135m-instruct.yaml")],
                                         analyze=dict(n_boot=100, use_r=False))))
    report = run_sweep(sweep, run_dir=str(tmp_path / "run"))
    assert not report.failed and report.analyzed
    run = tmp_path / "run"
    prompts = pd.read_parquet(run / "prompts.parquet")
    assert len(prompts) == 16 and set(prompts["answer_words"]) == {"yes_no", "true_false"}
    raw = pd.read_parquet(run / "scores" / "smollm2-135m-instruct.parquet")
    assert {"logp_0", "logp_1"} <= set(raw.columns) and set(raw["choice"]) <= {"Yes", "No", "True", "False"}
    s = load_scores(run)
    affirmative = s["answer_words"].map(lambda n: variants.words(n)[0])
    assert (s["pred_yes"] == (s["choice"] == affirmative)).all() and (s["pred_yes"] == (s["margin"] > 0)).all()
    assert (s["correct"] == (s["pred_yes"] == s["label"])).all()
    table = pd.read_csv(run / "tables" / "robustness.csv")
    assert set(table["axis"]) == set(variants.AXES)
    assert_figure(run / "figures" / "robustness.png")
    summary = json.loads((run / "summary.json").read_text())
    assert len([r for r in summary["records"] if r["test"] == "heterogeneity"]) == 2 * len(variants.AXES)
    assert "templates" in (run / "results.md").read_text()
