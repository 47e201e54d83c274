"""A sweep of six models reads well: one run of simulated answers (six gaps: two learned upward, one downward, one
small, one without a gap, one at chance), named by labels with spaces, quotes and markup, analysed once; its models
table (CSV, LaTeX that compiles on one page, results.md), its forest plot, each model's sentence against its record,
and the report's first screen (the finding first, then the models table and the forest plot)."""
from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone

import matplotlib
import numpy as np
import pandas as pd
import pytest
from bs4 import BeautifulSoup

from nbutils.results import _models_table as models_table, verdict
from nbutils import paths, report, studies
from nbutils.results._readings import headline_record
from nbutils.studies.monotonicity import analysis, plots
from nbutils.studies.monotonicity.scores import load_scores
from notebook_checks import assert_figure, assert_tables_compile
from simulated_runs import simulated_run

matplotlib.use("Agg")

# label → (P(correct) upward, P(correct) downward, parameters); the slug is the score file's name
MODELS = {
    "Tiny <b>LM</b> & co": (0.97, 0.10, 135_000_000),
    'Mid "quoted" 360M + upward control': (0.90, 0.35, 360_000_000),
    "Small gap model": (0.72, 0.62, 1_700_000_000),
    "At chance": (0.5, 0.5, None),
    "Downward | better": (0.25, 0.95, 7_000_000_000),
    "Even model": (0.8, 0.8, 13_000_000_000),
}
SLUGS = {label: f"model-{i}" for i, label in enumerate(MODELS)}


def _answers(p_up: float, p_down: float, seed: int):
    def correct(prompts: pd.DataFrame) -> np.ndarray:
        rng = np.random.default_rng(seed)
        up = (prompts["monotonicity"] == "upward").to_numpy()
        return rng.random(len(prompts)) < np.where(up, p_up, p_down)
    return correct


@pytest.fixture(scope="module")
def six(tmp_path_factory):
    """The six-model run analysed once (no R, few bootstrap draws), its models named by their labels as the scores
    frame carries them, and a report made from an executed analysis that shows the run's figures."""
    import json

    import nbformat

    root = tmp_path_factory.mktemp("six")
    run = simulated_run(root, {SLUGS[m]: _answers(up, down, seed=i) for i, (m, (up, down, _)) in enumerate(MODELS.items())})
    for label, (_, _, n) in MODELS.items():  # the sidecar records the parameters (None: not recorded)
        side = paths.scores_dir(run) / f"{SLUGS[label]}.json"
        meta = json.loads(side.read_text())
        meta.pop("n_parameters", None)
        side.write_text(json.dumps(dict(meta, **({"n_parameters": n} if n else {}))))
    scores = load_scores(run)
    scores = scores.assign(slug=scores["model"], model=scores["model"].map({v: k for k, v in SLUGS.items()}))
    a = analysis.compute(scores, n_boot=50, use_r=False, order=list(MODELS),
                         parameters=analysis.parameters(run, scores))
    with pytest.MonkeyPatch.context() as mp:  # the rule heatmap (a third of the time) is not what is tested here
        mp.setattr(plots, "rule_agreement", lambda *a, **k: matplotlib.pyplot.figure(figsize=(2, 2)))
        analysis.write(a, run)
    summary = json.loads(paths.summary_path(run).read_text())
    analyze = studies.get("monotonicity").notebooks["analyze"]
    nb = nbformat.v4.new_notebook()
    ended = (datetime.fromisoformat(summary["analysed"]) + timedelta(seconds=1)).isoformat()
    nb.metadata["papermill"] = {"input_path": analyze, "start_time": datetime.now(timezone.utc).isoformat(),
                                "end_time": ended}
    figure = nbformat.v4.new_code_cell("display(Image(...))")
    figure.outputs = [nbformat.v4.new_output("display_data", data={"image/png": __import__("base64").b64encode(
        (paths.figures_dir(run) / "accuracy_by_threshold.png").read_bytes()).decode()})]
    nb.cells = [nbformat.v4.new_markdown_cell("# Monotonicity · 03 · analyse: is upward learned better?\n\nMethod."),
                nbformat.v4.new_markdown_cell("## Figure 1: accuracy by threshold"), figure]
    executed = paths.executed_notebook(run, analyze)
    executed.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, executed)
    report.write_report(run)
    return run, a, summary


def test_the_models_table_has_a_row_per_model_in_the_sweeps_order(six):
    run, a, summary = six
    t = pd.read_csv(paths.tables_dir(run) / "models.csv")
    assert list(t["model"]) == list(MODELS)
    want = [n if n else math.nan for *_, n in MODELS.values()]
    assert np.allclose(t["parameters"].to_numpy(dtype=float), np.asarray(want, dtype=float), equal_nan=True)
    for _, r in t.iterrows():  # the accuracies are the summary's; the CI holds the OR
        cond = summary["models"][r["model"]]["conditions"]["concept_learning"]
        assert r["acc_up_concept_learning"] == pytest.approx(cond["acc_up"])
        if not math.isnan(r["or_concept_learning"]):
            assert r["or_ci_low_concept_learning"] <= r["or_concept_learning"] <= r["or_ci_high_concept_learning"]
    readings = dict(zip(t["model"], t["reading_concept_learning"]))
    assert readings["At chance"] == "below_floor"
    assert readings["Tiny <b>LM</b> & co"] in ("learned", "mirror", "undetermined")
    text = paths.results_path(run).read_text()
    assert models_table.MODELS_HEADING in text and r"| Tiny \<b\>LM\</b\> \& co | 135M |" in text
    assert r"| Downward \| better |" in text  # a name's pipe does not split the row
    cols, rows = models_table.shown(summary)
    assert [c for c, _ in cols][:2] == ["model", "parameters"]
    assert rows[0]["parameters"] == "135M" and rows[2]["parameters"] == "1.7B" and rows[3]["parameters"] == ""
    assert all(re.fullmatch(r"\d{1,3}\.\d", r["acc_up_concept_learning"]) for r in rows)  # 33.3, never 0.333
    assert all(re.fullmatch(r"[\d.e−]+ \[[\d.e−]+, [\d.e−]+\]|not estimable", r["or"]) for r in rows)


def test_the_latex_table_is_one_page_with_the_ci_in_one_cell(six):
    run, _, _ = six
    tex = (paths.tables_dir(run) / "models.tex").read_text()
    assert "\\toprule" in tex and "longtable" not in tex.split("\n", 1)[1].split("\\toprule")[0]
    assert r"Tiny \textless{}b\textgreater{}LM\textless{}/b\textgreater{} \& co" in tex
    assert r"Downward \textbar{} better" in tex
    body = [line for line in tex.splitlines() if line.endswith(r"\\") and "&" in line][2:]
    assert len(body) == len(MODELS) and all(re.search(r" & [\d.]+ \[[\d.]+, [\d.]+\] & ", line) or "not estimable"
                                            in line for line in body)
    assert "models" in assert_tables_compile(run)


def test_the_forest_plot_has_a_row_per_model(six):
    run, a, summary = six
    assert_figure(paths.figures_dir(run) / "forest_models.png")
    fig = models_table.forest(summary)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert [x.replace("\n", " ") for x in labels] == list(MODELS)
    matplotlib.pyplot.close(fig)


def test_a_model_without_a_valid_test_is_named_so_in_the_forest_plot(six):
    import copy

    _, _, summary = six
    s = copy.deepcopy(summary)
    for c in ("concept_learning", "explicit"):
        headline_record(s, "Even model", c)["valid"] = False
    fig = models_table.forest(s)
    assert [t.get_text() for t in fig.axes[0].texts].count("no valid test") == 2
    assert models_table.shown(s)[1][-1]["or"] == "not estimable"
    matplotlib.pyplot.close(fig)


def test_each_models_sentence_says_its_records_direction(six):
    _, _, summary = six
    lines = models_table.sentences(summary)
    assert len(lines) == len(MODELS)
    for model, line in zip(MODELS, lines):
        assert line.startswith(f"{model}: ") and len(line.split()) <= 60
        rec = headline_record(summary, model, "concept_learning")
        v = verdict(rec)
        kind = summary["models"][model]["conditions"]["concept_learning"]
        if "not above the task floor" in line or "at the edge of the task floor" in line:
            assert kind["floor"]["above"] is False and v not in ("more", "less")
        elif v == "more":
            assert re.search(r": upward concepts were (learned better|answered right more often)", line)
        elif v == "less":
            assert re.search(r": downward concepts were (learned better|answered right more often)", line)
        else:
            assert "not significant" in line or "no valid test" in line
    by = dict(zip(MODELS, lines))
    assert by["Downward | better"].startswith("Downward | better: downward concepts")
    assert re.search(r"(not above|at the edge of) the task floor", by["At chance"])


def test_the_report_opens_with_the_finding_then_the_models_table(six):
    run, _, summary = six
    page = paths.report_path(run).read_text()
    soup = BeautifulSoup(page, "html.parser")
    finding = soup.select_one("section.finding")
    first = finding.find(["ul", "table", "div", "figure", "p"])
    assert first.name == "ul" and first["class"] == ["findings"]
    assert [li.get_text() for li in first.find_all("li")] == models_table.sentences(summary)
    table = soup.find("table")
    assert "models" in table["class"]
    assert [tr.find("td").get_text() for tr in table.select("tbody tr")] == list(MODELS)
    assert "<b>LM</b>" not in page and "Tiny &lt;b&gt;LM&lt;/b&gt; &amp; co" in page
    assert finding.select_one("figure.wide img.forest")
    assert models_table.MODELS_HEADING.strip("*") not in finding.select_one(".words").get_text()
    assert soup.find("h1").get_text().startswith("monotonicity: 6 models")


def test_the_papers_latex_tables_keep_a_ci_in_its_cell_and_thresholds_together(six):
    """The run's mixed-model, pooled-gap and Appendix-B tables as a paper prints them: one part each, an estimate with
    its 95% CI in one cell, percentages with one decimal; the columns left to the CSV are named in a comment."""
    run, _, _ = six
    tex = {n: (paths.tables_dir(run) / f"{n}.tex").read_text() for n in ("mixed_model", "gap_pooled", "appendix_b")}
    assert not any("part 1 of" in t for t in tex.values())
    assert "% in the CSV only: " in tex["mixed_model"] and "note" in tex["mixed_model"].splitlines()[1]
    assert re.search(r" & [\d.e+−-]+ \[[\d.e+−-]+, [\d.e+−-]+\] & ", tex["mixed_model"])
    assert re.search(r"OR \(MH\) \[95\\% CI\]|\[95\\%", tex["gap_pooled"])
    cells = [c.strip() for line in tex["appendix_b"].splitlines() if line.startswith("Tiny")
             for c in line.removesuffix(r"\\").split(" & ")[4:]]
    assert len(cells) == 4 * 5 and all(re.fullmatch(r"\d{1,3}\.\d", c) for c in cells)


def test_up_to_twelve_models_are_one_tabular_and_more_a_longtable(six):
    _, _, summary = six
    import copy

    def of(n: int) -> dict:
        big = copy.deepcopy(summary)
        big["models"] = {f"{m} #{i}": summary["models"][m] for i in range(3) for m in MODELS}
        big["models"] = dict(list(big["models"].items())[:n])
        big["design"]["model_order"] = list(big["models"])
        return big

    assert models_table.latex(of(12)).count(r"\begin{tabular}") == 1 and "longtable}" not in models_table.latex(of(12))
    assert r"\begin{longtable}" in models_table.latex(of(18)) and r"\endhead" in models_table.latex(of(18))


def test_the_sentences_follow_their_records_whatever_the_records_say(six):
    """A property over 300 random headline records (estimate, CI, p, validity) and facts (floor, use of the examples):
    each model's sentence names the side its record's verdict points to, claims no side without p < α, says "no valid
    test" for a record that cannot be read, prints the record's odds ratio, and stays within 60 words."""
    import copy

    _, _, summary = six
    rng = np.random.default_rng(7)
    for _ in range(300):
        s = copy.deepcopy(summary)
        m = list(MODELS)[rng.integers(len(MODELS))]
        rec = headline_record(s, m, "concept_learning")
        est, se = float(rng.normal(0, 2)), float(rng.uniform(0.1, 2))
        rec.update(estimate=est, ci_low=est - 1.96 * se, ci_high=est + 1.96 * se, valid=bool(rng.random() > 0.1),
                   p=float(rng.choice([rng.uniform(0, 0.05), rng.uniform(0.05, 1)])))
        cond = s["models"][m]["conditions"]["concept_learning"]
        cond["floor"]["above"] = bool(rng.random() > 0.3)
        cond["uses_examples"]["uses"] = bool(rng.random() > 0.5)
        line = dict(zip(MODELS, models_table.sentences(s)))[m]
        v = verdict(rec)
        assert len(line.split()) <= 60
        said = line.split(": ", 1)[1]
        if v == "invalid":
            assert said.startswith("no valid test"), line
        elif said.startswith(("not above the task floor", "at the edge of the task floor")):
            assert not cond["floor"]["above"] and v not in ("more", "less"), line
        elif v in ("more", "less"):
            side = "upward" if v == "more" else "downward"
            assert said.startswith(f"{side} concepts were"), line
            # no twins here: a score test that does not reject leaves the source undetermined, never a prior
            assert ("from a source the data cannot name" in said) == (not cond["uses_examples"]["uses"]), line
            assert "prior" not in said, line
            assert f"OR {models_table.fmt_or(math.exp(est))} [" in said, line
        else:
            assert "is not significant at α = .05" in said and "concepts were" not in said, line


def test_a_run_with_prompt_variants_gets_the_prediction_interval_of_a_new_one(six):
    """Valid intervals only: the crossed cells' (``all``) where valid, else the axis with the most variants, named
    where several axes vary; the column appears only where some model has one."""
    import copy

    _, _, summary = six
    assert "pi" not in [k for k, _ in models_table.shown(summary)[0]]
    s = copy.deepcopy(summary)
    s["models"]["Even model"]["prediction_interval"] = {"concept_learning": {
        "all": {"pi_low": -0.5, "pi_high": 0.5, "valid": False, "n_variants": 9},
        "template": {"pi_low": -0.1, "pi_high": 0.2, "valid": True, "n_variants": 4},
        "phrase": {"pi_low": -0.3, "pi_high": 0.4, "valid": True, "n_variants": 3}}}
    s["models"]["At chance"]["prediction_interval"] = {"concept_learning": {
        "template": {"pi_low": 0.05, "pi_high": 0.25, "valid": True, "n_variants": 4}}}
    cols, rows = models_table.shown(s)
    assert cols[-1][0] == "pi"
    by = {r["model"]: r["pi"] for r in rows}
    assert by["Even model"] == "[-10.0, +20.0] (template)" and by["At chance"] == "[+5.0, +25.0]"
    assert by["Tiny <b>LM</b> & co"] == ""
