"""Negation-bias probe: stimulus expansion, the user CSV loader, the mixed models, and a papermill smoke run."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nbutils.studies.negation import dataset as negation, stats as nstats
from nbutils.paths import repo_root
from notebook_checks import assert_figure, assert_tables_compile, assert_tex_matches_csv


def test_expansion_counts_and_completeness():
    roots = negation.load_roots()
    assert len(roots) >= 40 and roots["category"].nunique() >= 4
    s = negation.expand_stimuli(roots)
    items = s["item_id"].nunique()
    assert items == len(roots) * 2 * 4 and items >= 300
    assert (s.groupby("item_id").size() == 4).all()
    assert (s.groupby("item_id")["condition"].apply(set) == {"SA", "SN", "NA", "NN"}).all()
    assert s["sentence"].is_unique
    aff, neg = s[s.form == "affirmative"], s[s.form == "negated"]
    assert not aff["sentence"].str.contains(r"\bnot\b").any() and neg["sentence"].str.contains(r"\bis not\b").all()
    words = s.assign(n=s["sentence"].str.split().str.len()).pivot_table(index=["item_id", "context"], columns="form", values="n")
    assert (words["affirmative"] == words["negated"]).all(), "the adverb keeps both forms the same length in words"


def test_structures_render_as_the_seed_describes():
    roots = negation.load_roots().head(1)
    s = negation.expand_stimuli(roots, synonyms=False).set_index(["structure", "condition"])["sentence"]
    assert s["because", "SA"] == "The priest brings the found money to the police because the priest is truly honest."
    assert s["who", "SN"] == "The priest, who brings the found money to the police, is not sneaky."
    assert s["which_means", "NA"] == "The drug addict brings the found money to the police, which means the drug addict is truly honest."
    assert s["thats_why", "NN"] == "The drug addict is not sneaky, that's why the drug addict brings the found money to the police."
    with pytest.raises(ValueError, match="^structures:"):
        negation.expand_stimuli(roots, structures=["since"])


def write_csv(tmp_path, df):
    p = tmp_path / "stimuli.csv"
    df.to_csv(p, index=False)
    return p


def test_user_csv_loads_and_bad_files_name_the_row(tmp_path):
    good = negation.expand_stimuli(negation.load_roots().head(2), structures=["because"])[["item_id", "context", "form", "sentence"]]
    loaded = negation.load_stimuli_csv(write_csv(tmp_path, good))
    assert len(loaded) == len(good) and set(loaded["condition"]) == {"SA", "SN", "NA", "NN"}
    with pytest.raises(ValueError, match=r"^stimuli_csv: .*lacks columns \['form'\]"):
        negation.load_stimuli_csv(write_csv(tmp_path, good.drop(columns="form")))
    with pytest.raises(ValueError, match=r"^stimuli_csv: item 'r01-original-because' \(first at row 2\) has 3 of the 4 cells"):
        negation.load_stimuli_csv(write_csv(tmp_path, good.drop(index=1)))
    bad = good.copy()
    bad.loc[5, "context"] = "neutral"
    with pytest.raises(ValueError, match=r"^stimuli_csv: row 7 has context='neutral'"):
        negation.load_stimuli_csv(write_csv(tmp_path, bad))
    with pytest.raises(ValueError, match="^stimuli_csv: .* does not exist"):
        negation.load_stimuli_csv(tmp_path / "nope.csv")


def simulate(interaction: float, seed: int, n_roots: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(n_roots):
        u, v = rng.normal(0, 6), rng.normal(0, 2)
        for k in range(4):
            for context in ("consistent", "inconsistent"):
                for form in ("affirmative", "negated"):
                    c, f = context == "consistent", form == "affirmative"
                    ppl = 60 + u + (3 + v) * c + 4 * f + interaction * c * f + rng.normal(0, 4)
                    rows.append({"model": "sim", "root_id": f"r{r}", "item_id": f"r{r}-{k}", "context": context,
                                 "form": form, "ppl": ppl, "n_tokens": 12 + int(f) + int(rng.integers(0, 4)),
                                 "token_diff_neg_minus_aff": 0,
                                 "condition": negation.CONDITIONS[(context, form)]})
    d = pd.DataFrame(rows)
    return d.assign(log_ppl=np.log(d["ppl"]))


def _interaction(coefs: pd.DataFrame, coding: str = "deviation") -> pd.Series:
    return coefs[(coefs.coding == coding) & (coefs.term == "context × form")].iloc[0]


@pytest.mark.parametrize("use_r", [False, pytest.param(True, marks=pytest.mark.skipif(
    not nstats.use_r_default(), reason="R with lme4 and lmerTest is not installed"))])
def test_mixed_model_recovers_a_planted_interaction(use_r):
    coefs, info = nstats.fit_lmm(simulate(-8.0, seed=1), use_r=use_r)
    inter = _interaction(coefs)
    assert info["valid"].iloc[0] and inter["p"] < 0.001 and abs(inter["estimate"] + 8) < 3 * inter["se"]
    assert inter["stars"] == "***" and _interaction(coefs, "treatment")["estimate"] == pytest.approx(inter["estimate"])


def test_mixed_model_finds_none_when_none_is_planted():
    coefs, info = nstats.fit_lmm(simulate(0.0, seed=2), use_r=False)
    inter = _interaction(coefs)
    assert info["valid"].iloc[0] and inter["p"] > 0.05 and inter["ci_low"] < 0 < inter["ci_high"]


@pytest.mark.slow  # ~8 s: three specifications, each with its random-structure ladder
def test_three_specifications_and_agreement():
    coefs, info, agree = nstats.lmm_tables(simulate(-8.0, seed=3), use_r=False)
    assert set(coefs["spec"]) == {"ppl", "log_ppl", "log_ppl+tokens"} and set(info["spec"]) == set(coefs["spec"])
    assert "n_tokens" in set(coefs[coefs.spec == "log_ppl+tokens"]["term"])
    assert agree.iloc[0]["interaction_conclusions_agree"] and agree.iloc[0]["interaction_ppl"] == "negative, p < .05"
    t1 = nstats.seed_table(coefs)
    assert list(t1["term"]) == ["context", "form", "context × form"] and t1["cell"].iloc[2].endswith("***")


@pytest.mark.slow  # ~10 s: every MixedLM simplification step fails in turn
def test_degenerate_data_is_flagged_not_reported_as_valid():
    d = simulate(0.0, seed=4).assign(ppl=50.0, log_ppl=np.log(50.0))
    coefs, info, agree = nstats.lmm_tables(d, use_r=False)
    assert not info["valid"].any() and (coefs.empty or not coefs["valid"].any())
    assert agree.iloc[0]["specs_valid"] == 0 and not agree.iloc[0]["interaction_conclusions_agree"]


@pytest.mark.notebooks
def test_sweep_runs_the_negation_notebooks_with_the_real_model(tmp_path):
    from nbutils.sweep import run_sweep

    report = run_sweep(repo_root() / "params" / "negation_ci.yaml", run_dir=str(tmp_path))
    assert report.scored == ["smollm2-135m-instruct"] and report.analyzed and not report.failed
    scores = pd.read_parquet(tmp_path / "scores" / "smollm2-135m-instruct.parquet")
    assert len(scores) == 6 * 2 * 2 * 4 and (scores["ppl"] > 1).all()
    assert {"stimulus_id", "n_tokens", "sum_logprob", "ppl"} <= set(scores.columns)
    meta = json.loads((tmp_path / "scores" / "smollm2-135m-instruct.json").read_text())
    assert meta["scorer"] == "sentences" and meta["sentence_scorer"] == "perplexity" and meta["complete"]
    for name in ("table1_ppl", "table1_log_ppl", "main_effects_ppl", "main_effects_log_ppl"):
        table = assert_tex_matches_csv(tmp_path / "tables" / name, float_format="%.3g")  # as the study writes them
        assert len(table) > 0 and set(table["model"]) == {"SmolLM2-135M-Instruct"}, name
    assert assert_tables_compile(tmp_path)  # each compiles with pdflatex and fits a page
    assert_figure(tmp_path / "figures" / "interaction.png")
    tl = pd.read_csv(tmp_path / "tables" / "token_length.csv")
    assert 0 <= tl["share_equal"].iloc[0] <= 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["models"]["SmolLM2-135M-Instruct"]) >= {"ppl", "log_ppl", "log_ppl+tokens", "conclusions_agree"}
    assert {r["test"] for r in summary["records"]} <= {"lmm_negation_satterthwaite", "lmm_negation_mixedlm_z"}
    fits = pd.read_csv(tmp_path / "tables" / "lmm_fits.csv")
    assert set(fits["model"]) == {"SmolLM2-135M-Instruct"} and {"ppl", "log_ppl", "log_ppl+tokens"} <= set(fits["spec"])
    assert sorted(p.name for p in (tmp_path / "notebooks").glob("*.ipynb")) == [
        "negation_01_stimuli.ipynb", "negation_03_analyze.ipynb", "score__smollm2-135m-instruct.ipynb"]
    # the same sentences give the recorded log-probabilities (data/negation_ci_scores.csv)
    before = pd.read_csv(Path(__file__).parent / "data" / "negation_ci_scores.csv")
    stimuli = pd.read_parquet(tmp_path / "stimuli.parquet")
    now = scores.merge(stimuli, on="stimulus_id")
    both = before.merge(now, on=["item_id", "context", "form"], suffixes=("_before", ""), validate="one_to_one")
    assert len(both) == len(before) == 96
    # float32 sums of ~30 token log-probs differ by ~2e-6 relative between CPU kernels (AVX-512 where recorded,
    # AVX2 elsewhere); a change in what is scored moves them by 1e-2 or more
    tol = 1e-4 + 1e-5 * both["sum_logprob_before"].abs()
    assert ((both["sum_logprob"] - both["sum_logprob_before"]).abs() <= tol).all()
    assert (both["n_tokens"] == both["n_tokens_before"]).all()


def test_negation_skip_check_sees_the_pll_variant(tmp_path):
    from nbutils import artifacts, studies
    from nbutils.runstore import is_done

    (tmp_path / "scores").mkdir()
    (tmp_path / "stimuli.parquet").write_bytes(b"x")
    artifacts.write_json({"complete": True, "model": "bert-base-uncased", "dataset_file": "stimuli.parquet",
                          "dataset_sha256": artifacts.sha256_file(tmp_path / "stimuli.parquet"), "scorer": "sentences",
                          "id_column": "stimulus_id",
                          "quantization": "none", "dtype": "float32", "rescore_margin": 0.0, "revision": "abc",
                          "pll_variant": "original", "batch_size": 64, "masked": True, "limit": None, "limit_seed": 0,
                          "num_shards": 1, "shard_index": 0}, tmp_path / "scores" / "bert-base-uncased.json")
    params = {"model": "bert-base-uncased", "masked": True, "batch_size": 64}
    spec = studies.get("negation").spec
    assert is_done(tmp_path, spec, dict(params, pll_variant="original"))
    assert not is_done(tmp_path, spec, dict(params, pll_variant="within_word_l2r"))
    assert not is_done(tmp_path, spec, dict(params, pll_variant="original", limit=2)), "a limited run is another file"


def test_csv_encoding_empty_header_only_and_blank_ids_name_the_file(tmp_path):
    p = tmp_path / "s.csv"
    p.write_bytes("item_id,context,form,sentence\nr1,consistent,affirmative,Caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"^stimuli_csv: .*s\.csv is not UTF-8 text \(byte \d+, line 2\)"):
        negation.load_stimuli_csv(p)
    p.write_text("")
    with pytest.raises(ValueError, match=r"^stimuli_csv: .*s\.csv is empty"):
        negation.load_stimuli_csv(p)
    p.write_text("item_id,context,form,sentence\n")
    with pytest.raises(ValueError, match=r"^stimuli_csv: .*s\.csv has a header but no stimuli"):
        negation.load_stimuli_csv(p)
    p.write_text("item_id,context,form,sentence\n ,consistent,affirmative,A b.\n")
    with pytest.raises(ValueError, match=r"^stimuli_csv: row 2 of .*s\.csv has a blank item_id"):
        negation.load_stimuli_csv(p)


def test_edited_csv_changes_the_recorded_parameters(tmp_path):
    good = negation.expand_stimuli(negation.load_roots().head(1), structures=["because"])[["item_id", "context", "form", "sentence"]]
    p = tmp_path / "s.csv"
    good.to_csv(p, index=False)
    df1, par1 = negation.build_stimuli(str(p))
    negation.write_stimuli(df1, tmp_path / "run", par1)
    good.assign(sentence=good["sentence"] + " Indeed.").to_csv(p, index=False)
    df2, par2 = negation.build_stimuli(str(p))
    assert par1["stimuli_csv_sha256"] != par2["stimuli_csv_sha256"]
    with pytest.raises(FileExistsError, match="other parameters"):
        negation.write_stimuli(df2, tmp_path / "run", par2)
    assert df1["stimulus_id"].is_unique and df1.columns[0] == "stimulus_id"
