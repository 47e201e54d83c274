"""Figures the prose quotes from a results file are the file's: the calibration rates in the monotonicity analysis
notebook, docs/statistics.md, the study pages and benchmarks/README.md are computed here from
benchmarks/results/calibration.json and calibration_negation.json and must appear as the text gives them. A results
file made again with other numbers fails here until the prose says them. A figure counts as the file's when it is
the file's value rounded to the digits shown (either way at an exact half: a mean of rates that are multiples of
.005 often lands on one)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from prose import says, text

from nbutils import paths

ROOT = paths.repo_root()
RESULTS = ROOT / "benchmarks" / "results"


@pytest.fixture(scope="module")
def mono():
    """The monotonicity study's cells where a test's own null is true, by test family."""
    rows = [r for r in json.loads((RESULTS / "calibration.json").read_text())["rows"] if r["study"] == "monotonicity"]
    null = [r for r in rows if r["own_null_true"]]

    def cells(*prefixes):
        return [r for r in null if r["test"].startswith(prefixes)]

    return {"rows": rows, "cells": cells}


def stats(cells: list[dict]) -> tuple[int, float, float]:
    rates = [r["rate"] for r in cells]
    assert rates, "no such cells in the results file"
    return len(rates), float(np.mean(rates)), max(rates)


def test_the_headline_tests_rates_in_the_notebook_and_the_pages(mono):
    gee = mono["cells"]("gee_bias_reduced")
    glmm = mono["cells"]("glmm_lrt")
    (n_gee, mean_gee, max_gee), (n_glmm, mean_glmm, max_glmm) = stats(gee), stats(glmm)
    assert n_gee == n_glmm
    worst = max(glmm, key=lambda r: r["rate"])
    varying = max(r["rate"] for r in mono["rows"] if r["test"].startswith("cmh@") and r["scenario"] == "null_varying_gap")
    nb = "notebooks/monotonicity/03_analyze.ipynb"
    notebook = text(nb)
    says(notebook, "averaged {}% (GEE) and {}% (GLMM) over {} null cells", 100 * mean_gee, 100 * mean_glmm, n_gee, where=nb)
    says(notebook, "GEE at most {}%; GLMM at most {}% ± {}%", 100 * max_gee, 100 * max_glmm, 100 * worst["mc_se"],
         where=nb)
    says(notebook, "the fixed-threshold CMH test reached {}%", 100 * varying, where=nb)
    statistics = text("docs/statistics.md")
    says(statistics, "| **yes, with R** | {}% on average over {} cells, at most {}% |", 100 * mean_glmm, n_glmm,
         100 * max_glmm, where="docs/statistics.md")
    says(statistics, "| **yes, without R** (always computed) | {}% on average over {} cells, at most {}% |",
         100 * mean_gee, n_gee, 100 * max_gee, where="docs/statistics.md")
    page = text("docs/studies/monotonicity.md")
    says(page, "rejects a true null in at most {}% of the simulations in each of its {} null cells ({}% on average) and "
         "the GLMM in {}% on average (every cell ≤ {}%)", 100 * max_gee, n_gee, 100 * mean_gee, 100 * mean_glmm,
         100 * max_glmm, where="docs/studies/monotonicity.md")
    says(page, "the sign-flip tests stay at or below {}%", 100 * stats(mono["cells"]("signflip_"))[2],
         where="docs/studies/monotonicity.md")


def test_the_secondary_tests_rates_on_the_statistics_page(mono):
    cells, page, where = mono["cells"], text("docs/statistics.md"), "docs/statistics.md"
    gap, diff = stats(cells("signflip_gap@"))[2], stats(cells("signflip_gap_difference"))[2]
    says(page, "| backs up the headline | at most {}% / {}% |", 100 * gap, 100 * diff, where=where)
    says(page, "| secondary | at most {}% |", 100 * stats(cells("signflip_dprime_gap"))[2], where=where)
    fixed = stats(cells("cmh", "breslow_day", "fisher_holm_any"))[2]
    varying = max(r["rate"] for r in mono["rows"] if r["test"].startswith("cmh@") and r["scenario"] == "null_varying_gap")
    says(page, "at most {}% under their own null; {}% when the gap varies", 100 * fixed, 100 * varying, where=where)
    says(page, "| no | at most {}% (any concept, Holm) |", 100 * stats(cells("mcnemar_holm_any"))[2], where=where)
    says(page, "CI excludes 0 in {}% of null datasets", 100 * stats(cells("cluster_bootstrap"))[1], where=where)


def test_the_benchmarks_readme_table_is_the_calibration_file(mono):
    cells, readme = mono["cells"], text("benchmarks/README.md")
    families = {"`gee_bias_reduced` upward (pure-Python headline)": ["gee_bias_reduced:upward@"],
                "`gee_bias_reduced` explicit / upward × explicit": ["gee_bias_reduced:explicit",
                                                                    "gee_bias_reduced:upward:explicit"],
                "`glmm_lrt` upward (headline with R)": ["glmm_lrt:upward@"],
                "`glmm_lrt` explicit / upward × explicit": ["glmm_lrt:explicit", "glmm_lrt:upward:explicit"],
                "`signflip_gap`": ["signflip_gap@"], "`signflip_gap_difference`": ["signflip_gap_difference"],
                "`signflip_dprime_gap`": ["signflip_dprime_gap"], "`cmh` (fixed thresholds)": ["cmh@"],
                "`breslow_day`": ["breslow_day"], "`fisher_holm_any`": ["fisher_holm_any"],
                "`mcnemar_holm_any`": ["mcnemar_holm_any"], "`cluster_bootstrap` (descriptive CI)": ["cluster_bootstrap"]}
    for label, prefixes in families.items():
        parts = [stats(cells(p)) for p in prefixes]
        slots = " / ".join("{}" for _ in parts)
        says(readme, f"| {label} | {slots} | {slots} | {slots} |", *[n for n, _, _ in parts], *[m for _, m, _ in parts],
             *[x for _, _, x in parts], where="benchmarks/README.md")


def test_the_negation_rates_in_the_pages_are_the_calibration_file():
    rows = json.loads((RESULTS / "calibration_negation.json").read_text())["rows"]
    rate = {(r["test"], r["term"], r["scenario"]): r for r in rows}
    inter = "context × form [deviation]"
    s, z = "lmm_negation_satterthwaite", "lmm_negation_mixedlm_z"
    page, where = text("docs/statistics.md"), "docs/statistics.md"
    says(page, "| **yes, with R** | {}% / {}% (null without / with slopes varying by root) |",
         100 * rate[s, inter, "null"]["rate"], 100 * rate[s, inter, "null_varying"]["rate"], where=where)
    z_worst = max((r for r in rows if r["test"] == z and r["null_true"]), key=lambda r: r["rate"])
    assert z_worst["term"] == "context [treatment]" and z_worst["scenario"] == "null_varying"
    says(page, "| **yes, without R** | {}% / {}%; up to {}% for the treatment-coded context effect under varying "
         "slopes |", 100 * rate[z, inter, "null"]["rate"], 100 * rate[z, inter, "null_varying"]["rate"],
         100 * z_worst["rate"], where=where)
    power_s, power_z = rate[s, inter, "planted"]["rate"], rate[z, inter, "planted"]["rate"]
    says(page, "with 20 roots: {}% (Satterthwaite), {}% (z)", 100 * power_s, 100 * power_z, where=where)
    study, where = text("docs/studies/negation.md"), "docs/studies/negation.md"
    head = max(r["rate"] for r in rows if r["headline"] and r["null_true"])
    high = sorted(r["rate"] for r in rows if r["test"] == z and r["scenario"] == "null_varying" and r["rate"] > 0.07)
    says(study, "headline stays at or below {}% false positives", 100 * head, where=where)
    assert len(high) == 2
    says(study, "reaches {}–{}% for two terms when slopes vary", 100 * high[0], 100 * high[-1], where=where)
    says(study, "log-perplexity scale is {}% (Satterthwaite)", 100 * power_s, where=where)
    readme = text("benchmarks/README.md")
    for r in rows:
        if r["scenario"] != "null":
            continue
        cells = [rate[r["test"], r["term"], sc] for sc in ("null", "null_varying", "planted_small", "planted")]
        says(readme, f"| `{r['test']}` | {r['term']} | " + " | ".join("{} ± {}" for _ in cells) + " |",
             *[v for c in cells for v in (c["rate"], c["mc_se"])], where="benchmarks/README.md")
