"""The validation study's reading of its seeds (``studies.monotonicity.validation``): detection and flag rates with
Wilson intervals, the gap's interval across seeds, the smallest dose found reliably, and the words said of them, on
simulated per-seed rows (the seeds' analyses are the study's own, tested with it)."""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from nbutils import artifacts, paths
from nbutils.runstore import _sidecar as score_sidecar
from nbutils.studies.monotonicity import validation

DOSES = (0.0, 0.25, 0.5, 0.75, 1.0)


def rows_of(found: dict, seeds: int = 5, gaps: dict | None = None, decoy_flags: int = 0, seed: int = 0) -> pd.DataFrame:
    """Per-seed rows: ``found[dose]`` seeds detected at each ladder dose; the decoy flagged in ``decoy_flags``."""
    rng = np.random.default_rng(seed)
    out = []
    for arm, doses in (("ladder", DOSES), ("decoy", (1.0,))):
        for dose in doses:
            k = found.get(dose, 0) if arm == "ladder" else decoy_flags
            for s in range(seeds):
                hit = s < k
                gap = (gaps or {}).get(dose, 0.6 * dose if arm == "ladder" else 0.0) + rng.normal(0, 0.05)
                out.append({"seed": 31 + s, "arm": arm, "dose": dose, "model": f"{arm}-{dose}", "n": 120,
                            "acc_up": 0.5 + gap / 2, "acc_down": 0.5 - gap / 2, "gap": gap, "gap_ci_low": gap - 0.1,
                            "gap_ci_high": gap + 0.1, "test": "glmm_lrt", "method": "m", "p": 0.01 if hit else 0.5,
                            "valid": True, "verdict": ("more" if arm == "ladder" else "less") if hit else "none",
                            "detected": hit and arm == "ladder", "flagged": hit, "reading": "prior" if hit else "none",
                            "floor_accuracy": 0.5, "above_floor": False, "uses_examples": False,
                            "yes_rate": 0.5})
    return pd.DataFrame(out)


def test_rates_and_intervals_are_statsmodels_wilson_and_the_t_interval_across_seeds():
    rows = rows_of({0.5: 3, 0.75: 5, 1.0: 5}, decoy_flags=1)
    tab = validation.table(rows)
    half = tab[(tab["arm"] == "ladder") & (tab["dose"] == 0.5)].iloc[0]
    lo, hi = proportion_confint(3, 5, alpha=0.05, method="wilson")
    assert (half["detected"], half["seeds"]) == (3, 5) and half["detection_rate"] == 0.6
    assert math.isclose(half["detection_ci_low"], lo) and math.isclose(half["detection_ci_high"], hi)
    g = rows[(rows["arm"] == "ladder") & (rows["dose"] == 0.5)]["gap"].to_numpy()
    t_lo, t_hi = stats.t.interval(0.95, len(g) - 1, loc=g.mean(), scale=stats.sem(g))
    assert math.isclose(half["gap_ci_low"], t_lo) and math.isclose(half["gap_ci_high"], t_hi)
    decoy = tab[tab["arm"] == "decoy"].iloc[0]
    assert decoy["detected"] == 0 and decoy["flagged"] == 1, "a decoy's gap in either direction is a false positive"
    summary = validation.records(tab, rows)
    fp = summary["false_positive"]
    assert (fp["flagged"], fp["n"]) == (1, 10), "the decoy's seeds and dose 0's"
    assert list(tab["arm"]) == ["ladder"] * 5 + ["decoy"]


@pytest.mark.parametrize("found, want", [({1.0: 5, 0.75: 4, 0.5: 3}, 0.75), ({1.0: 5, 0.75: 5, 0.5: 4, 0.25: 1}, 0.5),
                                         ({1.0: 5, 0.75: 3, 0.5: 5}, 1.0), ({1.0: 3}, None), ({}, None)])
def test_the_reliable_dose_is_the_smallest_found_at_it_and_every_stronger_dose(found, want):
    got = validation.reliable_dose(validation.table(rows_of(found)))
    assert (got and got["dose"]) == want


@pytest.mark.parametrize("seed", range(30))
def test_the_words_say_the_records(seed):
    rng = np.random.default_rng(seed)  # random ladders: any number of seeds found at each dose, any decoy
    found, decoy_flags = rng.integers(0, 6, len(DOSES)), int(rng.integers(0, 6))
    rows = rows_of(dict(zip(DOSES, found)), decoy_flags=decoy_flags, seed=seed)
    tab = validation.table(rows)
    summary = validation.records(tab, rows)
    words = validation.text(summary)
    for r in summary["records"]:
        who = f"the control at strength {r['dose']:g}:" if r["arm"] == "ladder" else "the decoy:"
        line = next(x for x in words.splitlines() if who in x)
        assert f"in {r['detected']} of {r['seeds']} prompt sets" in line
        assert f"gap {100 * r['gap']:+.1f} points" in line
    fp = summary["false_positive"]
    assert f"in {fp['flagged']} of {fp['n']} prompt sets" in words
    rel = summary["reliable"]
    if rel is None:
        assert "rules out no gap" in words and "smallest strength" not in words
    else:
        assert f"is {rel['dose']:g}, a gap of {100 * rel['gap']:+.1f} points" in words
        assert all(r["detection_rate"] >= 0.8 for r in summary["records"] if r["arm"] == "ladder"
                   and r["dose"] >= rel["dose"])
    assert not re.search(r"\bnan\b", words, re.I)


def test_the_arms_are_read_from_the_score_files_sidecars(tmp_path):
    run = tmp_path / "seed-31"
    (paths.scores_dir(run)).mkdir(parents=True)
    for stem, meta in (("m.control", {"adapter": "adapters/smollm2-135m-upward-control", "adapter_scale": None}),
                       ("m.control-s0.5", {"adapter": "adapters/smollm2-135m-upward-control", "adapter_scale": 0.5}),
                       ("m.decoy", {"adapter": "/abs/adapters/smollm2-135m-balanced-decoy/"}),
                       ("m", {"adapter": None})):
        score_sidecar.write({"model": "m", "dataset_file": "prompts.parquet", "dataset_sha256": "0" * 64,
                             "scorer": "choices", "id_column": "item_id", "complete": True, **meta},
                            paths.scores_dir(run) / f"{stem}.json")
    got = validation.arms(run, "adapters/smollm2-135m-upward-control", "adapters/smollm2-135m-balanced-decoy")
    assert got == {"m.control": {"arm": "ladder", "dose": 1.0}, "m.control-s0.5": {"arm": "ladder", "dose": 0.5},
                   "m.decoy": {"arm": "decoy", "dose": 1.0}}
    with pytest.raises(ValueError, match=r"^root: .* holds no run of the validation study"):
        validation.seed_runs(tmp_path)


RESULTS = paths.repo_root() / "benchmarks" / "results" / "validation.json"
DECOY = artifacts.read_json(paths.repo_root() / "adapters" / "smollm2-135m-balanced-decoy" / "training.json")
REFUSED = artifacts.read_json(paths.repo_root() / "benchmarks" / "results" / "decoy-balanced-training.json")


def test_the_docs_page_shows_the_results_file():
    """docs/validation.md carries the table and the sentences the study makes of its results file, word for word."""
    results = artifacts.read_json(RESULTS)
    page = (paths.repo_root() / "docs" / "validation.md").read_text()
    assert validation.markdown_table(results) in page
    for line in validation.text(results).splitlines():
        assert line in page, line
    assert validation.cost_text(results) in page and validation.decoy_text(DECOY) in page
    assert validation.decoy_text(REFUSED) in page and "It passed its check and ships." in validation.decoy_text(DECOY)
    decoy = [r for r in results["records"] if r["arm"] == "decoy"]
    assert len(decoy) == 1 and decoy[0]["flagged"] == 0, "the shipped decoy reads null in every prompt set"
    assert results["seeds"] == yaml.safe_load((paths.repo_root() / "params" / "validation.yaml").read_text())["seeds"]


@pytest.fixture(scope="module")
def sample_study(tmp_path_factory):
    """The power notebook run by ``nbutils run`` on the shipped sample (each seed's scores and analysis, nothing scored
    again) into a run folder of its own; the command's exit status and what it printed."""
    import contextlib
    import io

    from nbutils.__main__ import main

    run = tmp_path_factory.mktemp("validation") / "validation_sample"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["run", "notebooks/validation/power.ipynb", "-p", "root", "outputs/samples/validation",
                     "-p", "run_dir", str(run)])
    return run, code, printed.getvalue()


def test_the_notebook_reads_the_shipped_sample_into_the_results(sample_study):
    """The summary the power notebook writes from the shipped sample is the results file's (less its wall times)."""
    from notebook_checks import ran_clean

    copy, code, _ = sample_study
    assert code == 0
    ran_clean(paths.executed_notebook(copy, "notebooks/validation/power.ipynb"))
    assert (copy / "figures" / "power_curve.png").stat().st_size > 10_000
    summary = artifacts.read_json(copy / "summary.json")
    results = artifacts.read_json(RESULTS)
    assert summary["records"] == results["records"] and summary["per_seed"] == results["per_seed"]
    assert summary["false_positive"] == results["false_positive"] and summary["reliable"] == results["reliable"]
    assert sorted(pd.read_csv(copy / "tables" / "power.csv")["dose"].unique()) == [0, 0.25, 0.5, 0.75, 1]


def test_the_study_has_a_run_folder_a_report_and_a_line_in_runs(sample_study, capsys):
    """Its run folder holds its executed notebook, results.md (the findings, then each strength's reading per prompt
    set), its record and report.html, whose first screen is the findings, the power curve and that table; the terminal
    printed the findings; `runs` lists it up to date; `nbutils report` rebuilds the page; a seed analysed again since
    is said on the page and in `runs`."""
    from bs4 import BeautifulSoup

    from nbutils.report import _run_index as run_index
    from nbutils.__main__ import main

    run, code, printed = sample_study
    summary = artifacts.read_json(run / "summary.json")
    words = (run / "results.md").read_text()
    rel, fp = summary["reliable"], summary["false_positive"]
    assert f"is {rel['dose']:g}, a gap of {100 * rel['gap']:+.1f} points" in words.partition("\n## ")[0]
    assert f"in {fp['flagged']} of {fp['n']} prompt sets" in words.partition("\n## ")[0]
    assert f"is {rel['dose']:g}, a gap of" in printed and "report → " in printed
    table = words.partition(validation_heading())[2].partition("\n## ")[0]
    seeds = artifacts.read_json(RESULTS)["per_seed"]
    assert table.count("\n| control |") == 5 and table.count("\n| decoy |") == 1
    for r in seeds:  # each prompt set's reading of each model, with its p
        row = next(x for x in table.splitlines() if x.startswith(f"| {'control' if r['arm'] == 'ladder' else 'decoy'} "
                                                                 f"| {r['dose']:g} |"))
        assert validation.seed_cell(pd.Series(r)) in row.split(" | ")[3:][summary["seeds"].index(r["seed"])]
    page = BeautifulSoup((run / "report.html").read_text(), "html.parser")
    finding = page.find("section", class_="finding")
    assert [li.get_text() for li in finding.find("ul", class_="findings").find_all("li")] == [
        x[2:] for x in words.partition("\n## ")[0].splitlines() if x.startswith("- ")]
    assert finding.find("img") and "power curve" in finding.find("figcaption").get_text()
    assert "prompt set 31" in finding.find("table").get_text()
    line = next(x for x in run_index.index_lines(run.parent) if x.startswith("validation_sample"))
    assert "[validation]  3 runs read" in line and line.endswith("report up to date"), line
    (run / "report.html").unlink()
    assert main(["report", str(run)]) == 0 and (run / "report.html").is_file()
    record = artifacts.read_json(run / validation.RECORD)
    artifacts.write_json(dict(record, inputs=dict(record["inputs"], **{"seed-31/summary.json": "0" * 64})),
                         run / validation.RECORD)
    assert main(["report", str(run)]) == 0
    assert "seed-31/summary.json: their sha256 differs" in capsys.readouterr().err
    line = next(x for x in run_index.index_lines(run.parent) if x.startswith("validation_sample"))
    assert "runs it read analysed again since" in line
    artifacts.write_json(record, run / validation.RECORD)


def validation_heading() -> str:
    from nbutils.report import TABLE_HEADING

    return TABLE_HEADING


def test_a_sample_is_read_into_its_copys_folder_and_no_other_studys_folder_is_written(tmp_path, capsys):
    from nbutils.__main__ import _run_folder, main

    assert main(["report", "outputs/samples/validation"]) == 2
    assert "holds the runs the validation study reads" in capsys.readouterr().err

    params = {"root": "outputs/samples/validation"}
    _run_folder("notebooks/validation/power.ipynb", params)
    assert params["run_dir"] == "outputs/validation_sample"
    params = {"root": "outputs/mine", "run_dir": "outputs/elsewhere"}
    _run_folder("notebooks/validation/power.ipynb", params)
    assert params["run_dir"] == "outputs/elsewhere"
    with pytest.raises(ValueError, match="^run_dir: .* sample run that ships"):
        validation.check_run_folder("outputs/samples/validation", "outputs/samples/validation")
    (tmp_path / "seed-1").mkdir()
    with pytest.raises(ValueError, match="^run_dir: .* holds the validation of other seed runs"):
        validation.check_run_folder(tmp_path, "outputs/samples/validation")
    assert validation.locate(None, str(tmp_path)) == (str(tmp_path), str(tmp_path))
