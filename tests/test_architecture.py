"""The bands and their arrows, never upward: base (paths, artifacts, stats, spec, runstore, rbridge…) ← engine ←
shared study code (``nbutils.studies.common``) ← studies and run analyses (``nbutils.analyses``) ← sweep/cluster/CLI/report.

Studies never import each other, and no study or run analysis imports code by a string (``importlib``): every arrow
between them is a static import this test sees. The registry alone resolves strings, and only its own records'."""
from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from nbutils import studies
from nbutils.paths import repo_root

PKG = repo_root() / "nbutils"
# base: every module that is not engine, study, run analysis, registry or top (this set names them for the reader)
BASE = {"nbutils", "nbutils.paths", "nbutils.artifacts", "nbutils.stats", "nbutils.spec", "nbutils.runstore",
        "nbutils.rbridge"}
TOP = {"nbutils.sweep", "nbutils.cluster", "nbutils.__main__", "nbutils.report", "nbutils.samples"}
COMMON = "nbutils.studies.common"


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every nbutils module a file imports (absolute or relative, at any depth in the file)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("nbutils")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("nbutils"):
                out.add(mod)
                out |= {f"{mod}.{a.name}" for a in node.names}
    return out


def band(mod: str) -> str:
    if mod.startswith("nbutils.engine"):
        return "engine"
    if mod == COMMON or mod.startswith(COMMON + "."):
        return "common"
    if mod.startswith("nbutils.studies."):
        return "study:" + mod.split(".")[2]
    if mod == "nbutils.studies":
        return "registry"
    if mod == "nbutils.analyses":
        return "analyses"
    if mod.startswith("nbutils.analyses."):
        return "analysis:" + mod.split(".")[2]
    if mod in TOP:
        return "top"
    return "base"


MODULES = sorted(PKG.rglob("*.py"))


def test_every_module_is_seen():
    names = {module_name(p) for p in MODULES}
    assert BASE <= names and all(band(m) == "base" for m in BASE)
    assert {"nbutils.studies.common.quantifiers", "nbutils.studies.common.rules", "nbutils.studies.common.quantifier_stats",
            "nbutils.studies.common.prompt_files", "nbutils.analyses.cues.analysis"} <= names
    assert {"nbutils.engine.run", "nbutils.runstore", "nbutils.engine.choices", "nbutils.studies.monotonicity.analysis",
            "nbutils.studies.negation.dataset", "nbutils.sweep"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_no_module_imports_upward(path):
    me = band(module_name(path))
    for target in imports_of(path):
        # keep only real modules/packages (a "from x import name" also yields x.name, which may be a function)
        if not any(module_name(p) == target for p in MODULES):
            continue
        other = band(target)
        if me == "base":
            assert other == "base", f"{module_name(path)} (base) imports {target} ({other})"
        elif me == "engine":
            assert other in ("base", "engine"), f"{module_name(path)} (engine) imports {target} ({other})"
        elif me == "registry":
            assert other == "base", f"registry imports {target} ({other})"
        elif me == "common":
            assert other in ("base", "common"), f"{module_name(path)} (shared study code) imports {target} ({other})"
        elif me.startswith("study:"):
            assert other in ("base", "engine", "registry", "common", me), f"{module_name(path)} imports {target} ({other})"
        elif me == "analyses":
            assert other == "base", f"{module_name(path)} imports {target} ({other})"
        elif me.startswith("analysis:"):
            assert other in ("base", "registry", "common", me), f"{module_name(path)} imports {target} ({other})"


def _string_imports(tree: ast.AST) -> list[ast.Call]:
    """Calls that import a module named by a string: ``importlib.import_module(…)``, ``import_module(…)`` (imported
    from importlib, under any name) and ``__import__(…)``."""
    names = {"__import__"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "importlib":
            names |= {a.asname or a.name for a in node.names if a.name in ("import_module", "__import__")}
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Attribute) and node.func.attr in ("import_module", "__import__"))
        or (isinstance(node.func, ast.Name) and node.func.id in names))]


REGISTRY_FILE = PKG / "studies" / "__init__.py"
STRING_FREE = sorted(p for p in MODULES if p.is_relative_to(PKG / "studies") or p.is_relative_to(PKG / "analyses"))


@pytest.mark.parametrize("path", [p for p in STRING_FREE if p != REGISTRY_FILE], ids=lambda p: module_name(p))
def test_no_study_or_run_analysis_imports_by_a_string(path):
    calls = _string_imports(ast.parse(path.read_text()))
    assert not calls, f"{module_name(path)} line {calls[0].lineno if calls else 0}: imports a module named by a " \
                      "string; import it statically (shared code lives in nbutils.studies.common)"


def test_the_registry_resolves_only_its_own_records_strings():
    tree = ast.parse(REGISTRY_FILE.read_text())
    study = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Study")
    spec = next(n for n in study.body if isinstance(n, ast.FunctionDef) and n.name == "spec")
    inside = {id(c) for c in _string_imports(spec)}
    outside = [c.lineno for c in _string_imports(tree) if id(c) not in inside]
    assert not outside, f"nbutils/studies/__init__.py imports by a string outside Study.spec (line {outside})"
    for s in studies.REGISTRY.values():
        if s.choice_items is not None:
            module, _, function = s.choice_items.partition(":")
            assert module.startswith(f"nbutils.studies.{s.name}.") and function.isidentifier(), \
                f"{s.name}: choice_items {s.choice_items!r} must name a function in nbutils/studies/{s.name}/"


def test_every_study_folder_is_a_registered_study_and_every_run_analysis_is_listed():
    folders = {p.parent.name for p in (PKG / "studies").glob("*/__init__.py")}
    assert folders - {"common"} == set(studies.REGISTRY), "a folder under nbutils/studies/ is a registered study"
    analyses = {p.parent.name for p in (PKG / "analyses").glob("*/__init__.py")}
    assert analyses == set(studies.RUN_ANALYSES), "a folder under nbutils/analyses/ is listed in RUN_ANALYSES"
    for name, nb in studies.RUN_ANALYSES.items():
        assert (repo_root() / nb).exists(), f"run analysis {name}: notebook {nb}"


ANALYSES = [f"nbutils.studies.{s}.analysis" for s in studies.REGISTRY] + [
    f"nbutils.analyses.{a}.analysis" for a in studies.RUN_ANALYSES]


@pytest.mark.parametrize("module", ANALYSES)
def test_every_analysis_has_one_entry_point_shape(module):
    """``analyze_run(run_dir, *, seed=0, include_limited=False, **options)`` returning an ``Analysis``."""
    from nbutils.artifacts import Analysis

    sig = inspect.signature(importlib.import_module(module).analyze_run, eval_str=True)
    params = list(sig.parameters.values())
    assert params[0].name == "run_dir" and params[0].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[1:]), f"{module}: options are keyword-only"
    assert sig.parameters["seed"].default == 0 and sig.parameters["include_limited"].default is False
    ret = sig.return_annotation
    assert isinstance(ret, type) and issubclass(ret, Analysis), f"{module}: analyze_run returns {ret!r}"


def test_the_sweep_names_no_study():
    text = (PKG / "sweep.py").read_text()
    for name in studies.REGISTRY:
        assert f'"{name}"' not in text, name


def test_every_registered_study_has_its_role_files_and_notebooks():
    for s in studies.REGISTRY.values():
        folder = PKG / "studies" / s.name
        for role in ("__init__.py", "dataset.py", "stats.py", "plots.py", "analysis.py"):
            assert (folder / role).exists(), f"{s.name}: {role}"
        for step, nb in s.notebooks.items():
            assert (repo_root() / nb).exists(), f"{s.name}: {step} notebook {nb}"
        assert s.spec.dataset_file == s.dataset_file


def test_only_paths_spells_run_directory_file_names():
    for p in MODULES + [f for f in (repo_root() / "benchmarks").glob("*.py")]:
        if p.name == "paths.py":
            continue
        text = p.read_text()
        for literal in ('"scores"', '"summary.json"', '"tables"', '"figures"', '".partial"', "'scores'"):
            assert literal not in text, f"{p.name} spells {literal}; ask nbutils.paths"
