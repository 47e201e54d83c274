"""This study's view of a run's score files: every complete full-run model joined with the prompts."""
from __future__ import annotations

from ...runstore import load_scores as _load
from .. import get
from ..common import variants
from .twins import originals


def load_scores(run_dir, include_limited: bool = False, twins: bool = False):
    """Scores of every complete model joined with ``prompts.parquet`` (one row per model × prompt). Where the answer
    words vary (True/False beside Yes/No) the score file names its options by position; ``pred_yes`` is then whether
    the model chose the pair's affirmative word, which is scored first, so ``margin`` is affirmative − negative.
    ``twins``: keep the twin prompts of a dataset that has them (the analysis reads them beside their originals);
    by default only the design's own prompts, which every other statistic and figure reads."""
    df = _load(run_dir, get("monotonicity").spec, include_limited=include_limited)
    if "pred_yes" not in df and "answer_words" in df:
        yes = df["answer_words"].map(lambda n: variants.words(n)[0])
        df["pred_yes"] = (df["choice"] == yes).to_numpy()
    return df if twins else originals(df)
