"""The instrument's validation in one command: the positive control's dose ladder and the decoy, scored on the same
prompts under several prompt seeds, each seed's run analysed, then the detection rates, the gaps and the
false-positive rate across seeds (``notebooks/validation/power.ipynb``; ``docs/validation.md`` explains them).

    python scripts/validation.py params/validation.yaml            # score, analyse, and read the power curve
    python scripts/validation.py params/validation.yaml --results benchmarks/results/validation.json
    python scripts/validation.py params/validation.yaml --sample-only outputs/samples/validation-new  # then move it

For each seed of the parameter file it writes the dataset file with that seed (``<run_root>/datasets/``) and runs the
sweep (generate, score every model file of ``ladder`` and ``decoy``, analyse) into ``<run_root>/seed-<N>/``; a seed's
models already scored with the same settings are skipped, as a sweep skips them. ``workers`` seeds run at once, each
score notebook on one CPU thread. Then the power notebook reads every seed's analysis into the run root, the study's
run folder (``figures/power_curve.png``, ``tables/power.csv``, ``summary.json``, ``results.md``, ``validation.json``,
the executed notebook under ``notebooks/``), and its report is written (``report.html``); the wall times (per seed and in
all, added up over the runs of one root: a run that adds a model scores only it) and the host go into ``timing.json``
there and, with ``--results``, a copy of the summary with them.

No prompt seed may be a training or held-out seed of an adapter it scores (their ``training.json``): an error naming
the seed otherwise, before anything runs. Exit status 0: done; 1: a step failed; 2: bad parameters.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
KEYS = {"run_root", "dataset", "seeds", "ladder", "decoy", "workers", "analyze"}
NOTEBOOK = "notebooks/validation/power.ipynb"
ANALYZE_KEYS = ("n_boot",)  # what the script passes on to each seed's analysis


def check_params(cfg: dict, source) -> None:
    """The validation's parameter file (``cfg`` as read, its keys and seeds already checked) before anything runs:
    ``analyze`` holds only ``ANALYZE_KEYS`` with values the analysis takes; the dataset file is checked against the
    generate notebook at every seed; every model file as the sweep checks it (``sweep.check_sweep``, which writes
    nothing); the ladder's files all name one adapter at distinct strengths, and the decoy another adapter."""
    from nbutils import paths
    from nbutils.artifacts import load_yaml
    from nbutils.sweep import check_parameters
    from nbutils.sweep._parameters import declared
    from nbutils.studies import get
    from nbutils.studies.monotonicity.dataset import validate_parameters
    from nbutils.studies.monotonicity.params import MonotonicityParams
    from nbutils.studies.monotonicity.validation_inputs import adapter_name
    from nbutils.sweep import check_sweep

    analyze = cfg.get("analyze")
    if analyze is not None and not isinstance(analyze, dict):
        raise ValueError(f"analyze: must be a mapping (n_boot: …) in {source}, got {analyze!r}")
    unknown = sorted(set(analyze or {}) - set(ANALYZE_KEYS))
    if unknown:
        raise ValueError(f"analyze: {unknown} in {source} is not passed to the seeds' analyses; the block takes "
                         f"{list(ANALYZE_KEYS)}")
    try:
        MonotonicityParams.from_mapping(dict(analyze or {}))
    except ValueError as err:
        raise ValueError(f"analyze: {err} (in {source})") from None
    record = get("monotonicity")
    data = load_yaml(cfg["dataset"], None, "dataset")
    defaults = {k: v for k, (_, v) in declared(record.notebooks["generate"]).items()}
    for seed in cfg["seeds"]:  # as the notebook declares them, then as the dataset builds them (one seed's check)
        check_parameters(record.notebooks["generate"], dict(data, seed=seed),
                         f"dataset {cfg['dataset']} at seed {seed}", fixed=("run_dir",))
    given = {**defaults, **data, "seed": cfg["seeds"][0]}
    try:
        validate_parameters(**{k: given[k] for k in ("concepts", "conditions", "prompts_per_concept", "n_examples",
                                                      "seed")})
    except ValueError as err:
        raise ValueError(f"dataset: {cfg['dataset']}: {err}") from None
    root = paths.resolve(cfg["run_root"])
    check_sweep(run_dir=str(root / f"seed-{cfg['seeds'][0]}"), dataset=str(cfg["dataset"]), models=list(cfg["models"]),
                n_boot=(analyze or {}).get("n_boot"), study="monotonicity")
    strengths: dict[float, str] = {}
    ladder_adapter = None
    for m in cfg["ladder"]:
        p = yaml.safe_load(paths.resolve(m).read_text()) or {}
        name = adapter_name(p.get("adapter"))
        if name is None:
            raise ValueError(f"ladder: {m} names no adapter; every file of the ladder is the control's adapter at "
                             "one strength (adapter_scale)")
        if ladder_adapter is not None and name != ladder_adapter[0]:
            raise ValueError(f"ladder: {m} names the adapter {p['adapter']!r} and {ladder_adapter[1]} "
                             f"{ladder_adapter[2]!r}; a ladder is one adapter at several strengths")
        ladder_adapter = ladder_adapter or (name, m, p["adapter"])
        scale = float(p.get("adapter_scale", 1.0))
        if scale in strengths:
            raise ValueError(f"ladder: {strengths[scale]} and {m} are both strength {scale:g}; give each strength once")
        strengths[scale] = m
    if cfg.get("decoy"):
        decoy = adapter_name((yaml.safe_load(paths.resolve(cfg["decoy"]).read_text()) or {}).get("adapter"))
        if decoy is None or decoy == ladder_adapter[0]:
            raise ValueError(f"decoy: {cfg['decoy']} must name an adapter other than the ladder's "
                             f"({ladder_adapter[2]!r}); it is read as the false-positive check beside it")


def read_params(path) -> dict:
    """The validation's parameter file, every key checked (an error naming the key and the file)."""
    from nbutils import artifacts, paths
    from nbutils.artifacts import load_yaml

    cfg = load_yaml(path, KEYS, "validation")
    for key in ("run_root", "dataset", "seeds", "ladder"):
        if key not in cfg:
            raise ValueError(f"{key}: missing in {path}")
    paths.check_run_dir(cfg["run_root"])
    seeds = cfg["seeds"]
    if (not isinstance(seeds, list) or len(seeds) < 1 or len(set(seeds)) != len(seeds)
            or any(isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= artifacts.SEED_MAX for s in seeds)):
        raise ValueError(f"seeds: must be a list of distinct integers from 0 to {artifacts.SEED_MAX} in {path}, got "
                         f"{seeds!r}")
    if not isinstance(cfg["ladder"], list) or not cfg["ladder"]:
        raise ValueError(f"ladder: must be a list of model files in {path}, got {cfg['ladder']!r}")
    if cfg.get("decoy") is not None and not isinstance(cfg["decoy"], str):
        raise ValueError(f"decoy: must be one model file in {path}, got {cfg['decoy']!r}")
    models = [*cfg["ladder"], *([cfg["decoy"]] if cfg.get("decoy") else [])]
    if not all(isinstance(m, str) for m in models):
        raise ValueError(f"ladder: must be a list of model files (and decoy one model file) in {path}")
    for m in models:
        if not paths.resolve(m).is_file():
            raise ValueError(f"{'decoy' if m == cfg.get('decoy') else 'ladder'}: no model file {m} (in {path})")
    workers = cfg.get("workers", 1)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: must be an integer ≥ 1 in {path}, got {workers!r}")
    cfg = dict(cfg, models=models, workers=workers)
    check_params(cfg, path)  # the analyze block, the dataset at every seed, every model file, one ladder adapter
    return dict(cfg, analyze=dict(cfg.get("analyze") or {}))


def adapter_of(model_file) -> str | None:
    from nbutils import paths

    return (yaml.safe_load(paths.resolve(model_file).read_text()) or {}).get("adapter")


def check_seeds(cfg: dict) -> None:
    """No prompt seed is a training or held-out seed of an adapter scored (an error naming the seed otherwise)."""
    from nbutils import paths

    for m in cfg["models"]:
        adapter = adapter_of(m)
        record = paths.resolve(adapter) / "training.json" if adapter else None
        if record is None or not record.is_file():
            continue
        trained = json.loads(record.read_text())
        taken = {trained.get("seed"), trained.get("held_out_seed")} & set(cfg["seeds"])
        if taken:
            raise ValueError(f"seeds: {sorted(taken)} trained or checked {adapter} ({record}); pick prompt seeds "
                             "disjoint from its training")


def model_files(cfg: dict, folder: Path) -> list[str]:
    """The model files as the sweep reads them: as they are with one worker, else copies that score on one thread
    (two passes at once on two cores beat one pass on both), in ``folder``."""
    from nbutils import paths

    if cfg["workers"] == 1:
        return list(cfg["models"])
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for m in cfg["models"]:
        params = yaml.safe_load(paths.resolve(m).read_text())
        copy = folder / Path(m).name
        copy.write_text(f"# {m}, scored on one CPU thread (scripts/validation.py)\n"
                        + yaml.safe_dump(dict(params, threads=1), sort_keys=False))
        out.append(str(copy))
    return out


def one_seed(cfg: dict, seed: int, models: list[str], root: Path) -> dict:
    """Generate, score and analyse one seed's run (the sweep); its wall time."""
    from nbutils import paths
    from nbutils.sweep import run_sweep

    data = yaml.safe_load(paths.resolve(cfg["dataset"]).read_text())
    dataset = root / "datasets" / f"seed-{seed}.yaml"
    dataset.parent.mkdir(parents=True, exist_ok=True)
    dataset.write_text(f"# {cfg['dataset']} with seed {seed} (scripts/validation.py)\n"
                       + yaml.safe_dump(dict(data, seed=seed), sort_keys=False))
    t0 = time.time()
    report = run_sweep(run_dir=str(root / f"seed-{seed}"), dataset=str(dataset), models=models,
                       n_boot=cfg["analyze"].get("n_boot"), study="monotonicity")
    failed = [f"{m}: {why}" for m, why in report.failed.items()] + ([] if report.analyzed else ["the analysis"])
    return {"seed": seed, "seconds": round(time.time() - t0, 1), "scored": list(report.scored),
            "skipped": list(report.skipped), "failed": failed}


def make_sample(root: Path, dest: Path, seeds: list[int] | None = None) -> list[Path]:
    """Copy each seed's prompts, score files and their sidecars and analysis summary from the run root into ``dest``,
    a new folder (what ``outputs/samples/validation/`` ships: the power notebook reads it without a model); ``seeds``:
    those of the parameter file only (a folder another run left in the root is not copied)."""
    import shutil

    from nbutils import paths
    from nbutils.studies.monotonicity import validation

    if dest.exists():
        raise ValueError(f"--sample-only: {dest} exists; give a new folder (nothing is overwritten)")
    copied = []
    runs = validation.seed_runs(root)
    missing = [s for s in seeds or () if s not in runs]
    if missing:
        raise ValueError(f"--sample-only: {root} holds no run of seed {missing[0]}; run the study first")
    for seed, run in runs.items():
        if seeds is not None and seed not in seeds:
            continue
        if validation.current_summary(run) is None:
            raise ValueError(f"--sample-only: {run} has no analysis of its current scores; run the study first")
        (dest / run.name / "scores").mkdir(parents=True)
        files = [run / "prompts.parquet", paths.sidecar(run / "prompts.parquet"), paths.summary_path(run)]
        files += [f for side in paths.score_sidecars(run) for f in (side, side.with_suffix(".parquet"))]
        for f in files:
            target = dest / run.name / f.relative_to(run)
            shutil.copy2(f, target)
            copied.append(target)
    return copied


def host() -> dict:
    import torch

    from nbutils.engine.loading.host import Host

    h = Host.probe()
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").is_file() else ""
    return {"cpu": cpu, "cores": h.cores, "cpu_native_bf16": h.cpu_native_bf16, "gpu": torch.cuda.is_available(),
            "python": platform.python_version(), "torch": torch.__version__}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("params", help="the validation's parameter file (params/validation.yaml)")
    p.add_argument("--results", help="also write the summary, wall times and host to this JSON file")
    p.add_argument("--sample-only", metavar="DIR",
                   help="score nothing: copy the run root's seeds (prompts, scores, analyses) into DIR, a new folder")
    args = p.parse_args(argv)
    try:
        cfg = read_params(args.params)
        check_seeds(cfg)
    except ValueError as err:
        print(f"validation: {err}", file=sys.stderr)
        return 2
    from nbutils import artifacts, paths

    if args.sample_only:
        try:
            files = make_sample(paths.resolve(cfg["run_root"]), paths.resolve(args.sample_only), list(cfg["seeds"]))
        except ValueError as err:
            print(f"validation: {err}", file=sys.stderr)
            return 2
        print(f"validation: {len(files)} files copied into {args.sample_only}")
        return 0
    from nbutils.sweep import run_notebook

    root = paths.resolve(cfg["run_root"])
    root.mkdir(parents=True, exist_ok=True)
    models = model_files(cfg, root / "models")
    t0 = time.time()
    # one process per seed at once: a run's lock is held per process (its token in the environment)
    with ProcessPoolExecutor(cfg["workers"], mp_context=multiprocessing.get_context("spawn")) as pool:
        seeds = list(pool.map(one_seed, *zip(*[(cfg, s, models, root) for s in cfg["seeds"]])))
    scoring = time.time() - t0
    failed = [s for s in seeds if s["failed"]]
    if failed:
        print(f"validation: models failed in {failed}", file=sys.stderr)
        return 1
    ladder = adapter_of(cfg["ladder"][-1])
    decoy = adapter_of(cfg["decoy"]) if cfg.get("decoy") else "none"
    from nbutils.report import write_report

    run_notebook(NOTEBOOK, None, {"run_dir": cfg["run_root"], "ladder_adapter": ladder, "decoy_adapter": decoy,
                                  "seeds": list(cfg["seeds"])})  # only the seeds of this file, never a stray folder
    print(f"validation: report → {write_report(root)}")
    this = {"seeds": seeds, "sweeps_seconds": round(scoring, 1), "total_seconds": round(time.time() - t0, 1),
            "workers": cfg["workers"], "models": [Path(m).name for m in models]}
    before = artifacts.read_json(root / "timing.json") if (root / "timing.json").is_file() else None
    runs = ([] if before is None else before.get("runs", [before])) + [this]  # a run that added models: both times
    timing = {"runs": runs, "total_seconds": round(sum(r["total_seconds"] for r in runs), 1),
              "workers": cfg["workers"], "host": host()}
    artifacts.write_json(timing, root / "timing.json")
    print(f"validation: {len(seeds)} seeds in {this['total_seconds'] / 60:.1f} min "
          f"({timing['total_seconds'] / 60:.1f} min in {len(runs)} runs of this root); {root / 'summary.json'}")
    if args.results:
        summary = artifacts.read_json(paths.summary_path(root))
        artifacts.write_json(dict(summary, timing=timing, params=str(args.params)), args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
