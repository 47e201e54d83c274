"""Persona figures: a chance line at the chance level of the questions' options, labelled; the legend outside the
panels; a bias figure that says so when no persona differs from the baseline."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import numpy as np
import pandas as pd

from nbutils.studies.personas import plots, stats


def _scores(correct: np.ndarray, kinds: list[str], chance: np.ndarray) -> pd.DataFrame:
    """Joined scores from a questions × personas correctness matrix (persona 0 the baseline), chance per question."""
    q, p = correct.shape
    pids = ["baseline" if k == "baseline" else f"{k}_{j}" for j, k in enumerate(kinds)]
    cats = {"baseline": "baseline", "real": "gender", "null_random": "null_random", "null_word": "null_word"}
    return pd.DataFrame({"model": "m", "question_id": np.repeat([f"q{i}" for i in range(q)], p),
                         "persona_id": pids * q, "persona": [("" if k == "baseline" else i) for i, k in zip(pids, kinds)] * q,
                         "persona_kind": kinds * q, "category": [cats[k] for k in kinds] * q,
                         "correct": correct.reshape(-1), "chance": np.repeat(chance, p),
                         "choice": np.where(correct.reshape(-1), "A", "B")})


KINDS = ["baseline"] + ["real"] * 4 + ["null_random"] * 2 + ["null_word"] * 2
CHANCE = np.array([0.25, 0.5] * 20)  # half four-option, half Yes/No questions: chance 0.375


def test_accuracy_figure_draws_chance_from_the_options_and_keeps_the_legend_off_the_data():
    correct = np.random.default_rng(1).random((40, len(KINDS))) < 0.6
    fig = plots.accuracy_by_persona(stats.accuracy_table(_scores(correct, KINDS, CHANCE)))
    ax = fig.axes[0]
    chance = [ln for ln in ax.get_lines() if ln.get_label().startswith("chance")]
    assert len(chance) == 1 and chance[0].get_label() == "chance (37.5%)"
    assert np.allclose(chance[0].get_xdata(), 37.5)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(renderer)
    assert not legend.overlaps(ax.get_window_extent(renderer)), "the legend covers the panel"
    assert {t.get_text() for t in fig.legends[0].get_texts()} >= {"chance (37.5%)", "no persona (baseline)"}


def test_bias_figure_says_no_variance_instead_of_showing_an_empty_panel():
    same = np.tile(np.random.default_rng(2).random((40, 1)) < 0.6, (1, len(KINDS)))  # every persona = the baseline
    dif = stats.dif_table(_scores(same, KINDS, CHANCE))
    assert (dif["bias"] == 0).all()
    ax = plots.persona_bias(dif).axes[0]
    assert any("no variance across personas" in t.get_text() for t in ax.texts)
    assert ax.get_xlim()[0] < 0 < ax.get_xlim()[1], "points at bias 0 sit inside the panel"
    varied = np.random.default_rng(3).random((40, len(KINDS))) < 0.6
    ax = plots.persona_bias(stats.dif_table(_scores(varied, KINDS, CHANCE))).axes[0]
    assert not any("no variance" in t.get_text() for t in ax.texts)
