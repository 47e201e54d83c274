"""The scored sample runs that ship with the repository (``outputs/samples/<study>/``, made by
``scripts/make_sample.sh``): each study's analysis runs on one without a model.

The samples are read-only (``paths.check_not_sample``): an analysis works on a copy (``copy_sample``). An analysis
notebook calls :func:`run_dir_or_sample` before it reads its run: a run with scores is analysed as it is; a run with no
score file stops with one line naming the sample and how to copy it, and in Colab (where a badge opens a fresh runtime
with no run in it) a copy of the sample is analysed instead, so run-all ends with results.
"""
from __future__ import annotations

from pathlib import Path

from . import colab, paths, studies

SAMPLES = paths.SAMPLES  # from the project root; read-only (``paths.check_not_sample``): analyses work on a copy
# the analyses that read another study's run, and the sample they use
RUN_ANALYSIS_SAMPLES = {"cues": "monotonicity"}


def sample_dir(study: str) -> str:
    """The sample run of ``study`` as a path from the project root (what ``run_dir`` is set to)."""
    return f"{SAMPLES}/{RUN_ANALYSIS_SAMPLES.get(study, study)}"


def _has_dataset(run: Path) -> bool:
    return any(paths.dataset_path(run, s.dataset_file).is_file() for s in studies.REGISTRY.values())


def _has_scores(run: Path) -> bool:
    return bool(paths.score_sidecars(run)) or bool(paths.partial_sidecars(run))


def copy_sample(study: str) -> str:
    """A working copy of ``study``'s sample run (``paths.sample_copy``, from the project root): its dataset and score
    files copied there unless a copy with the same dataset is there already; returns its path."""
    import shutil

    sample, dest = paths.resolve(sample_dir(study)), paths.sample_copy(Path(sample_dir(study)).name)
    target = paths.resolve(dest)
    datasets = [s.dataset_file for s in studies.REGISTRY.values()
                if paths.dataset_path(sample, s.dataset_file).is_file()]
    if target.exists() and all((target / d).is_file() and (target / d).read_bytes() == (sample / d).read_bytes()
                               for d in datasets):
        return dest
    if target.exists():
        raise ValueError(f"run_dir: {target} holds another run; move it away to analyse a fresh copy of {sample}")
    paths.scores_dir(target).mkdir(parents=True)
    for name in datasets:  # what the sample ships: its dataset, its score files, their sidecars
        for f in (paths.dataset_path(sample, name), paths.sidecar(paths.dataset_path(sample, name))):
            shutil.copy2(f, target / f.name)
    for side in paths.score_sidecars(sample):
        for f in (side, side.with_suffix(".parquet")):
            if f.is_file():
                shutil.copy2(f, paths.scores_dir(target) / f.name)
    return dest


def run_dir_or_sample(run_dir, study: str, scored: bool = True):
    """The run directory an analysis of ``study`` reads: ``run_dir`` when it holds a dataset and (``scored``) score
    files; otherwise, in Colab, a copy of the study's sample run (saying so in one line), and elsewhere a
    ValueError of one line that names the sample and how to copy it. A sample run itself is read-only: in Colab its
    copy is analysed, elsewhere it is refused with the way to copy it. A run with score files that cannot be used
    (limited, stale) is returned as it is: the analysis says what is wrong with them."""
    run = paths.resolve(run_dir)
    sample = sample_dir(study)
    copy = paths.sample_copy(Path(sample).name)
    if run.resolve().is_relative_to(paths.resolve(SAMPLES).resolve()):
        if colab.in_colab():
            print(f"{run_dir} is a sample run, read-only: analysing a copy of it, {copy}, instead (Colab)")
            return copy_sample(study)
        paths.check_not_sample(run)
    if _has_dataset(run) and (not scored or _has_scores(run)):
        return run_dir
    missing = "no dataset" if not _has_dataset(run) else "no scores"
    fix = ("score it first" if missing == "no scores" else "make its dataset first" if not scored
           else "make and score it first")
    if not _has_dataset(paths.resolve(sample)):
        raise ValueError(f"run_dir: {run} has {missing}: {fix} (the sample run {sample} is not in this install: it "
                         "ships with the repository)")
    if colab.in_colab():
        print(f"{run_dir} has {missing}: analysing a copy of the sample run {sample}, {copy}, instead (Colab)")
        return copy_sample(study)
    raise ValueError(f"run_dir: {run} has {missing}: {fix}, or analyse a copy of the sample run (a small dataset "
                     f"scored by the embedded model): `cp -r {sample} {copy}`, then set run_dir = {copy!r}")
