"""The scored sample runs that ship with the repository (``outputs/samples/<study>/``, made by
``scripts/make_sample.sh``): each study's analysis runs on one without a model.

An analysis notebook calls :func:`run_dir_or_sample` before it reads its run: a run with scores is analysed as it is; a
run with no score file stops with one line naming the sample to use, and in Colab (where a badge opens a fresh
runtime with no run in it) the sample is analysed instead, so run-all ends with results.
"""
from __future__ import annotations

from pathlib import Path

from . import colab, paths, studies

SAMPLES = "outputs/samples"  # from the project root
# the analyses that read another study's run, and the sample they use
RUN_ANALYSIS_SAMPLES = {"cues": "monotonicity"}


def sample_dir(study: str) -> str:
    """The sample run of ``study`` as a path from the project root (what ``run_dir`` is set to)."""
    return f"{SAMPLES}/{RUN_ANALYSIS_SAMPLES.get(study, study)}"


def _has_dataset(run: Path) -> bool:
    return any(paths.dataset_path(run, s.dataset_file).is_file() for s in studies.REGISTRY.values())


def _has_scores(run: Path) -> bool:
    return bool(paths.score_sidecars(run)) or bool(paths.partial_sidecars(run))


def run_dir_or_sample(run_dir, study: str, scored: bool = True):
    """The run directory an analysis of ``study`` reads: ``run_dir`` when it holds a dataset and (``scored``) score
    files; otherwise, in Colab, the study's sample run (saying so in one line), and elsewhere a
    ValueError of one line that names the sample. A run with score files that cannot be used (limited, stale) is
    returned as it is: the analysis says what is wrong with them."""
    run = paths.resolve(run_dir)
    if _has_dataset(run) and (not scored or _has_scores(run)):
        return run_dir
    missing = "no dataset" if not _has_dataset(run) else "no scores"
    fix = ("score it first" if missing == "no scores" else "make its dataset first" if not scored
           else "make and score it first")
    sample = sample_dir(study)
    if not _has_dataset(paths.resolve(sample)):
        raise ValueError(f"run_dir: {run} has {missing}: {fix} (the sample run {sample} is not in this install: it "
                         "ships with the repository)")
    if colab.in_colab():
        print(f"{run_dir} has {missing}: analysing the sample run {sample} instead (Colab)")
        return sample
    raise ValueError(f"run_dir: {run} has {missing}: {fix}, or set run_dir = {sample!r} "
                     "(the sample run: a small dataset scored by the embedded model)")
