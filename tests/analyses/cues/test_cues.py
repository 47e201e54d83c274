"""Cue profiling (seed 004, ICQ): the seed's formulas against hand-computed values, cue discovery and both model tests
on simulated datasets and models (planted cue found, cue-free data and cue-blind models not flagged beyond α), the
features, errors, and the sweep hook."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.spatial.distance import jensenshannon

from nbutils.sweep import _papermill as notebooks, _sweep as sweep
from nbutils import studies
from nbutils.analyses.cues import features as feats, stats

ALPHA = 0.05
VOCAB = ["apple", "river", "table", "green", "house", "music", "paper", "stone", "cloud", "horse", "bread", "chair",
         "light", "water", "sugar", "garden", "window", "yellow", "pocket", "summer"]


# ---------------------------------------------------------------- the seed's formulas, by hand

def test_mse_jsd_cueness_match_a_hand_computed_example():
    # R_f: 8 Yes, 2 No; S_f: 6 Yes, 4 No.  MSE = ((8−5)² + (2−5)²)/2 = 9.
    # JSD = ½[.8 ln(.8/.7) + .2 ln(.2/.3)] + ½[.6 ln(.6/.7) + .4 ln(.4/.3)] = 0.0241569 nats; cueness = 9 / e^JSD
    assert stats.mse([8, 2]) == 9.0
    assert stats.jsd([8, 2], [6, 4]) == pytest.approx(0.0241569, abs=1e-6)
    assert stats.jsd([8, 2], [6, 4]) == pytest.approx(jensenshannon([.8, .2], [.6, .4]) ** 2, rel=1e-9)
    assert stats.cueness([8, 2], [6, 4]) == pytest.approx(9 / np.exp(0.0241569), rel=1e-6)
    assert stats.jsd([5, 0], [0, 5]) == pytest.approx(np.log(2))  # disjoint supports: the maximum, ln 2
    assert stats.mse([3, 3, 3]) == 0 and stats.jsd([1, 2, 3], [2, 4, 6]) == pytest.approx(0)


def test_discover_reproduces_the_hand_example_with_lmi_and_pmi():
    # train: f on 10 items (8 Yes, 2 No), off on 10 (2 Yes, 8 No); test: f on 10 (6 Yes, 4 No), off on 10 (4 Yes, 6 No)
    lab = ["Yes"] * 8 + ["No"] * 2 + ["Yes"] * 2 + ["No"] * 8 + ["Yes"] * 6 + ["No"] * 4 + ["Yes"] * 4 + ["No"] * 6
    f = [True] * 10 + [False] * 10 + [True] * 10 + [False] * 10
    split = ["train"] * 20 + ["test"] * 20
    cues = stats.discover(pd.DataFrame({"word:x": f}), pd.Series(lab), pd.Series(split), min_count=5)
    yes = cues.set_index("label").loc["Yes"]
    assert (yes["count_train"], yes["count_test"], yes["n_train"], yes["n_test"]) == (8, 6, 10, 10)
    assert yes["mse"] == 9 and yes["cueness"] == pytest.approx(9 / np.exp(0.0241569), rel=1e-6)
    assert yes["pmi"] == pytest.approx(np.log(0.8 / 0.5)) and yes["lmi"] == pytest.approx(8 / 20 * np.log(0.8 / 0.5))
    no = cues.set_index("label").loc["No"]
    assert no["pmi"] == pytest.approx(np.log(0.2 / 0.5)) and no["lmi"] == pytest.approx(2 / 20 * np.log(0.2 / 0.5))
    assert yes["cue_label"] == "Yes"
    # label ⟂ feature on all 40 items: 14/20 Yes with f vs 6/20 without, Fisher's exact test
    from scipy.stats import fisher_exact
    assert yes["p"] == pytest.approx(fisher_exact([[14, 6], [6, 14]]).pvalue)
    # a feature below min_count in one split is not a candidate
    assert stats.discover(pd.DataFrame({"word:x": f}), pd.Series(lab), pd.Series(split), min_count=11).empty


# ---------------------------------------------------------------- simulated datasets

def planted(rng, n=300, p_yes=0.9, p_no=0.1, word="zebra"):
    """Yes/No items of 4–8 random words; ``word`` in p_yes of the Yes items and p_no of the No items."""
    labels = np.array(["Yes", "No"] * (n // 2))
    texts = []
    for lab in labels:
        ws = list(rng.choice(VOCAB, rng.integers(4, 9)))
        if rng.random() < (p_yes if lab == "Yes" else p_no):
            ws.insert(int(rng.integers(0, len(ws))), word)
        texts.append(" ".join(ws))
    return pd.Series(texts), pd.Series(labels)


def test_a_planted_cue_word_ranks_first():
    rng = np.random.default_rng(0)
    for sim in range(5):
        texts, labels = planted(rng)
        F = feats.text_features(texts)
        split, _ = stats.assign_split(F.index, None, 0.5, seed=sim)
        cues = stats.discover(F, labels, split)
        top = stats.top_features(cues, 3)
        assert top["feature"].iloc[0] == "word:zebra", top
        assert top["cue_label"].iloc[0] == "Yes" and top["significant"].iloc[0]


def cue_free(rng, n=200, n_features=30):
    labels = pd.Series(rng.choice(["A", "B"], n))
    freq = rng.uniform(0.05, 0.5, n_features)
    F = pd.DataFrame(rng.random((n, n_features)) < freq, columns=[f"word:w{j}" for j in range(n_features)])
    return F, labels


@pytest.mark.slow
def test_a_cue_free_dataset_flags_nothing_beyond_alpha():
    """Familywise false-positive rate of cue discovery (Holm over ~30 features) over simulated cue-free datasets.

    One seeded sequence of 300 simulations, checked after its first 60 and after all 300 (each against α plus two
    Monte-Carlo standard errors at that count)."""
    rng = np.random.default_rng(1)
    flags = []
    for sim in range(300):
        F, labels = cue_free(rng)
        split, _ = stats.assign_split(F.index, None, 0.5, seed=sim)
        flags.append(bool(stats.discover(F, labels, split)["significant"].any()))
    for n_sims in (60, 300):
        fpr = np.mean(flags[:n_sims])
        print(f"cue-free datasets with any cue flagged: {fpr:.3f} over {n_sims} simulations (alpha {ALPHA})")
        assert fpr <= ALPHA + 2 * np.sqrt(ALPHA * (1 - ALPHA) / n_sims), n_sims


# ---------------------------------------------------------------- simulated models

def probe_sim(rng, follows: bool, seed: int, n=300, accuracy=0.7):
    """A dataset with a planted cue (``word:zebra`` on 90% of the Yes items, 10% of the No items, beside 15 label-free
    words) and a model that either answers Yes whenever the cue is there (else right with probability ``accuracy``)
    or ignores it (right with probability ``accuracy`` everywhere)."""
    labels = pd.Series(np.array(["Yes", "No"] * (n // 2)))
    F = pd.DataFrame(rng.random((n, 15)) < rng.uniform(0.1, 0.5, 15), columns=[f"word:w{j}" for j in range(15)])
    F["word:zebra"] = rng.random(n) < np.where(labels == "Yes", 0.9, 0.1)
    split, _ = stats.assign_split(F.index, None, 0.5, seed=seed)
    cues = stats.discover(F, labels, split)
    right = rng.random(n) < accuracy
    pred = np.where(right, labels, np.where(labels == "Yes", "No", "Yes"))
    if follows:
        pred = np.where(F["word:zebra"], "Yes", pred)
    items = pd.concat([pd.DataFrame({"model": "m", "label": labels, "pred": pred, "split": split}), F], axis=1)
    acc, dist = stats.probe(items, cues, top_k=3, alpha=ALPHA, seed=seed)
    return acc.set_index("feature"), dist.set_index("feature")


@pytest.mark.slow
def test_a_model_that_follows_the_cue_is_flagged_by_both_tests():
    rng = np.random.default_rng(2)
    n_sims, hits = 30, 0
    for sim in range(n_sims):
        acc, dist = probe_sim(rng, True, sim, n=600)
        z = dist.loc["word:zebra"]
        assert acc.loc["word:zebra", "delta_acc"] > 0 and z["shift"] > 0
        assert acc.loc["word:zebra", "ci_low"] <= acc.loc["word:zebra", "delta_acc"] <= acc.loc["word:zebra", "ci_high"]
        hits += bool(z["used"])
    print(f"cue-following model flagged (both tests): {hits}/{n_sims}")
    assert hits >= 0.8 * n_sims


@pytest.mark.slow
def test_a_model_that_ignores_the_cue_is_not_flagged_beyond_alpha():
    """One seeded sequence of 300 simulated cue-blind models, checked after its first 30 and after all 300."""
    rng = np.random.default_rng(3)
    flags = []  # (used, accuracy test, distribution test) per simulation
    for sim in range(300):
        acc, dist = probe_sim(rng, False, sim)
        flags.append((bool(dist.loc["word:zebra", "used"]), bool(acc.loc["word:zebra", "flag"]),
                      bool(dist.loc["word:zebra", "flag"])))
    for n_sims in (30, 300):
        used, acc_flags, dist_flags = np.sum(flags[:n_sims], axis=0)
        print(f"cue-blind model: used {used}/{n_sims}, accuracy test {acc_flags}/{n_sims}, "
              f"distribution test {dist_flags}/{n_sims} (alpha {ALPHA}, one-sided flags)")
        bound = ALPHA + 2 * np.sqrt(ALPHA * (1 - ALPHA) / n_sims)
        assert acc_flags / n_sims <= bound and dist_flags / n_sims <= bound and used / n_sims <= bound, n_sims


def test_a_model_with_a_plain_response_bias_is_not_flagged_by_the_distribution_test():
    """Always "Yes": predicted shares on flattened S_f are far from uniform (the seed's raw comparison), but no more
    toward the cue's label than on the flattened rest, so the distribution test does not flag it."""
    rng = np.random.default_rng(4)
    texts, labels = planted(rng)
    F = feats.text_features(texts)
    split, _ = stats.assign_split(F.index, None, 0.5, seed=0)
    cues = stats.discover(F, labels, split)
    items = pd.concat([pd.DataFrame({"model": "m", "label": labels, "pred": "Yes", "split": split}), F], axis=1)
    acc, dist = stats.probe(items, cues, top_k=3)
    z = dist.set_index("feature").loc["word:zebra"]
    assert z["p_uniform"] < 1e-3 and z["shift"] == 0 and not z["flag"] and not z["used"]
    assert acc.set_index("feature").loc["word:zebra", "flag"]  # ΔAcc alone would flag it: why both tests are needed


def test_flatten_balances_labels_and_is_seeded():
    labels = pd.Series(["Yes"] * 30 + ["No"] * 7)
    a = stats.flatten(labels, ["Yes", "No"], np.random.default_rng(0))
    b = stats.flatten(labels, ["Yes", "No"], np.random.default_rng(0))
    assert list(a) == list(b) and labels.loc[a].value_counts().to_dict() == {"Yes": 7, "No": 7}
    assert len(stats.flatten(pd.Series(["Yes"] * 5), ["Yes", "No"], np.random.default_rng(0))) == 0


# ---------------------------------------------------------------- features

def test_text_features_of_the_seed():
    texts = pd.Series(["The cat did not sleep", "A wonderful happy day with 3 friends", "Teh dgo runs fast today"])
    premises = pd.Series(["A cat sleeps", "Nobody is here", "The dog runs"])
    F = feats.text_features(texts, premises)
    assert F["NEGATION"].tolist() == [True, False, False]
    assert F["SENTIMENT:positive"].tolist() == [False, True, False]
    assert F["NUMBER"].tolist() == [False, True, False]
    assert F["TYPO"].tolist() == [False, False, True]  # "teh", "dgo": unknown to pyspellchecker's dictionary
    assert F["OVERLAP"].tolist() == [True, False, True]  # "cat"; nothing; "runs" ("the" is a stop word)
    assert F["word:cat"].tolist() == [True, False, False]


def test_few_shot_structural_cues():
    line = "There are {t} pens. Alice has {c} of the {t} pens. Does Alice have more than half of the pens?"
    text = "\n".join([line.format(t=10, c=9) + " Yes.", line.format(t=10, c=2) + " No.",
                      line.format(t=10, c=8) + " Yes.", line.format(t=10, c=1) + " No.", line.format(t=10, c=7)])
    F = feats.few_shot_features(pd.Series([text]), nearest_k=3)
    assert F.loc[0, "LAST_LABEL:No"] and F.loc[0, "QUERY_NOUN:pens"]
    assert F.loc[0, "NEAREST_MAJORITY:Yes"]  # nearest to 7/10: 8/10 (Yes), 9/10 (Yes), 2/10 or 1/10 (No)
    assert feats.few_shot_features(pd.Series(["not a few-shot prompt"])) is None


# ---------------------------------------------------------------- errors and the sweep hook

def test_bad_parameters_name_themselves():
    F, labels = cue_free(np.random.default_rng(0), n=20, n_features=2)
    split, _ = stats.assign_split(F.index, None, 0.5, 0)
    with pytest.raises(ValueError, match="min_count"):
        stats.discover(F, labels, split, min_count=0)
    with pytest.raises(ValueError, match="train_fraction"):
        stats.assign_split(F.index, None, 1.5, 0)
    with pytest.raises(ValueError, match="split column"):
        stats.assign_split(F.index, pd.Series(["train"] * 19 + ["holdout"]))
    with pytest.raises(ValueError, match="top_k"):
        stats.top_features(stats.discover(F, labels, split, min_count=1), 0)
    with pytest.raises(ValueError, match="labels"):
        stats.discover(F, pd.Series(["A"] * 20), split)


def test_a_run_of_sentences_is_refused(tmp_path):
    from nbutils.analyses.cues.analysis import analyze_run
    from nbutils.studies.negation import dataset as negation

    stimuli, params = negation.build_stimuli(max_roots=1)
    negation.write_stimuli(stimuli, tmp_path, params)
    with pytest.raises(ValueError, match=r"^study: cue profiling needs labeled answer options; 'negation' scores "
                                         r"sentences \(no labels to profile\)$"):
        analyze_run(tmp_path)
    assert not (tmp_path / "tables").exists() and not (tmp_path / "summary.json").exists()


def test_the_sweep_accepts_a_cues_block_checked_against_the_notebook(tmp_path):
    assert "cues" in sweep.SWEEP_KEYS and "cues" not in studies.REGISTRY
    nb = studies.RUN_ANALYSES["cues"]
    assert {"run_dir", "top_k"} <= notebooks.notebook_parameters(nb)
    bad = tmp_path / "sweep.yaml"
    bad.write_text("study: custom\nrun_dir: %s\ndataset: params/custom/datasets/example_yesno.yaml\n"
                   "models: [params/models/smollm2-135m-instruct.yaml]\ncues: {top_kk: 3}\n" % (tmp_path / "run"))
    with pytest.raises(ValueError, match="top_kk"):
        sweep.run_sweep(bad)


def test_the_cue_profile_of_a_run_without_a_study_analysis_ends_well(tmp_path, capsys):
    """``nbutils run`` of the cue profile on a run whose study is not analysed yet: its results in words are printed,
    the report (which needs the study's analysis) is said not to be written, and the command succeeds (exit 0)."""
    import shutil

    from nbutils import __main__ as cli
    from nbutils import paths
    from nbutils.analyses.cues.analysis import analyze_run

    run = tmp_path / "run"
    shutil.copytree(paths.repo_root() / "outputs" / "samples" / "custom", run)
    for p in [run, *run.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)  # the sample is read-only; its copy is not
    analyze_run(run, top_k=5)  # what the notebook's cell does
    cli._headline_after_analysis(studies.RUN_ANALYSES["cues"], None, {"run_dir": str(run)})
    out, err = capsys.readouterr()
    assert f"results in words → {paths.cues_results_path(run)}" in out
    assert "report: not written (" in err and not paths.report_path(run).exists()
