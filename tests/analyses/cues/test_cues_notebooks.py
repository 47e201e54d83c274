"""Papermill smoke run of cue profiling: a `cues:` sweep block on the custom study's Yes/No example, scored with the
real embedded model, then notebooks/cues/01_profile.ipynb on the run; and the notebook run again by hand."""
from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from nbutils import artifacts, studies
from nbutils.paths import repo_root
from nbutils.sweep._sweep import execute
from notebook_checks import assert_figure, output_text, ran_clean

ROOT = repo_root()
pytestmark = [pytest.mark.notebooks, pytest.mark.sweep("params/cues_ci.yaml")]  # `swept`: tests/conftest.py


def test_the_sweep_profiles_cues_after_the_analysis(swept):
    run, report = swept
    assert report.analyzed and report.extra == ["cues"] and not report.failed
    shown = output_text(ran_clean(run / "notebooks" / "cues_01_profile.ipynb"))
    assert (run / "cues_results.md").read_text().strip() in shown, "the notebook shows the paragraph it writes"
    cues = pd.read_csv(run / "tables" / "cues.csv")
    assert {"feature", "label", "count_train", "count_test", "mse", "jsd", "cueness", "lmi", "pmi"} <= set(cues.columns)
    # every ranked feature with both labels, rows in rank order (so cueness never rises down the table)
    assert cues.groupby("feature")["label"].agg(lambda s: sorted(s) == ["No", "Yes"]).all()
    assert cues["rank"].is_monotonic_increasing and cues["cueness"].is_monotonic_decreasing
    top = cues.drop_duplicates("feature")
    assert top["rank"].tolist() == sorted(top["rank"]) and top["cueness"].is_monotonic_decreasing
    acc = pd.read_csv(run / "tables" / "cue_accuracy_test.csv")
    dist = pd.read_csv(run / "tables" / "cue_distribution_test.csv")
    assert set(acc["model"]) == {"SmolLM2-135M-Instruct"} and len(acc) == len(dist) == min(5, len(top))
    assert acc["p_holm"].dropna().ge(acc["p"].dropna()).all()
    assert_figure(run / "figures" / "cues_top.png", min_size=(300, 200))
    summary = json.loads((run / "summary.json").read_text())
    tests = {r["test"] for r in summary["records"]}
    assert {"cue_discovery", "cue_accuracy_test", "cue_distribution_test", "cue_used"} <= tests
    assert "accuracy_vs_chance" in tests  # the custom study's own records are kept
    assert summary["cues"]["study"] == "custom" and summary["cues"]["n_instances"] == 24
    assert "Cue profile" not in (run / "results.md").read_text()  # the study's own paragraph is left alone


def test_cue_tables_equal_an_independent_recomputation(swept):
    """From each feature's counts: shares and the cue label, Holm over all features (statsmodels); the accuracy test's
    Fisher p (scipy), Newcombe CI and Holm (statsmodels); a cue is used when both tests flag it. Word features' counts
    are those of the dataset's texts, and every feature splits the same test instances."""
    from scipy.stats import fisher_exact
    from statsmodels.stats.multitest import multipletests
    from statsmodels.stats.proportion import confint_proportions_2indep

    run, _ = swept
    c = json.loads((run / "summary.json").read_text())["cues"]
    alpha, n_test = c["alpha"], c["n_test"]
    items = pd.read_parquet(run / "items.parquet")
    assert c["n_instances"] == len(items) == c["n_train"] + n_test
    cues = pd.read_csv(run / "tables" / "cues.csv")
    top = cues.drop_duplicates("feature").set_index("feature")
    assert len(top) == c["n_features"]
    for feature, g in cues.groupby("feature"):
        assert g["count_train"].sum() == g["n_train"].iloc[0] and g["count_test"].sum() == g["n_test"].iloc[0], feature
        assert g["share_train"].tolist() == pytest.approx((g["count_train"] / g["n_train"]).tolist())
        assert top.loc[feature, "cue_label"] == g.loc[g["share_train"].idxmax(), "label"], feature
        if feature.startswith("word:"):
            word = re.compile(rf"\b{re.escape(feature.removeprefix('word:'))}\b", re.IGNORECASE)
            assert g["n_train"].iloc[0] + g["n_test"].iloc[0] == items["text"].str.contains(word).sum(), feature
    assert top["p_holm"].tolist() == pytest.approx(multipletests(top["p"], method="holm")[1].tolist())
    assert (top["significant"] == (top["p_holm"] < alpha)).all()

    acc = pd.read_csv(run / "tables" / "cue_accuracy_test.csv")
    assert acc["feature"].tolist() == top.index[:len(acc)].tolist(), "the top-k features by rank"
    overall = set()
    for r in acc.itertuples():
        assert r.n_f + r.n_nf == n_test and r.n_f == top.loc[r.feature, "n_test"]
        k_f, k_nf = round(r.acc_f * r.n_f), round(r.acc_nf * r.n_nf)
        overall.add((k_f + k_nf, n_test))
        assert r.delta_acc == pytest.approx(k_f / r.n_f - k_nf / r.n_nf)
        assert r.p == pytest.approx(fisher_exact([[k_f, r.n_f - k_f], [k_nf, r.n_nf - k_nf]]).pvalue)
        lo, hi = confint_proportions_2indep(k_f, r.n_f, k_nf, r.n_nf, method="newcomb", compare="diff")
        assert (r.ci_low, r.ci_high) == pytest.approx((lo, hi))
    assert len(overall) == 1, "each feature splits the same test instances, so the model's test accuracy is one number"
    assert acc["p_holm"].tolist() == pytest.approx(multipletests(acc["p"], method="holm")[1].tolist())
    assert (acc["flag"] == (acc["p_holm"] < alpha)).all()
    dist = pd.read_csv(run / "tables" / "cue_distribution_test.csv").set_index("feature")
    assert (dist["flag"] == (dist["p_holm"] < alpha)).all()
    used = acc.set_index("feature")["flag"] & dist["flag"]
    assert (dist["used"] == used).all() and (dist["accuracy_flag"] == acc.set_index("feature")["flag"]).all()
    records = json.loads((run / "summary.json").read_text())["records"]
    used_records = {r["term"]: r["estimate"] for r in records if r["test"] == "cue_used"}
    assert used_records == {f: float(u) for f, u in used.items()}


def test_the_cue_paragraph_states_the_tables_numbers_and_directions(swept):
    """Each sentence of cues_results.md against the tables: the design's counts, the strongest cues with their label and
    cueness, how many skew the labels and what that means, and per model how many cues it uses, the clearest accuracy
    difference (points, CI, p) and whether that is evidence."""
    run, _ = swept
    c = json.loads((run / "summary.json").read_text())["cues"]
    words = (run / "cues_results.md").read_text()
    top = pd.read_csv(run / "tables" / "cues.csv").drop_duplicates("feature")
    k = c["top_k"]
    assert (f"{c['n_instances']} classification instances split into {c['n_train']} for finding cues and "
            f"{c['n_test']} for testing them; {len(top)} features occur at least {c['min_count']} times in both "
            f"splits; the top {k} by cueness are probed.") in words
    strongest = next(line for line in words.splitlines() if "Strongest cues:" in line)
    for r in top.head(3).itertuples():
        assert f"`{r.feature}` → {r.cue_label} (cueness {r.cueness:.2f}" in strongest
    n_sig = int(top.head(k)["significant"].sum())
    assert (f"{n_sig} of the top {k} skew the labels at α = .05 after Holm correction over all {len(top)} features"
            in strongest)
    assert ("the dataset itself carries cues" in strongest) == (n_sig > 0)
    assert ("no evidence that the labels follow a surface feature" in strongest) == (n_sig == 0)

    acc = pd.read_csv(run / "tables" / "cue_accuracy_test.csv")
    dist = pd.read_csv(run / "tables" / "cue_distribution_test.csv")
    for model, a in acc.groupby("model"):
        line = next(line for line in words.splitlines() if line.startswith(f"- {model}:"))
        d = dist[dist["model"] == model]
        n_used = int((a.set_index("feature")["flag"] & d.set_index("feature")["flag"]).sum())
        assert (f"{model}: {n_used} of the top {len(top.head(k))} cues flagged as used by both tests "
                f"({int(a['flag'].sum())} by the accuracy test, {int(d['flag'].sum())} by the distribution test"
                ) in line
        assert ("No evidence that the model relies on these cues" in line) == (n_used == 0)
        best = a.dropna(subset=["p"]).sort_values("p", kind="stable").iloc[0]  # the smallest raw p, first in rank order
        assert (f"with and without `{best['feature']}`: difference = {100 * best['delta_acc']:.1f} points, "
                "unadjusted 95% CI "
                f"[{100 * best['ci_low']:.1f}, {100 * best['ci_high']:.1f}]") in line
        if best["p_holm"] >= 0.05:
            assert "no evidence at α = .05 that accuracy differs" in line
            assert "answered better" not in line and "answered worse" not in line
        else:
            assert ("answered better" if best["delta_acc"] > 0 else "answered worse") in line
        assert ("Holm-adjusted p > .999" in line) == (best["p_holm"] > 0.999)


def test_rerunning_the_notebook_replaces_the_cue_records(swept):
    run, _ = swept
    before = json.loads((run / "summary.json").read_text())["records"]
    nb = studies.RUN_ANALYSES["cues"]
    execute(nb, run / "notebooks" / "01_profile_again.ipynb", {"run_dir": str(run), "top_k": 3, "min_count": 2})
    after = json.loads((run / "summary.json").read_text())["records"]
    assert len([r for r in after if r["test"] == "cue_discovery"]) == 3
    assert [r for r in after if not r["test"].startswith("cue_")] == [r for r in before if not r["test"].startswith("cue_")]


def test_a_run_without_labels_is_refused(tmp_path):
    """A custom run whose dataset has no gold answers: refused before any score file is read."""
    from nbutils.studies.custom import dataset

    example = artifacts.read_yaml((ROOT / "params/custom/datasets/example_yesno.yaml").read_text(), "example_yesno")
    items = dataset.load_items(ROOT / example["data_file"], example["columns"], group_by=example["group_by"])
    run = tmp_path / "run"
    dataset.write_items(items.assign(answer=None, answer_text=None, answer_raw=None), run, {"answers": "removed"})
    with pytest.raises(Exception, match=r"run_dir: \S*items\.parquet has no gold answers; cue profiling needs labels"):
        execute(studies.RUN_ANALYSES["cues"], tmp_path / "out.ipynb", {"run_dir": str(run)})
    assert not (run / "tables").exists() and not (run / "summary.json").exists()
