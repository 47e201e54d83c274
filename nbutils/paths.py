"""Where things live: the project root, the notebooks and parameter files, and the whole layout of a run directory.

Every relative path (a run directory, a sweep or parameter file, a notebook) is taken from the project root,
``root()``, which is the first of:

1. the folder in the environment variable ``NBUTILS_ROOT``;
2. the working directory, or the nearest folder above it, that is a checkout of a project: it holds both
   ``pyproject.toml`` and a ``notebooks/`` folder;
3. the checkout this package was installed from with ``pip install -e``;
4. the working directory.

So a clone works from any folder inside it, and ``pip install`` elsewhere writes runs under the folder you run from.
The notebooks and parameter files the suite ships (``notebooks/…``, ``params/…``) are looked up in the root first,
then in the checkout the package was installed from, else in the copy packed into the package (``nbutils/_bundled/``):
``nbutils sweep params/demo.yaml`` runs from any folder, and a ``params/`` of your own in the root takes precedence.

Every file name under a run directory is spelled here and nowhere else:

    {run}/<dataset file>  + .json      the study's dataset and its sidecar (prompts.parquet for monotonicity)
    {run}/scores/{slug}[.limit-N][.shard-I-of-K].parquet + .json
    {run}/scores/.partial/…            checkpoints of unfinished scoring runs
    {run}/scores/.stale/<time>/…       scores set aside: their dataset was regenerated, or their settings changed
    {run}/tables/, {run}/figures/, {run}/summary.json, {run}/results.md, {run}/report.html, {run}/.lock
    {run}/notebooks/<study>_<name>.ipynb, score__{slug}.ipynb   executed notebooks
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

ROOT_ENV = "NBUTILS_ROOT"
SAMPLES = "outputs/samples"  # the scored sample runs that ship (scripts/make_sample.sh makes them): read-only
PAPERMILL_ENV = "NBUTILS_UNDER_PAPERMILL"  # set while papermill runs a notebook (its kernel inherits it)
SHIPPED = ("notebooks", "params")  # top-level folders of the repository that are also packed into the package
BUNDLED = Path(__file__).resolve().parent / "_bundled"  # their packed copy (present in a built wheel only)


def is_checkout(folder: Path) -> bool:
    """Whether ``folder`` is a project checkout: it holds ``pyproject.toml`` and a ``notebooks/`` folder."""
    return (folder / "pyproject.toml").is_file() and (folder / "notebooks").is_dir()


def installed_checkout() -> Path | None:
    """The checkout this package was installed from (``pip install -e``), or None for an installed copy."""
    folder = Path(__file__).resolve().parent.parent
    return folder if is_checkout(folder) and (folder / "nbutils").is_dir() else None


def repo_root() -> Path:
    """The checkout this package was installed from; a RuntimeError for a copy installed without ``-e`` (for the
    folder relative paths are taken from, use ``root()``)."""
    found = installed_checkout()
    if found is None:
        raise RuntimeError(f"nbutils is not installed from a checkout (it is at {Path(__file__).resolve().parent}); "
                           f"install it with `pip install -e <checkout>`, or use paths.root()")
    return found


def root() -> Path:
    """The project root every relative path is taken from (the rule is in this module's docstring)."""
    env = os.environ.get(ROOT_ENV)
    if env:
        folder = Path(env).expanduser().absolute()
        if not folder.is_dir():
            raise ValueError(f"{ROOT_ENV}: {folder} is not an existing folder")
        return folder
    cwd = Path.cwd()
    return next((f for f in (cwd, *cwd.parents) if is_checkout(f)), None) or installed_checkout() or cwd


def shipped_copy(path: str | Path) -> Path | None:
    """Where the suite's own copy of a relative ``notebooks/…`` or ``params/…`` path lies (the checkout the package
    was installed from, else the copy packed into the package), or None when it has none."""
    p = Path(path)
    if p.is_absolute() or not p.parts or p.parts[0] not in SHIPPED:
        return None
    base = installed_checkout() or BUNDLED
    return base / p if (base / p).exists() else None


def resolve(path: str | Path) -> Path:
    """Absolute paths stay; relative ones are taken from ``root()``. A ``notebooks/…`` or ``params/…`` path missing
    there is the suite's own copy when it ships one (``shipped_copy``)."""
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    here = root() / p
    return here if here.exists() else shipped_copy(p) or here


def model_slug(model: str) -> str:
    """A file-name-safe name for a model id or path.

    Hub ids keep their name ("allenai/OLMo-2-1124-13B-Instruct" → "allenai--OLMo-2-1124-13B-Instruct"). A local
    folder gets its folder name plus 8 hex digits of its absolute path (of its path in the project when it is inside
    the project root: the same name in every checkout), so two folders that share a name never share a score file.
    """
    name = str(model).rstrip("/")
    local = Path(name).expanduser()
    local = local if local.is_absolute() else root() / local  # where the notebooks run, whatever the cwd
    if ("/" in name or name.startswith(".")) and local.exists():
        where = local.resolve()
        try:
            where = where.relative_to(root().resolve())
        except ValueError:
            pass
        digest = hashlib.sha256(str(where).encode()).hexdigest()[:8]
        name = f"{local.resolve().name}-{digest}"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name.replace("/", "--")).strip("-")


def sidecar(path: str | Path) -> Path:
    """The JSON metadata file beside a data file."""
    return Path(path).with_suffix(".json")


def dataset_path(run_dir, filename: str) -> Path:
    """A study's dataset file in a run."""
    return resolve(run_dir) / filename


def prompts_path(run_dir) -> Path:
    """The concept-learning study's dataset file."""
    return dataset_path(run_dir, "prompts.parquet")


def scores_dir(run_dir) -> Path:
    """Folder of every model's score files."""
    return resolve(run_dir) / "scores"


def precision_tag(quantization: str | None = None, dtype: str | None = None) -> str | None:
    """The precision part of a score file's name, from the parameters as the user set them: ``8bit``/``4bit`` when
    asked for, else ``bfloat16``/``float16`` when asked for; None (no tag) when they are left to the host (``auto``,
    or not given) and for ``float32``: the file a study's analysis reads first."""
    if quantization in ("8bit", "4bit"):
        return quantization
    if dtype in ("bfloat16", "float16"):
        return str(dtype)
    return None


def scale_recorded(adapter, scale) -> float | None:
    """The one rule for an adapter's strength in a score's name and identity: None at full strength (1) or without
    an adapter (so a file scored before the setting existed, or at full strength, is the same scoring)."""
    return float(scale) if adapter and scale is not None and scale != 1 else None


def scale_of(recorded) -> float:
    """The strength a recorded ``adapter_scale`` stands for: 1 (full strength) where none is recorded."""
    return 1.0 if recorded is None else float(recorded)


def score_slug(model: str, quantization: str | None = None, dtype: str | None = None,
               adapter: str | None = None, adapter_scale: float = 1.0) -> str:
    """The name a model's score files start with (the one place it is derived, for the score notebook, the sweep and
    the cluster): its slug, the adapter's slug when a LoRA adapter is merged into it (``{slug}.{adapter slug}``,
    with ``-s{scale}`` when it is merged at another strength than 1: ``….upward-control-s0.5``), plus the precision
    when it was set explicitly (``{slug}.8bit``, ``{slug}.float32`` is not tagged: see ``precision_tag``), so one run
    can hold the same model at several precisions, with several adapters and at several adapter strengths."""
    tag, recorded = precision_tag(quantization, dtype), scale_recorded(adapter, adapter_scale)
    scale = "" if recorded is None else f"-s{recorded:g}"
    return model_slug(model) + (f".{model_slug(adapter)}{scale}" if adapter else "") + (f".{tag}" if tag else "")


def score_stem(slug: str, limit: int | None = None, shard_index: int = 0, num_shards: int = 1) -> str:
    """File stem of one scoring run: full runs are ``{slug}``; limited runs and shards are marked in the name. The slug
    must be a plain name (``check_plain_name``)."""
    check_plain_name(slug, "slug")
    name = slug if limit is None else f"{slug}.limit-{limit}"
    return name if num_shards == 1 else f"{name}.shard-{shard_index}-of-{num_shards}"


def score_file(run_dir, slug: str, limit: int | None = None, shard_index: int = 0, num_shards: int = 1) -> Path:
    """The final Parquet of one scoring run (its sidecar: ``sidecar(path)``)."""
    return scores_dir(run_dir) / f"{score_stem(slug, limit, shard_index, num_shards)}.parquet"


def partial_dir(run_dir) -> Path:
    """Checkpoints of unfinished scoring runs."""
    return scores_dir(run_dir) / ".partial"


def partial_file(run_dir, slug: str, limit: int | None = None, shard_index: int = 0, num_shards: int = 1) -> Path:
    """The checkpoint of an unfinished scoring run."""
    return partial_dir(run_dir) / f"{score_stem(slug, limit, shard_index, num_shards)}.parquet"


def progress_file(partial: Path) -> Path:
    """Live progress (rows done, rate) of the run whose checkpoint is ``partial``; the sweep reads it."""
    return Path(partial).with_suffix(".progress.json")


def shard_sidecars(run_dir, slug: str, limit: int | None = None) -> list[Path]:
    """Sidecars of every shard of one model's run."""
    return sorted(scores_dir(run_dir).glob(f"{score_stem(slug, limit)}.shard-*-of-*.json"))


def score_sidecars(run_dir) -> list[Path]:
    """Every final score sidecar in a run (full, limited and shards; read each one's metadata to tell)."""
    return sorted(scores_dir(run_dir).glob("*.json"))


def analysable_score_files(run_dir) -> list[Path]:
    """Every final score file an analysis can read: full and limited runs and merged shards, not the shards themselves
    (their rows are in the merged file)."""
    return [p.with_suffix(".parquet") for p in score_sidecars(run_dir)
            if p.with_suffix(".parquet").is_file() and not re.search(r"\.shard-\d+-of-\d+$", p.stem)]


def partial_sidecars(run_dir) -> list[Path]:
    """Every checkpoint sidecar of unfinished runs."""
    return sorted(p for p in partial_dir(run_dir).glob("*.json") if not p.name.endswith(".progress.json"))


def stale_dir(run_dir, stamp: str) -> Path:
    """Where scores of a replaced dataset are moved."""
    return scores_dir(run_dir) / ".stale" / stamp


def stale_sidecars(run_dir) -> list[Path]:
    """Sidecars of score files set aside because their dataset was regenerated."""
    return sorted((scores_dir(run_dir) / ".stale").glob("*/*.json"))


def tables_dir(run_dir) -> Path:
    """CSV and LaTeX tables of the analysis."""
    return resolve(run_dir) / "tables"


def figures_dir(run_dir) -> Path:
    """PNG and PDF figures of the analysis."""
    return resolve(run_dir) / "figures"


def summary_path(run_dir) -> Path:
    """The machine-readable headline results."""
    return resolve(run_dir) / "summary.json"


def results_path(run_dir) -> Path:
    """The results in words (Markdown): the design, the headline test with estimate, CI and p, caveats."""
    return resolve(run_dir) / "results.md"


def cues_results_path(run_dir) -> Path:
    """The cue profile's results in words (Markdown), beside the study's own ``results.md``."""
    return resolve(run_dir) / "cues_results.md"


def report_path(run_dir) -> Path:
    """The run's report: one self-contained HTML page of the analysis's text, tables and figures, without code."""
    return resolve(run_dir) / "report.html"


def notebooks_dir(run_dir) -> Path:
    """Executed copies of the notebooks a sweep ran."""
    return resolve(run_dir) / "notebooks"


def executed_notebook(run_dir, notebook: str, slug: str | None = None) -> Path:
    """Executed copy of ``notebook`` in a run (one per model for the score step).

    A study's notebook (``notebooks/<study>/<name>.ipynb``) is ``<study>_<name>.ipynb``, so the analyses of two
    studies never share a file (``notebooks/monotonicity/03_analyze.ipynb`` → ``monotonicity_03_analyze.ipynb``); a
    notebook directly under ``notebooks/`` or anywhere else keeps its own name (``score__{slug}.ipynb``)."""
    nb = Path(notebook)
    stem = f"{nb.parent.name}_{nb.stem}" if nb.parent.parent.name == "notebooks" else nb.stem
    if slug is not None:
        check_plain_name(slug, "slug")
    return notebooks_dir(run_dir) / (f"{stem}__{slug}.ipynb" if slug else f"{stem}.ipynb")


def is_run(folder: Path) -> bool:
    """Whether ``folder`` holds a run: a ``scores/`` folder, a lock, a summary, or a Parquet file with its sidecar."""
    return ((folder / "scores").is_dir() or lock_path(folder).exists() or summary_path(folder).is_file()
            or any(sidecar(p).is_file() for p in folder.glob("*.parquet")))


def legacy_executed_notebook(run_dir, notebook: str) -> Path:
    """Where runs made before each study's executed notebooks had their own names kept ``notebook``'s copy
    (``notebooks/03_analyze.ipynb`` for every study's analysis): read only after checking which notebook it is."""
    return notebooks_dir(run_dir) / f"{Path(notebook).stem}.ipynb"


def kernel_log(executed: Path) -> Path:
    """What the kernel that ran an executed notebook wrote to its stderr (beside the notebook)."""
    return Path(executed).with_suffix(".kernel.log")


def logs_dir(run_dir) -> Path:
    """Logs of the jobs a cluster sweep submitted (submitit's files, and ``jobs.json``: which job scores what)."""
    return resolve(run_dir) / "logs"


def lock_path(run_dir) -> Path:
    """The advisory lock file of a run directory."""
    return resolve(run_dir) / ".lock"


def check_run_dir(run_dir) -> Path:
    """``run_dir`` resolved, once it is a non-empty path naming a folder of its own: not the project root or a folder
    above it (the run's files would land among the sources). A ValueError naming ``run_dir`` says where it resolves."""
    if isinstance(run_dir, os.PathLike):  # a Path, or a run handle (``runstore.Run``)
        text = os.fspath(run_dir)
    elif isinstance(run_dir, str):
        text = run_dir
    else:
        raise ValueError(f"run_dir: must be a path (a string), got {type(run_dir).__name__} {run_dir!r}; quote it "
                         "(-p run_dir 'outputs/my run')")
    if not text.strip():
        raise ValueError(f"run_dir: must be a non-empty path; an empty one would resolve to the project root {root()}; "
                         "name a folder such as outputs/my_run")
    check_name_lengths(root() / Path(text).expanduser(), "run_dir")
    run = resolve(text)
    if run.exists() and not run.is_dir():
        raise ValueError(f"run_dir: {run} is a file; give a folder (it is created if missing)")
    check_not_sample(run)
    here = root().resolve()
    if run.resolve() == here or run.resolve() in here.parents:
        raise ValueError(f"run_dir: {text!r} resolves to {run.resolve()}, the project root or a folder above it; name a "
                         "folder of its own such as outputs/my_run")
    return run


def sample_copy(name: str) -> str:
    """Where a copy of the sample run ``name`` is worked on (a path from the project root)."""
    return f"outputs/{name}_sample"


def in_samples(path) -> bool:
    """Whether ``path`` lies in a sample run that ships with the suite (``SAMPLES``, read-only)."""
    base, samples = resolve(path).resolve(), (root() / SAMPLES).resolve()
    return base.is_relative_to(samples) and base != samples


def reading_folder(source) -> str:
    """The run folder of a study read across the runs in ``source`` (the validation): ``source`` itself, or, for a
    shipped sample (read-only), the folder its copy is worked on in (``sample_copy``)."""
    if in_samples(source):
        return sample_copy(resolve(source).resolve().relative_to((root() / SAMPLES).resolve()).parts[0])
    return str(source)


def check_not_sample(run: Path) -> None:
    """A ValueError naming ``run_dir`` when ``run`` lies in a sample run that ships with the suite (``SAMPLES``):
    nothing is generated, scored, merged, analysed or reported into one, so it stays what ``scripts/make_sample.sh``
    made (that script makes each sample in a folder of its own and moves it in place)."""
    samples = (root() / SAMPLES).resolve()
    if not run.resolve().is_relative_to(samples):
        return
    parts = run.resolve().relative_to(samples).parts
    name = parts[0] if parts else "<study>"
    raise ValueError(f"run_dir: {run} is a sample run that ships with the suite ({SAMPLES}/ is read-only, so it stays "
                     f"what scripts/make_sample.sh made); work on a copy: `cp -r {SAMPLES}/{name} "
                     f"{sample_copy(name)}`, then run_dir {sample_copy(name)}")


def check_name_lengths(path: Path, what: str) -> Path:
    """``path`` once each of its names fits the file system (``NAME_MAX`` where the path starts to be missing, else
    255 bytes); else a ValueError naming ``what`` and the name too long."""
    try:
        limit = os.pathconf(next(p for p in path.parents if p.is_dir()), "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError, StopIteration):
        limit = 255
    for part in path.parts:
        if len(os.fsencode(part)) > limit:
            raise ValueError(f"{what}: the name {part[:40]!r}… is {len(os.fsencode(part))} bytes long; this file "
                             f"system allows {limit} per folder or file name: choose a shorter one")
    return path


def check_model_folder(model: str, base: Path | None = None) -> None:
    """A model given as a path (it starts with '/', '.' or '~', has more than one '/', or its first part is a folder)
    must be a folder in Hugging Face format: else "no such folder" naming ``model``, before the hub is asked. A relative
    path is taken from ``base`` (default: the working directory, as transformers takes it)."""
    local = Path(model).expanduser()
    local = local if local.is_absolute() or base is None else Path(base) / local
    parts = Path(model).parts
    if not (model.startswith(("/", ".", "~")) or model.count("/") > 1 or "\\" in model or local.exists()
            or (len(parts) > 1 and local.parents[len(parts) - 2].is_dir())):
        return  # an embedded model's name or a hub id (owner/name)
    if not local.exists():
        raise ValueError(f"model: no such folder {local.absolute()}; a model given as a path must be a local folder in "
                         "Hugging Face format (config.json, weights, tokenizer), a hub id is owner/name")
    if not local.is_dir():
        raise ValueError(f"model: {local.absolute()} is a file, not a model folder; give the folder holding "
                         "config.json")
    if not (local / "config.json").is_file():
        raise ValueError(f"model: {local.absolute()} holds no config.json: it is not a model folder in Hugging Face "
                         "format (save one with model.save_pretrained(folder) and tokenizer.save_pretrained(folder))")


def check_plain_name(name, what: str) -> str:
    """``name`` if it can be a file name as it is: a non-empty string without a path separator, not ``.`` or ``..``
    (so it cannot point outside the folder it is written into); else a ValueError naming ``what``."""
    if (not isinstance(name, str) or not name.strip() or name in (".", "..") or "/" in name or "\\" in name
            or "\0" in name or Path(name).is_absolute()):
        raise ValueError(f"{what}: must be a plain file name (no '/', '\\', '..' or absolute path), got {name!r}")
    return name


def check_inside(run_dir, path: str | Path, what: str) -> Path:
    """``path`` if writing it stays inside ``run_dir``: it lies under the run directory and no folder between them is
    a symbolic link (a link as the file itself is fine: atomic writes replace the link, never write through it)."""
    run = resolve(run_dir).absolute()
    p = Path(path).absolute()
    try:
        rel = p.parent.relative_to(run)
    except ValueError:
        raise ValueError(f"{what}: {p} is outside the run directory {run}") from None
    folder = run
    for part in rel.parts:
        folder = folder / part
        if part == ".." or folder.is_symlink():
            raise ValueError(f"{what}: {folder} is a symbolic link (or '..') inside the run directory {run}; nothing is "
                             "written through a link: remove it")
    return p
