"""The project root rule, the files packed into the wheel, and an installed (non-editable) copy running the demo sweep
from a folder outside any checkout."""
from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from nbutils import paths

ROOT = paths.repo_root()
BUNDLED_PACKAGES = {f"nbutils._bundled.{folder}" for folder in paths.SHIPPED}


@pytest.fixture()
def no_root_env(monkeypatch):
    monkeypatch.delenv(paths.ROOT_ENV, raising=False)


def make_checkout(folder: Path) -> Path:
    (folder / "notebooks").mkdir(parents=True)
    (folder / "pyproject.toml").write_text("[project]\nname = 'mine'\n")
    return folder


# ---------------------------------------------------------------- the root rule (fast)

def test_pyproject_lists_every_package():
    """The wheel's package list is spelled out (the bundled folders need it): every folder of .py files under
    nbutils/ is in it, with or without an __init__.py."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "nbutils").rglob("*.py")
             if not {"__pycache__", ".ipynb_checkpoints"} & set(p.parts)}
    assert not found - listed, f"add {sorted(found - listed)} to [tool.setuptools] packages in pyproject.toml"
    assert not listed - BUNDLED_PACKAGES - found, f"pyproject.toml lists missing packages {sorted(listed - found)}"
    assert BUNDLED_PACKAGES <= listed


def test_root_is_the_environment_variable_first(tmp_path, monkeypatch):
    monkeypatch.chdir(make_checkout(tmp_path / "checkout"))
    monkeypatch.setenv(paths.ROOT_ENV, str(tmp_path))
    assert paths.root() == tmp_path
    assert paths.resolve("outputs/demo") == tmp_path / "outputs" / "demo"
    monkeypatch.setenv(paths.ROOT_ENV, str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=paths.ROOT_ENV):
        paths.root()


def test_root_is_the_checkout_around_the_working_directory(tmp_path, monkeypatch, no_root_env):
    checkout = make_checkout(tmp_path / "checkout")
    (checkout / "sub" / "deeper").mkdir(parents=True)
    monkeypatch.chdir(checkout / "sub" / "deeper")
    assert paths.root() == checkout
    assert paths.resolve("outputs/demo") == checkout / "outputs" / "demo"


def test_outside_a_checkout_the_root_is_the_installed_checkout_else_the_working_directory(tmp_path, monkeypatch,
                                                                                          no_root_env):
    (tmp_path / "pyproject.toml").write_text("")  # a pyproject.toml without notebooks/ is not a checkout
    monkeypatch.chdir(tmp_path)
    assert paths.root() == ROOT  # this test session runs an editable install
    monkeypatch.setattr(paths, "installed_checkout", lambda: None)
    assert paths.root() == tmp_path
    assert paths.resolve("outputs/demo") == tmp_path / "outputs" / "demo"
    assert paths.resolve(tmp_path / "x") == tmp_path / "x"


def test_notebooks_and_params_come_from_the_root_first_then_the_shipped_copy(tmp_path, monkeypatch, no_root_env):
    checkout = make_checkout(tmp_path / "checkout")
    monkeypatch.chdir(checkout)
    assert paths.resolve("params/demo.yaml") == ROOT / "params" / "demo.yaml"
    assert paths.resolve("notebooks/score.ipynb") == ROOT / "notebooks" / "score.ipynb"
    assert paths.resolve("params/missing.yaml") == checkout / "params" / "missing.yaml"  # errors name the root
    assert paths.resolve("outputs/demo") == checkout / "outputs" / "demo"  # only shipped folders fall back
    (checkout / "params").mkdir()
    (checkout / "params" / "demo.yaml").write_text("study: monotonicity\n")
    assert paths.resolve("params/demo.yaml") == checkout / "params" / "demo.yaml"  # the user's own copy wins
    bundled = tmp_path / "bundled"
    (bundled / "notebooks").mkdir(parents=True)
    (bundled / "notebooks" / "score.ipynb").write_text("{}")
    monkeypatch.setattr(paths, "installed_checkout", lambda: None)  # an installed copy: the packed files
    monkeypatch.setattr(paths, "BUNDLED", bundled)
    assert paths.resolve("notebooks/score.ipynb") == bundled / "notebooks" / "score.ipynb"
    assert paths.resolve("notebooks/other.ipynb") == checkout / "notebooks" / "other.ipynb"


def test_repo_root_refuses_an_installed_copy(monkeypatch):
    monkeypatch.setattr(paths, "installed_checkout", lambda: None)
    with pytest.raises(RuntimeError, match="pip install -e"):
        paths.repo_root()


# ---------------------------------------------------------------- an installed copy, end to end (long tier)

PROBE = """import json, sys
import nbutils
from nbutils import paths
json.dump({"executable": sys.executable, "nbutils": nbutils.__file__, "root": str(paths.root()),
           "finders": [repr(f) for f in sys.meta_path]}, open(out, "w"))"""


def probe_notebook(path: Path) -> Path:
    """A notebook that records which python and which nbutils its kernel runs."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell('out = "probe.json"')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(PROBE)]
    nbformat.write(nb, path)
    return path


def run(cmd, cwd, env, timeout=600) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.notebooks
def test_an_installed_copy_runs_the_demo_sweep_from_any_folder(tmp_path, package_source):
    """``pip install .`` (not -e) into a fresh venv, then the demo sweep from a folder outside the repository.

    Nothing is downloaded: the fresh venv sees the dependencies of this one through a .pth file (whose folder's own
    .pth files are not processed, so this checkout's editable install stays out of it), and the embedded model's
    dequantized copy comes from the usual cache (NBUTILS_CACHE).
    """
    t0 = time.perf_counter()
    src = package_source
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv], tmp_path, os.environ)
    python = venv / "bin" / "python"
    purelib = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp_path,
                       os.environ).stdout.strip())
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (purelib / "_nbutils_test_deps.pth").write_text("\n".join(deps) + "\n")

    work = tmp_path / "work"  # the user's folder: no pyproject.toml, no notebooks/, no params/
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", paths.ROOT_ENV, "JUPYTER_PATH")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", VIRTUAL_ENV=str(venv),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               JUPYTER_DATA_DIR=str(tmp_path / "jupyter"))  # no user kernelspec: python3 is this interpreter's own
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--ignore-installed", src], work, env)
    t_install = time.perf_counter() - t0

    record = next(purelib.glob("llm_bias_probes-*.dist-info")) / "RECORD"
    files = [line.split(",")[0] for line in record.read_text().splitlines()]
    assert "nbutils/_bundled/notebooks/score.ipynb" in files and "nbutils/_bundled/params/demo.yaml" in files
    shipped = ("nbutils/", "llm_bias_probes-", "../../../bin/nbutils")  # the package, its metadata, its command
    assert [f for f in files if not f.startswith(shipped)] == []
    assert not [f for f in files if f.startswith(("nbutils/_bundled/outputs", "nbutils/tests"))
                or ".ipynb_checkpoints" in f]

    run([python, "-c", f"out = {str(work / 'where.json')!r}\n{PROBE}"], work, env)  # the process running the sweep
    where = json.loads((work / "where.json").read_text())
    assert Path(where["nbutils"]).is_relative_to(venv), where["nbutils"]
    assert where["root"] == str(work)
    assert not [f for f in where["finders"] if "editable" in f.lower()], "the checkout's editable finder is active"

    run([venv / "bin" / "nbutils", "run", probe_notebook(work / "probe.ipynb"), work / "probe.out.ipynb",
         "-p", "out", work / "kernel.json"], work, env)
    kernel = json.loads((work / "kernel.json").read_text())
    assert Path(kernel["executable"]).is_relative_to(venv), f"the kernel runs {kernel['executable']}"
    assert Path(kernel["nbutils"]).is_relative_to(venv), f"the kernel imports {kernel['nbutils']}"
    assert kernel["root"] == str(work)

    t1 = time.perf_counter()
    done = run([venv / "bin" / "nbutils", "sweep", "params/demo.yaml", "--limit", "1", "--n-boot", "20"], work, env)
    t_sweep = time.perf_counter() - t1
    run_dir = work / "outputs" / "demo"
    assert f"run_dir: {run_dir}" in done.stdout, done.stdout
    assert (run_dir / "summary.json").is_file() and any((run_dir / "tables").iterdir())
    assert (run_dir / "scores" / "smollm2-135m-instruct.limit-1.parquet").is_file()
    assert (run_dir / "notebooks" / "monotonicity_03_analyze.ipynb").is_file() and "analyzed: True" in done.stdout
    assert (run_dir / "report.html").stat().st_size > 50_000 and f"report: {run_dir / 'report.html'}" in done.stdout
    title = (run_dir / "results.md").read_text().splitlines()[0].strip("*")
    assert done.stdout.index(f"\n{title}\n") < done.stdout.index("\nmodel  ") < done.stdout.index(
        f"report: {run_dir / 'report.html'}") < done.stdout.index("analyzed: True"), "the findings first, then the rest"
    print(f"install {t_install:.1f} s, sweep {t_sweep:.1f} s, total {time.perf_counter() - t0:.1f} s")
