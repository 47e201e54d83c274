"""Run generate → score (per model) → analyze through papermill, keeping every executed notebook."""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import artifacts
from .paths import model_slug, resolve
from .runs import IDENTITY_KEYS

STUDIES = {
    "monotonicity": {
        "notebooks": {"generate": "notebooks/01_generate.ipynb", "score": "notebooks/02_score.ipynb",
                      "analyze": "notebooks/03_analyze.ipynb"},
        "dataset_file": "prompts.parquet",
        "dataset_keys": {"concepts", "conditions", "prompts_per_concept", "n_examples", "seed", "overwrite"},
        "model_keys": {"model", "revision", "quantization", "dtype", "device", "chat_template", "batch_size", "threads",
                       "rescore_margin", "limit", "checkpoint_every", "shard_index", "num_shards", "overwrite"},
    },
    "negation": {
        "notebooks": {"generate": "notebooks/negation/01_stimuli.ipynb", "score": "notebooks/negation/02_score.ipynb",
                      "analyze": "notebooks/negation/03_analyze.ipynb"},
        "dataset_file": "stimuli.parquet",
        "dataset_keys": {"stimuli_csv", "structures", "synonyms", "max_roots", "overwrite"},
        "model_keys": {"model", "revision", "quantization", "dtype", "device", "threads", "masked", "pll_variant",
                       "batch_size", "overwrite"},
    },
}
NOTEBOOKS = STUDIES["monotonicity"]["notebooks"]


@dataclass
class SweepReport:
    """What a sweep did: models scored, skipped, failed (with their errors)."""

    run_dir: Path
    scored: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    analyzed: bool = False

    def lines(self) -> list[str]:
        """Human-readable summary."""
        out = [f"run_dir: {self.run_dir}", f"scored: {self.scored or '-'}", f"skipped (already scored): {self.skipped or '-'}",
               f"analyzed: {self.analyzed}"]
        out += [f"FAILED {m}: {e}" for m, e in self.failed.items()]
        return out


def load_yaml(path: str | Path, allowed: set[str] | None = None, what: str = "parameter file") -> dict:
    """Read a YAML mapping; unknown keys are an error naming the file and the allowed keys."""
    p = resolve(path)
    if not p.exists():
        raise ValueError(f"{what}: {p} does not exist")
    data = yaml.safe_load(p.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{what}: {p} must hold a mapping of parameter names to values")
    if allowed is not None and set(data) - allowed:
        raise ValueError(f"{what}: {p} has unknown keys {sorted(set(data) - allowed)}; allowed: {sorted(allowed)}")
    return data


def execute(notebook: str, output: Path, parameters: dict, kernel: str | None = None, progress: bool = False) -> None:
    """Execute one notebook with papermill, writing the executed copy to ``output``."""
    import papermill as pm

    output.parent.mkdir(parents=True, exist_ok=True)
    pm.execute_notebook(str(resolve(notebook)), str(output), parameters=parameters, kernel_name=kernel,
                        cwd=str(resolve(".")), progress_bar=progress, log_output=False)


def already_scored(run_dir: Path, params: dict, dataset_file: str = "prompts.parquet") -> bool:
    """True when a complete score file exists for this model and precision on the current dataset file."""
    sidecar = run_dir / "scores" / f"{model_slug(params['model'])}.json"
    data = run_dir / dataset_file
    if not sidecar.exists() or not data.exists():
        return False
    meta = artifacts.read_json(sidecar)
    explicit = {k: v for k, v in params.items() if k in IDENTITY_KEYS  # the same fields score_run refuses to mix
                and not (k == "dtype" and v == "auto") and not (k == "revision" and v is None)}
    same = all(meta.get(k) == v for k, v in explicit.items())
    return bool(meta.get("complete")) and same and meta.get("prompts_sha256") == artifacts.sha256_file(data)


def run_sweep(sweep_file: str | Path | None = None, run_dir: str | None = None, dataset: str | None = None,
              models: list[str] | None = None, limit: int | None = None, kernel: str | None = None,
              n_boot: int | None = None) -> SweepReport:
    """Generate once, score once per model file (failures reported, not fatal), then analyze."""
    cfg = load_yaml(sweep_file, {"study", "run_dir", "dataset", "models", "analyze"}, "sweep") if sweep_file else {}
    study_name = cfg.get("study", "monotonicity")
    if study_name not in STUDIES:
        raise ValueError(f"study: must be one of {list(STUDIES)}, got {study_name!r}")
    study = STUDIES[study_name]
    notebooks = study["notebooks"]
    run_dir = run_dir or cfg.get("run_dir")
    dataset = dataset or cfg.get("dataset")
    models = list(models or cfg.get("models") or [])
    if not run_dir or not dataset or not models:
        raise ValueError("sweep: needs run_dir, dataset and at least one model file (in the sweep file or as options)")
    run = resolve(run_dir)
    nbdir = run / "notebooks"
    report = SweepReport(run)
    ds = load_yaml(dataset, study["dataset_keys"], "dataset")
    model_params = [load_yaml(m, study["model_keys"], "model") for m in models]
    for m, p in zip(models, model_params):
        if "model" not in p:
            raise ValueError(f"model: {m} does not name a `model`")
        if limit is not None and "limit" in study["model_keys"]:
            p["limit"] = limit
    print(f"[sweep] {study_name}: generate → {run / study['dataset_file']}", flush=True)
    execute(notebooks["generate"], nbdir / Path(notebooks["generate"]).name, dict(ds, run_dir=str(run)), kernel)
    for p in model_params:
        slug = model_slug(p["model"])
        if not p.get("overwrite") and already_scored(run, p, study["dataset_file"]):
            print(f"[sweep] skip {slug}: already scored on this dataset", flush=True)
            report.skipped.append(slug)
            continue
        print(f"[sweep] score {slug}", flush=True)
        t0 = time.perf_counter()
        try:
            execute(notebooks["score"], nbdir / f"02_score__{slug}.ipynb", dict(p, run_dir=str(run)), kernel)
            report.scored.append(slug)
            print(f"[sweep] scored {slug} in {time.perf_counter() - t0:.0f} s", flush=True)
        except Exception as err:  # noqa: BLE001 - one model failing must not stop the others
            msg = str(getattr(err, "evalue", "") or err).strip().splitlines()
            report.failed[slug] = f"{getattr(err, 'ename', type(err).__name__)}: {msg[-1] if msg else ''}"
            print(f"[sweep] FAILED {slug}: {report.failed[slug]}", flush=True)
            traceback.print_exc(limit=0)
    if report.scored or report.skipped:
        analyze_params = dict(cfg.get("analyze") or {}, run_dir=str(run))
        if n_boot is not None:
            analyze_params["n_boot"] = n_boot
        print("[sweep] analyze", flush=True)
        execute(notebooks["analyze"], nbdir / Path(notebooks["analyze"]).name, analyze_params, kernel)
        report.analyzed = True
    return report
