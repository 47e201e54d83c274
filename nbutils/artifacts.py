"""Safe, reproducible outputs: atomic writes, checksums, metadata sidecars, refusal to overwrite."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import tempfile
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from . import paths, runlock
from .spreadsheet import FORMULA_START, GUARD, read_table, spreadsheet_safe  # noqa: F401 (a run's CSV tables)

TRACKED_PACKAGES = ("llm-bias-probes", "torch", "transformers", "accelerate", "gguf", "bitsandbytes", "numpy",
                    "pandas", "pyarrow", "scipy", "statsmodels", "seaborn", "papermill")


class OverwriteError(FileExistsError):
    """A different result already exists where this one would be written."""


SEED_MAX = 2**63 - 1  # the largest seed a dataset can record: seeds are stored in int64 columns


class DuplicateKeyError(ValueError):
    """A YAML mapping gives the same key twice (PyYAML alone would keep the last value without a word)."""


@functools.lru_cache(maxsize=1)
def _strict_yaml_loader():
    import yaml

    class StrictLoader(yaml.SafeLoader):
        """SafeLoader that refuses a key given twice in one mapping."""

    def mapping(loader, node, deep=False):
        lines: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key, line = loader.construct_object(key_node, deep=deep), key_node.start_mark.line + 1
            try:
                seen = key in lines
            except TypeError:  # an unhashable key: the SafeLoader's own error names it
                continue
            if seen:
                where = f"lines {lines[key]} and {line}" if lines[key] != line else f"both on line {line}"
                raise DuplicateKeyError(f"key {key!r} is given twice ({where}); remove one: YAML would silently "
                                        "keep the last")
            lines[key] = line
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return StrictLoader


def read_yaml(text: str, source: str):
    """Parse YAML text strictly; ``source`` names it in errors (a file path, or an option).

    A key given twice in one mapping is a ValueError naming the key and both lines. A syntax error is a ValueError
    that keeps YAML's problem, line and column (with a word on tabs, which YAML does not allow for indentation).
    """
    import yaml

    try:
        return yaml.load(text, Loader=_strict_yaml_loader())  # noqa: S506 - a SafeLoader subclass
    except DuplicateKeyError as err:
        raise DuplicateKeyError(f"{source}: {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        rows = text.splitlines()
        line = rows[mark.line] if mark is not None and mark.line < len(rows) else ""
        tab = "\t" in line or "\\t" in problem  # the offending line holds a tab, or YAML names one
        hint = "; YAML allows no tabs for indentation: use spaces" if tab else ""
        raise ValueError(f"{source} is not valid YAML ({problem}{where}{hint})") from None


def load_yaml(path: str | Path, allowed: set[str] | None = None, what: str = "parameter file") -> dict:
    """Read a YAML mapping strictly (a key given twice is an error naming it and its lines); unknown keys are an error
    naming the file and the allowed keys."""
    p = paths.resolve(path)
    if not p.exists():
        raise ValueError(f"{what}: {p} does not exist")
    if not p.is_file():
        raise ValueError(f"{what}: {p} is not a file")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        line = err.object[:err.start].count(b"\n") + 1
        raise ValueError(f"{what}: {p} is not UTF-8 text (byte 0x{err.object[err.start]:02x} on line {line}); "
                         "save it as UTF-8") from None
    data = read_yaml(text, f"{what}: {p}") or {}
    if not isinstance(data, dict):
        raise ValueError(f"{what}: {p} must hold a mapping of parameter names to values")
    if allowed is not None and set(data) - allowed:
        raise ValueError(f"{what}: {p} has unknown keys {sorted(set(data) - allowed)}; allowed: {sorted(allowed)}")
    return data


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class DiskFullError(OSError):
    """The disk filled up while a file was written (the file it would have replaced is untouched)."""


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` on a temp file beside ``path``, fsync, then rename over ``path``. The rename replaces a
    symbolic link at ``path`` instead of writing through it. A full disk is a ``DiskFullError`` naming the file."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_beside(path)
    except OSError as err:
        raise_if_full(err, path)
        raise
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        raise_if_full(err, path)
        raise
    finally:
        tmp.unlink(missing_ok=True)
    return path


def temp_beside(path: Path, suffix: str = ".tmp") -> Path:
    """A new empty file beside ``path`` (same folder, so renaming it over ``path`` is atomic), with the mode open()
    would give it (mkstemp makes 0600)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())
    return Path(tmp)


def raise_if_full(err: OSError, path: Path) -> None:
    """A full disk (ENOSPC, or a quota: EDQUOT) said with the file and the space left where it was written."""
    import errno
    import shutil

    full = err.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
    if not full and "No space left on device" not in str(err):  # pyarrow says it in its message, errno unset
        return
    try:
        free = f"{shutil.disk_usage(path.parent).free / 2**20:.1f} MiB free there now"
    except OSError:
        free = "free space unknown"
    raise DiskFullError(err.errno, f"no space left on the device while writing {path} ({free}); the file it would "
                        "replace is unchanged: free some space, or choose a run_dir on another disk, and run "
                        "again") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_parquet(df: pd.DataFrame, path: str | Path) -> Path:
    """Write a DataFrame as Parquet, atomically."""
    return atomic_write(path, lambda p: df.to_parquet(p, index=False))


def write_json(obj: Any, path: str | Path) -> Path:
    """Write JSON (sorted keys, indented), atomically."""
    text = json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n"
    return atomic_write(path, lambda p: p.write_text(text))


def write_text(text: str, path: str | Path) -> Path:
    """Write a text file (UTF-8), atomically."""
    return atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def write_table(df: pd.DataFrame, stem: str | Path, index: bool = False, latex: bool | dict = False,
                float_format: str = "%.3f") -> list[Path]:
    """A table as ``stem.csv`` (and ``stem.tex`` for papers; ``latex`` a dict: the options of ``results.latex_table``, such
    as the columns a paper shows), each written atomically; the CSV ``spreadsheet_safe`` (``read_table`` reads it
    back as it was)."""
    stem = Path(stem)
    safe = spreadsheet_safe(df)
    paths = [atomic_write(stem.with_suffix(".csv"), lambda p: safe.to_csv(p, index=index))]
    if latex:  # escaped, booktabs, human labels, split to fit a page (nbutils.results)
        from .results import latex_table

        tex = latex_table(df, float_format=float_format, index=index, **(latex if isinstance(latex, dict) else {}))
        paths.append(atomic_write(stem.with_suffix(".tex"), lambda p: p.write_text(tex)))
    return paths


def read_json(path: str | Path) -> dict:
    """Read a JSON file; a truncated or damaged one is a ValueError that names it."""
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}): it was cut "
                         "short or edited; restore it or regenerate what wrote it") from None
    except IsADirectoryError:
        raise ValueError(f"{path} is a folder, not a JSON file: move or remove it, then regenerate what writes "
                         "it") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text (JSON): it was damaged or replaced; restore it or regenerate "
                         "what wrote it") from None


def read_summary(path: str | Path) -> dict:
    """A run's ``summary.json``, checked to be of this suite's ``schema_version`` (``records.check_version``: one made
    by an older version is a ``records.SummaryVersionError`` that says to run the analysis again), its records as
    ``records.Record`` s (``records.typed``)."""
    from .records import check_version, typed

    return typed(check_version(read_json(path), path), path)


def versions() -> dict[str, str | None]:
    """Versions of Python and the packages that shape the results."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in TRACKED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def now_utc() -> str:
    """Current time, ISO 8601 in UTC."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _describe_changes(old: dict, new: dict) -> str:
    """``key: old → new`` for each parameter that differs; a source file's sha256 said in words."""
    out = []
    for k in sorted(set(old) | set(new), key=str):
        if old.get(k) == new.get(k):
            continue
        if k.endswith("_sha256"):
            out.append(f"{k.removesuffix('_sha256')} changed since the dataset was made (its sha256 differs)")
        else:
            out.append(f"{k}: {old.get(k)!r} → {new.get(k)!r}")
    return "; ".join(out)


def write_dataset(df: pd.DataFrame, path: str | Path, meta: dict, overwrite: bool = False) -> dict:
    """Write a dataset and its ``.json`` sidecar; refuse to replace a different existing dataset.

    Re-running with identical parameters keeps the existing file, after checking it still matches the sha256 its
    sidecar recorded (a truncated or edited file is rewritten). When the content changes (``overwrite``, or a
    repair that gives other bytes), the scores made from the old dataset are moved to ``scores/.stale/<time>/``
    so that no analysis can join them to the new rows.
    """
    path = Path(path)
    with runlock.hold(path.parent, "writing its dataset"):
        return _write_dataset(df, path, meta, overwrite)


def _write_dataset(df: pd.DataFrame, path: Path, meta: dict, overwrite: bool) -> dict:
    sidecar = path.with_suffix(".json")
    paths.check_inside(path.parent, path, "run_dir")
    old = read_json(sidecar) if sidecar.exists() else {}
    if path.exists():
        same_params = old.get("parameters") == meta.get("parameters")
        intact = old.get("sha256") == sha256_file(path)
        if same_params and intact:
            return old
        if not same_params and not overwrite:
            raise OverwriteError(
                f"run_dir: {path} already holds a dataset made with other parameters "
                f"({_describe_changes(old.get('parameters') or {}, meta.get('parameters') or {})}); choose another "
                "run_dir or pass overwrite=True"
            )
        if same_params and not intact:
            print(f"{path.name}: does not match the sha256 in {sidecar.name} (truncated or edited); rewriting it")
    write_parquet(df, path)
    new_sha = sha256_file(path)
    if old.get("sha256") and old["sha256"] != new_sha:
        moved = set_aside_scores(paths.resolve(path).parent)
        if moved:
            print(f"{path.name}: changed; {len(moved)} score file(s) made from the old version moved to {moved[0].parent}")
    meta = {**meta, "rows": len(df), "sha256": new_sha, "created": now_utc(), "versions": versions()}
    write_json(meta, sidecar)
    return meta


def set_aside_scores(run_dir, only: list[Path] | None = None) -> list[Path]:
    """Move every score file and checkpoint of a run (or those of ``only`` that exist) into ``scores/.stale/<time>/``
    (nothing is deleted)."""
    from . import paths

    if only is None:
        files = [p for folder in (paths.scores_dir(run_dir), paths.partial_dir(run_dir))
                 for p in folder.glob("*") if p.is_file()]
    else:
        files = [Path(p) for p in only if Path(p).is_file()]
    if not files:
        return []
    dest = paths.stale_dir(run_dir, datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ"))
    blocked = next((p for p in (dest.parent, *dest.parent.parents) if p.exists() and not p.is_dir()), None)
    if blocked is not None:  # nothing is moved: the scores stay where they are
        raise ValueError(f"run_dir: {blocked} is a file, so score files cannot be set aside in "
                         f"{paths.stale_dir(run_dir, '')}; move or remove that file, then run again")
    dest.mkdir(parents=True, exist_ok=True)
    moved = []
    for f in files:
        target = dest / (f"partial-{f.name}" if f.parent == paths.partial_dir(run_dir) else f.name)
        os.replace(f, target)
        moved.append(target)
    return moved


def save_figure(fig, path_stem: str | Path) -> list[Path]:
    """Write a matplotlib figure as PNG and PDF beside each other (atomically); return both paths."""
    stem = Path(path_stem)
    return [atomic_write(stem.with_suffix(ext), lambda p, e=ext: fig.savefig(p, dpi=150, bbox_inches="tight",
                                                                            format=e[1:]))
            for ext in (".png", ".pdf")]


def json_clean(obj):
    """Nested data with numpy scalars made plain and NaN made None, so it is valid JSON (``records.clean``)."""
    from .records import clean

    return clean(obj)
