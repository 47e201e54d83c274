"""The three bands and their arrows: base (paths, artifacts, stats) ← engine ← studies ← sweep/CLI, never upward."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from nbutils import studies
from nbutils.paths import repo_root

PKG = repo_root() / "nbutils"
BASE = {"nbutils.paths", "nbutils.artifacts", "nbutils.stats", "nbutils"}
TOP = {"nbutils.sweep", "nbutils.__main__"}


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
    if mod.startswith("nbutils.studies."):
        return "study:" + mod.split(".")[2]
    if mod == "nbutils.studies":
        return "registry"
    if mod in TOP:
        return "top"
    return "base"


MODULES = sorted(PKG.rglob("*.py"))


def test_every_module_is_seen():
    names = {module_name(p) for p in MODULES}
    assert {"nbutils.engine.runs", "nbutils.engine.choices", "nbutils.studies.monotonicity.analysis",
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
            assert other in ("base", "engine") or target == "nbutils.engine.spec", f"registry imports {target}"
        elif me.startswith("study:"):
            assert other in ("base", "engine", "registry", me), f"{module_name(path)} imports {target} ({other})"


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
