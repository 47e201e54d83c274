"""R as a reference implementation: run an R script on data frames in a separate ``Rscript`` process.

Used for lme4/lmerTest fits (the mixed-effects reference the statistics are checked against) where R is installed;
every caller must have a pure-Python path for machines without it. Data travel as CSV both ways, so no R package
beyond the ones a script loads itself is needed, and nothing is linked into this Python process.

Row names are not kept: write them as a column. A script reads its inputs with ``nb_in("name")`` and writes each result with ``nb_out(df, "name")``;
``nb_per_unit(d, fit, part)`` fits ``fit`` to each ``unit`` of ``d`` and writes the ``info`` and ``part`` tables of all
units (with a ``unit`` column). These helpers are defined before the script runs. The R seed is fixed (``set.seed``) so parametric-bootstrap results are reproducible.
"""
from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import pandas as pd

PRELUDE = r"""
nb_in <- function(name) utils::read.csv(file.path(Sys.getenv("NB_R_IN"), paste0(name, ".csv")),
                                        stringsAsFactors = FALSE)
nb_out <- function(x, name) utils::write.csv(as.data.frame(x), file.path(Sys.getenv("NB_R_OUT"),
                                             paste0(name, ".csv")), row.names = FALSE)
set.seed(as.integer(Sys.getenv("NB_R_SEED", "20240101")))
nb_per_unit <- function(d, fit, part) {
  infos <- list(); parts <- list()
  for (u in unique(d$unit)) {
    r <- fit(d[d$unit == u, ])
    infos[[u]] <- cbind(unit = u, r$info)
    if (!is.null(r[[part]])) parts[[u]] <- cbind(unit = u, r[[part]])
  }
  nb_out(do.call(rbind, infos), "info")
  nb_out(if (length(parts)) do.call(rbind, parts) else data.frame(unit = character(0)), part)
}
"""


class RError(RuntimeError):
    """An R script failed; the message carries the tail of R's error output."""


def rscript() -> str | None:
    """Path of ``Rscript`` (``NB_RSCRIPT`` overrides; ``NB_RSCRIPT=none`` hides R, e.g. to test the Python path)."""
    env = os.environ.get("NB_RSCRIPT")
    if env:
        return None if env.lower() == "none" else env
    return shutil.which("Rscript")


@functools.lru_cache(maxsize=None)
def _has_packages(exe: str, packages: tuple[str, ...]) -> bool:
    code = "q(status = if (all(sapply(c(%s), requireNamespace, quietly = TRUE))) 0 else 1)" % ", ".join(
        f'"{p}"' for p in packages)
    try:
        return subprocess.run([exe, "--vanilla", "-e", code], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def r_available(*packages: str) -> bool:
    """True when Rscript runs and every named R package loads (e.g. ``r_available("lme4", "lmerTest")``)."""
    exe = rscript()
    return bool(exe) and _has_packages(exe, tuple(sorted(packages)))


@functools.lru_cache(maxsize=None)
def _versions(exe: str, packages: tuple[str, ...]) -> dict:
    code = ('cat("R", paste(R.version$major, R.version$minor, sep = "."), "\\n"); for (p in c(%s)) '
            'if (requireNamespace(p, quietly = TRUE)) cat(p, as.character(utils::packageVersion(p)), "\\n")'
            % ", ".join(f'"{p}"' for p in packages))
    out = subprocess.run([exe, "--vanilla", "-e", code], capture_output=True, text=True, timeout=120).stdout
    return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)


def r_versions(*packages: str) -> dict:
    """``{"R": "4.2.2", "lme4": "1.1.31", …}`` for the metadata of results computed in R; empty without R."""
    exe = rscript()
    return dict(_versions(exe, tuple(packages))) if exe else {}


@functools.lru_cache(maxsize=1)
def fixed_layout() -> tuple[str, ...]:
    """The command prefix that runs R with address-space randomisation off (``setarch <machine> -R``), where this
    host allows it; ``()`` elsewhere.

    R's numerical libraries vectorise sums in ways that depend on where an array starts in memory, so the same fit on
    the same data can differ in its last digits from one process to the next (lme4's Satterthwaite degrees of freedom
    around the fifth significant digit). With a fixed memory layout, one host gives the same digits every run."""
    exe = shutil.which("setarch")
    if not exe:
        return ()
    prefix = (exe, platform.machine(), "-R")
    try:
        ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return prefix if ok else ()


def run_r(script: str, inputs: dict[str, pd.DataFrame] | None = None, *, seed: int = 20240101,
          timeout: float = 1800) -> dict[str, pd.DataFrame]:
    """Run ``script`` in a fresh ``Rscript --vanilla``; returns every table it wrote with ``nb_out``, by name."""
    exe = rscript()
    if not exe:
        raise RError("Rscript not found: install R (e.g. `apt-get install r-base-core r-cran-lme4 r-cran-lmertest`) "
                     "or use the pure-Python path")
    with tempfile.TemporaryDirectory(prefix="nbutils-r-") as tmp:
        tmp = Path(tmp)
        (tmp / "in").mkdir()
        (tmp / "out").mkdir()
        for name, df in (inputs or {}).items():
            df.to_csv(tmp / "in" / f"{name}.csv", index=False)
        (tmp / "script.R").write_text(PRELUDE + script)
        env = {**os.environ, "NB_R_IN": str(tmp / "in"), "NB_R_OUT": str(tmp / "out"), "NB_R_SEED": str(int(seed))}
        try:
            proc = subprocess.run([*fixed_layout(), exe, "--vanilla", str(tmp / "script.R")], capture_output=True,
                                  text=True, env=env, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise RError(f"R script ran past {timeout:.0f} s") from e
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
            raise RError(f"R script failed (exit {proc.returncode}):\n{tail}")
        return {p.stem: pd.read_csv(p) for p in sorted((tmp / "out").glob("*.csv"))}
