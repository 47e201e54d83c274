"""Other tools' per-item logs imported as a custom-study run (``nbutils.imports``), on the real logs that
``scripts/make_import_logs.py`` made offline and ``tests/data/imports/`` ships: lm-evaluation-harness ``--log_samples``
files and Inspect JSON logs of two local models on one 48-question task.

The imported log-likelihoods, decisions and correctness equal the logs' own numbers exactly; the paired test of the
two models agrees with statsmodels' exact McNemar test on the table made from the logs themselves; items not in every
log are named and left out; generation logs and bad inputs are refused with the file named."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.contingency_tables import mcnemar

from nbutils import artifacts, paths
from nbutils.runstore import _sidecar as score_sidecar
from nbutils.__main__ import main
from nbutils.imports import LogError, import_logs
from nbutils.items import disagree, items
from nbutils.studies.custom import analysis, models as model_tests

DATA = Path(__file__).parent / "data" / "imports"
LM = sorted((DATA / "lm-eval").glob("*/samples_probe_mc_*.jsonl"))
GEN = sorted((DATA / "lm-eval").glob("*/samples_probe_gen_*.jsonl"))
INSPECT = sorted((DATA / "inspect").glob("*.json"))


def lines(path: Path) -> list[dict]:
    return [json.loads(t) for t in path.read_text(encoding="utf-8").splitlines() if t.strip()]


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("lm") / "run"
    done = import_logs("lm-eval", LM, run, group_by=["doc.category"])
    return run, done


def test_the_shipped_logs_are_real_and_of_two_models():
    assert len(LM) == 2 and len(GEN) == 1 and len(INSPECT) == 2
    for p in LM:
        res = json.loads(next(p.parent.glob("results_*.json")).read_text())
        assert res["lm_eval_version"] and res["configs"]["probe_mc"]["output_type"] == "multiple_choice"


def test_lm_eval_margins_and_decisions_equal_the_logs_own_numbers(lm_run):
    run, done = lm_run
    assert done.n_items == 48 and not done.left_out
    data = pd.read_parquet(paths.dataset_path(run, "items.parquet"))
    for log, label in zip(LM, done.models):
        scores = pd.read_parquet(paths.score_file(run, label))
        side = score_sidecar.read(paths.sidecar(paths.score_file(run, label)))
        assert side["imported_from"]["sha256"] == artifacts.sha256_file(log) and side["label"] == label
        recs = {str(r["doc_id"]): r for r in lines(log)}
        for row, (_, s), (_, d) in zip(range(len(scores)), scores.iterrows(), data.iterrows()):
            rec = recs[s["row_id"]]
            lls = [float(x[0]) for x in rec["filtered_resps"]]
            options = [a["arg_1"][1:] for a in rec["arguments"].values()]
            assert [s[f"logp_{j}"] for j in range(len(lls))] == lls  # exactly the logged floats
            top = sorted(lls)
            assert s["margin"] == top[-1] - top[-2]
            assert s["choice"] == options[int(np.argmax(lls))]
            assert bool(s["correct"]) == bool(rec["acc"])
            assert bool(s["correct_norm_char"]) == bool(rec["acc_norm"])
            assert json.loads(d["options"]) == options and d["category"] == rec["doc"]["category"]
        assert float(scores["correct"].mean()) == pytest.approx(np.mean([r["acc"] for r in recs.values()]), abs=0)


def test_the_paired_test_agrees_with_statsmodels_exact_mcnemar(lm_run):
    run, done = lm_run
    scores = analysis.load(run)
    assert scores.attrs["order"] == done.models  # the first log given is the reference
    t = model_tests.compare(scores, scores.attrs["order"])
    ref, other = ({str(r["doc_id"]): bool(r["acc"]) for r in lines(p)} for p in LM)
    a = np.array([other[k] for k in ref])
    b = np.array([ref[k] for k in ref])
    table = [[int((a & b).sum()), int((a & ~b).sum())], [int((~a & b).sum()), int((~a & ~b).sum())]]
    row = t[t["group"] == "(all)"].iloc[0]
    assert row["first"] == done.models[1] and row["second"] == done.models[0]
    assert row["p"] == mcnemar(table, exact=True).pvalue
    assert row["diff"] == pytest.approx(a.mean() - b.mean(), abs=1e-15)
    assert (row["only_first"], row["only_second"], row["n_items"]) == (table[0][1], table[1][0], 48)
    for group, g in t[t["group"] != "(all)"].groupby("group"):
        keys = [str(r["doc_id"]) for r in lines(LM[0]) if r["doc"]["category"] == group]
        x, y = np.array([other[k] for k in keys]), np.array([ref[k] for k in keys])
        sub = [[int((x & y).sum()), int((x & ~y).sum())], [int((~x & y).sum()), int((~x & ~y).sum())]]
        assert g["p"].iloc[0] == mcnemar(sub, exact=True).pvalue


def test_the_analysis_reads_the_import_and_says_the_comparison_in_words(lm_run):
    run, done = lm_run
    a = analysis.analyze_run(run, use_r=False)
    recs = [r for r in a.summary["records"] if r["test"] == "mcnemar_models"]
    overall = next(r for r in recs if r["group"] == "(all)")
    assert overall["models"] == [done.models[1], done.models[0]] and overall["n"] == 48
    line = next(s for s in a.text.splitlines() if "48 items both answered" in s)
    more = overall["estimate"] > 0
    if overall["p"] < 0.05:
        assert ("answered more items right" if more else "answered fewer items right") in line
    else:
        assert "no evidence" in line
    assert any("imported from 2 lm-eval log(s)" in n for n in a.notes)
    df = items(run)
    both = disagree(df, *done.models, run_dir=run)  # the item browser's pairs: items given different answers
    pick = [{str(r["doc_id"]): int(np.argmax([float(x[0]) for x in r["filtered_resps"]])) for r in lines(p)} for p in LM]
    assert both["row_id"].nunique() == sum(pick[0][k] != pick[1][k] for k in pick[0])
    assert both["row_id"].nunique() >= overall["only_first"] + overall["only_second"]


def _copy(src: Path, dest: Path, keep=lambda r: True, edit=lambda r: r) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("".join(json.dumps(edit(r)) + "\n" for r in lines(src) if keep(r)), encoding="utf-8")
    res = next(src.parent.glob("results_*.json"))
    shutil.copy(res, dest.parent / res.name)
    return dest


def test_items_not_in_every_log_are_named_and_left_out(tmp_path):
    short = _copy(LM[1], tmp_path / "b" / LM[1].name, keep=lambda r: r["doc_id"] not in (3, 17, 40))
    run = tmp_path / "run"
    done = import_logs("lm-eval", [LM[0], short], run)
    assert done.n_items == 45
    assert done.left_out == {done.models[0]: ["3", "17", "40"]}
    assert len(pd.read_parquet(paths.dataset_path(run, "items.parquet"))) == 45
    notes = analysis.source_notes(run)
    assert any("3 item(s) of smollm2-135m-instruct (3, 17, 40)" in n for n in notes)


def test_logs_without_doc_hashes_are_matched_by_doc_id(tmp_path):
    bare = _copy(LM[1], tmp_path / "b" / LM[1].name, edit=lambda r: {k: v for k, v in r.items() if k != "doc_hash"})
    done = import_logs("lm-eval", [LM[0], bare], tmp_path / "run")
    assert done.n_items == 48 and any("matched by doc_id" in n for n in done.notes)


def test_the_mutual_information_variant_reads_the_conditional_half(tmp_path):
    def doubled(r):
        args = list(r["arguments"].values())
        r = dict(r, arguments={f"gen_args_{j}": a for j, a in enumerate(args + [dict(a, arg_0="") for a in args])},
                 filtered_resps=r["filtered_resps"] + [["-1.0", "False"]] * len(args), acc_mutual_info=0.0)
        return r

    mi = _copy(LM[0], tmp_path / "a" / LM[0].name, edit=doubled)
    done = import_logs("lm-eval", [mi], tmp_path / "run")
    scores = pd.read_parquet(paths.score_file(tmp_path / "run", done.models[0]))
    first = lines(LM[0])[0]
    assert [scores.loc[0, f"logp_{j}"] for j in range(4)] == [float(x[0]) for x in first["filtered_resps"]]
    assert "logp_4" not in scores


def test_a_generation_log_says_what_can_and_cannot_be_analysed(tmp_path):
    with pytest.raises(LogError) as err:
        import_logs("lm-eval", GEN, tmp_path / "run")
    msg = str(err.value)
    assert str(GEN[0]) in msg and "generated text" in msg and "exact_match" in msg and "multiple_choice" in msg
    assert not (tmp_path / "run").exists()


def test_bad_inputs_are_refused_naming_the_file(tmp_path):
    with pytest.raises(LogError, match="no such file"):
        import_logs("lm-eval", [tmp_path / "samples_x_2026-01-01T00-00-00.jsonl"], tmp_path / "run")
    csv = tmp_path / "scores.csv"
    csv.write_text("a,b\n1,2\n")
    with pytest.raises(LogError, match=r"scores\.csv: line 1 is not JSON"):
        import_logs("lm-eval", [csv], tmp_path / "run")
    with pytest.raises(LogError, match=r"not an Inspect eval log"):
        import_logs("inspect", [LM[0]], tmp_path / "run")
    other = _copy(LM[1], tmp_path / "o" / LM[1].name.replace("probe_mc", "other_task"))
    with pytest.raises(LogError, match=r"different tasks \(probe_mc: .*; other_task: samples_other_task"):
        import_logs("lm-eval", [LM[0], other], tmp_path / "run")
    with pytest.raises(LogError, match=r"has no field 'doc.subject'.*'category'"):
        import_logs("lm-eval", LM, tmp_path / "run", group_by=["doc.subject"])
    with pytest.raises(LogError, match="name their model"):
        import_logs("lm-eval", [LM[0], _copy(LM[0], tmp_path / "c" / LM[0].name)], tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_run_of_other_logs_is_not_overwritten(tmp_path, lm_run):
    run = tmp_path / "run"
    import_logs("lm-eval", LM, run)
    before = artifacts.sha256_file(paths.dataset_path(run, "items.parquet"))
    import_logs("lm-eval", LM, run)  # the same logs again: nothing changes
    assert artifacts.sha256_file(paths.dataset_path(run, "items.parquet")) == before
    with pytest.raises(artifacts.OverwriteError, match="already holds a dataset made with other parameters"):
        import_logs("lm-eval", LM, run, group_by=["doc.category"])
    assert artifacts.sha256_file(paths.dataset_path(run, "items.parquet")) == before


def test_inspect_logs_give_choices_and_correctness_as_logged(tmp_path):
    run = tmp_path / "run"
    done = import_logs("inspect", INSPECT, run, group_by=["metadata.category"])
    assert done.n_items == 48 and any("not log-likelihoods" in n for n in done.notes)
    for log, label in zip(INSPECT, done.models):
        samples = {s["id"]: s for s in json.loads(log.read_text())["samples"]}
        scores = pd.read_parquet(paths.score_file(run, label))
        for s in scores.itertuples():
            sample = samples[s.row_id]
            score = next(iter(sample["scores"].values()))
            assert bool(s.correct) == (score["value"] in ("C", 1, 1.0, True))
            letter = (score.get("answer") or "").strip().upper()
            want = sample["choices"][ord(letter) - 65] if len(letter) == 1 and ord(letter) - 65 < 4 else None
            assert s.choice == want
    a = analysis.analyze_run(run, use_r=False)
    assert any(r["test"] == "mcnemar_models" for r in a.summary["records"])


def test_an_inspect_eval_archive_reads_as_its_json():
    """Inspect's own .eval format (``inspect log convert`` of the second JSON log) reads item for item as the JSON."""
    from nbutils.imports import inspect_logs

    (archive,) = sorted((DATA / "inspect-eval").glob("*.eval"))
    json_log = next(p for p in INSPECT if p.stem == archive.stem)
    a, b = inspect_logs.read(archive), inspect_logs.read(json_log)
    assert len(a.items) == 48 and a.items == b.items and a.model == b.model == "tiny-random-llama"


def test_the_command_imports_and_refuses_with_the_file_named(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["import", "lm-eval", *map(str, LM), "--run-dir", str(run), "--group-by", "doc.category",
                 "--label", "SmolLM2", "--label", "random", "--no-analysis"]) == 0
    out = capsys.readouterr().out
    assert "SmolLM2, random; 48 items every log holds" in out and "03_analyze.ipynb" in out
    assert main(["import", "lm-eval", str(GEN[0]), "--run-dir", str(tmp_path / "gen")]) == 2
    assert str(GEN[0]) in capsys.readouterr().err
    assert sorted(p.name for p in paths.scores_dir(run).glob("*.parquet")) == ["SmolLM2.parquet", "random.parquet"]


def test_the_import_time_benchmark_runs_on_a_small_log(tmp_path):
    """``benchmarks/import_time.py`` on 40 synthetic items per log, the import timed (the analysis of an import is
    tested above on the real logs)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("import_time", Path(__file__).parents[1] / "benchmarks" / "import_time.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--n", "40", "--out", str(tmp_path / "t.json"), "--import-only"]) == 0
    report = json.loads((tmp_path / "t.json").read_text())
    assert report["items_shared"] == 40 and report["import_seconds"] > 0 and report["analysis_seconds"] is None


def test_nothing_is_written_through_a_link_or_beside_another_study(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (run / "scores").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(ValueError, match="symbolic link"):
        import_logs("lm-eval", LM, run)
    assert sorted(p.name for p in run.iterdir()) == ["scores"] and not any((tmp_path / "elsewhere").iterdir())
    other = tmp_path / "other"
    other.mkdir()
    (other / "prompts.parquet").write_bytes(b"")
    with pytest.raises(LogError, match="another study's dataset"):
        import_logs("lm-eval", LM, other)
    assert sorted(p.name for p in other.iterdir()) == ["prompts.parquet"]
