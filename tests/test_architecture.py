"""The bands of ``nbutils`` and the arrows allowed between them, read from one table (``BANDS``, ``ARROWS``); no import
circle anywhere in the package; no module longer than ``MAX_LINES``; each wing's face names what the rest may use.

Every import counts, at any depth of a file (a function's own ``from .x import y`` too), absolute or relative. From top
to bottom: the command line; the scoring call for a notebook cell (``probe``); the sweep wing's sweep; the report wing
and a run's items; the sample runs; the notebooks' tables; the sweep wing's cluster jobs, executors and papermill
runner; other tools' log imports; run analyses; studies; shared study code; the registry; the analysis wing; the engine
(its run loop on top, then the scorers, model loading, the scoring settings, the host's facts they are decided from,
the maths); then the floors every band above may stand on: the run store wing, the files floor (writes, labels, the
scoring settings without torch), the results wing, the statistics wing and the ground floor (paths, records, checks).

Studies never import each other, and no study or run analysis imports code by a string (``importlib``): every arrow
between them is a static import this test sees. The registry alone resolves strings, and only its own records'."""
from __future__ import annotations

import ast
import importlib
import inspect
import shutil
from fnmatch import fnmatchcase
from pathlib import Path

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from nbutils import studies
from nbutils.paths import repo_root

PKG = repo_root() / "nbutils"

# ---------------------------------------------------------------- the table: bands, top to bottom, and their arrows

# A module belongs to the band whose pattern (fnmatch on its dotted name) matches it most closely: the longest
# matching pattern wins, so ``nbutils.studies.common.*`` takes shared study code from ``nbutils.studies.*``.
BANDS: dict[str, tuple[str, ...]] = {
    "cli": ("nbutils.__main__",),
    # a notebook cell's scoring call: the score notebook's settings, loading and scorer, without a run directory
    "probe": ("nbutils.probe",),
    # the sweep wing, in four rooms: the sweep (and the wing's face), the cluster jobs, the executors, the papermill runner
    "sweep": ("nbutils.sweep", "nbutils.sweep._sweep"),
    "report": ("nbutils.report", "nbutils.report.*", "nbutils.items"),  # the report wing, and a run's items
    "samples": ("nbutils.samples",),
    "display": ("nbutils.display",),  # the notebooks' tables
    "cluster": ("nbutils.sweep._cluster",),
    "executors": ("nbutils.sweep._executors", "nbutils.sweep._scheduler"),
    "papermill": ("nbutils.sweep._papermill", "nbutils.sweep._parameters"),
    "log imports": ("nbutils.imports", "nbutils.imports.*"),  # other tools' logs written as a custom-study run
    "run analysis": ("nbutils.analyses.*",),
    "run analyses": ("nbutils.analyses",),
    "study": ("nbutils.studies.*",),
    "shared study code": ("nbutils.studies.common", "nbutils.studies.common.*"),
    "registry": ("nbutils.studies",),
    "analysis": ("nbutils.analysis", "nbutils.analysis.*"),  # the analysis wing: the skeleton and parameter records
    "engine run": ("nbutils.engine.run",),
    "engine scorers": ("nbutils.engine.scorer", "nbutils.engine.scorers", "nbutils.engine.choice_scorer"),
    "engine loading": ("nbutils.engine.models", "nbutils.engine.loading.*"),  # carries out the settings
    "engine settings": ("nbutils.engine.settings",),  # decides every scoring setting once
    # what the settings decide from: this host (device, bf16, memory), the embedded models, what bitsandbytes can do
    "engine host": ("nbutils.engine.loading.host", "nbutils.engine.loading.embedded",
                    "nbutils.engine.loading.quantization"),
    "engine maths": ("nbutils.engine.batching", "nbutils.engine.choices", "nbutils.engine.split", "nbutils.engine.sentences",
                     "nbutils.engine.calibration"),
    "engine": ("nbutils.engine", "nbutils.engine.loading"),  # the packages (the check that the score extra is there)
    "run store": ("nbutils.runstore", "nbutils.runstore.*"),  # the run store wing: datasets, score files, sidecars
    # the files floor: writes and tables, labels, an adapter's files, the scoring settings without torch, model files
    "files": ("nbutils.artifacts", "nbutils.labels", "nbutils.adapters", "nbutils.score_settings", "nbutils.model_files",
              "nbutils.colab"),
    "results": ("nbutils.results", "nbutils.results.*"),  # the results wing: words, readings, tables
    "stats": ("nbutils.stats", "nbutils.stats.*"),  # the statistics wing
    # the ground floor: small shared modules that import no other part of the package
    "ground": ("nbutils", "nbutils.paths", "nbutils.records", "nbutils.checks", "nbutils.spreadsheet", "nbutils.spec",
               "nbutils.runlock"),
}
FLOORS = {"run store", "files", "results", "stats", "ground"}  # what every band above the engine may stand on
# What each band may import besides its own band (a study or a run analysis: only its own folder). Every arrow points
# down the table; no band imports "engine run" (the run loop is called by the score notebook, never imported).
ARROWS: dict[str, set[str]] = {
    "cli": {"sweep", "report", "samples", "log imports", "registry"} | FLOORS,
    "probe": {"engine scorers", "engine loading", "engine settings", "engine", "files", "ground"},
    "sweep": {"report", "cluster", "executors", "papermill", "registry"} | FLOORS,
    "report": {"registry"} | FLOORS,
    "samples": {"registry", "files", "ground"},
    "display": {"results", "ground"},
    "cluster": {"executors", "papermill", "run store", "files", "ground"},
    "executors": {"papermill", "files", "ground"},
    "papermill": {"files", "stats", "ground"},
    "log imports": {"registry"} | FLOORS,
    "run analysis": {"shared study code", "registry", "analysis"} | FLOORS,
    "run analyses": {"files", "ground"},
    "study": {"shared study code", "registry", "analysis", "engine settings", "engine maths", "engine"} | FLOORS,
    "shared study code": FLOORS,
    "registry": {"run store", "ground"},
    "analysis": FLOORS,
    "engine run": {"engine scorers", "engine loading", "engine settings", "engine host", "engine maths", "engine",
                   "run store", "files", "ground"},
    "engine scorers": {"engine settings", "engine maths", "engine", "files", "ground"},
    "engine loading": {"engine settings", "engine host", "engine maths", "engine", "files", "ground"},
    "engine settings": {"engine host", "engine maths", "engine", "files", "ground"},
    "engine host": {"engine maths", "engine", "files", "ground"},
    "engine maths": {"engine", "files", "ground"},
    "engine": {"ground"},
    "run store": {"files", "stats", "ground"},
    "files": {"results", "ground"},
    "results": {"stats", "ground"},
    "stats": {"ground"},
    "ground": set(),
}
OWN_FOLDER_ONLY = {"study", "run analysis"}  # bands whose modules import their own folder, not a sibling's

# Circles that exist today, each with why and what removes it; the test fails on any other circle, and on a listed one
# that is gone (delete its line then).
KNOWN_CIRCLES: dict[frozenset[str], str] = {}  # a circle kept for now, with why (none)

MAX_LINES = 420
# Modules longer than MAX_LINES, each with why; the test fails on any other, and on a listed one that got shorter.
LONG_MODULES: dict[str, str] = {}  # a module kept longer for now, with why (none)


# A wing is a sub-package of nbutils (``nbutils.report``): its ``__init__`` names what the rest may use, and its
# internals are private (a module or a name starting with ``_``); a module at the root is a wing of its own. No module
# imports another wing's private modules or names; one kept for now is listed with why (the test fails on any other,
# and on a listed one that is gone):
KNOWN_PRIVATE_IMPORTS: dict[tuple[str, str], str] = {}  # one kept for now, with why (none)


# ---------------------------------------------------------------- reading the import graph

def module_name(path: Path, root: Path = PKG) -> str:
    """The dotted name of a file of the package at ``root`` (``nbutils/engine/run.py`` → ``nbutils.engine.run``)."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path, root: Path = PKG) -> set[str]:
    """Every module of the package a file imports (absolute or relative, at any depth in the file); ``from x import
    name`` also yields ``x.name``, which is a module or not (``import_graph`` keeps the modules)."""
    top = root.name
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name == top or a.name.startswith(top + ".")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod == top or mod.startswith(top + "."):
                out.add(mod)
                out |= {f"{mod}.{a.name}" for a in node.names}
    return out


def wing(mod: str) -> str:
    """The wing a module belongs to: its sub-package of nbutils (``nbutils.report._page`` → ``nbutils.report``), or the
    module itself at the root."""
    return ".".join(mod.split(".")[:2])


def private_imports(path: Path, root: Path = PKG) -> set[tuple[str, str]]:
    """(module, what it imports) for each private module or name of another wing that a file imports: a dotted part
    or an imported name starting with ``_`` (``__init__``, ``__main__``, ``__future__`` are no private names)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            targets = [f"{mod}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            if parts[0] != root.name:
                continue
            private = [i for i, p in enumerate(parts) if p.startswith("_") and not (p.startswith("__")
                                                                                     and p.endswith("__"))]
            if private and wing(".".join(parts[: private[0] + 1])) != wing(name):
                out.add((name, target))
    return out


def import_graph(root: Path = PKG) -> dict[str, set[str]]:
    """Module → the package's modules it imports (itself left out)."""
    files = sorted(root.rglob("*.py"))
    names = {module_name(p, root) for p in files}
    return {module_name(p, root): (imports_of(p, root) & names) - {module_name(p, root)} for p in files}


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The import circles: strongly connected components of more than one module (scipy's csgraph)."""
    names = sorted(set(graph).union(*graph.values()))
    index = {n: i for i, n in enumerate(names)}
    edges = [(index[a], index[b]) for a, targets in graph.items() for b in targets]
    rows, cols = (list(x) for x in zip(*edges)) if edges else ([], [])
    matrix = coo_matrix((np.ones(len(edges)), (rows, cols)), shape=(len(names), len(names)))
    _, labels = connected_components(matrix, directed=True, connection="strong")
    groups: dict[int, set[str]] = {}
    for n, label in zip(names, labels):
        groups.setdefault(label, set()).add(n)
    return sorted((frozenset(g) for g in groups.values() if len(g) > 1), key=sorted)


def circle_text(graph: dict[str, set[str]], circle: frozenset[str]) -> str:
    """The arrows inside one circle, for a message."""
    return ", ".join(f"{a} → {b}" for a in sorted(circle) for b in sorted(graph.get(a, ())) if b in circle)


def band(mod: str) -> str:
    """The band of a dotted module name (the longest matching pattern of ``BANDS``)."""
    hits = [(len(p), b) for b, patterns in BANDS.items() for p in patterns if fnmatchcase(mod, p)]
    if not hits:
        raise KeyError(f"{mod} is in no band of BANDS")
    return max(hits)[1]


def folder(mod: str) -> str:
    """A study's or a run analysis's folder (``nbutils.studies.negation.stats`` → ``negation``)."""
    return mod.split(".")[2]


def wrong_arrows(graph: dict[str, set[str]]) -> list[str]:
    """Every import the table does not allow, as ``a (band) imports b (band)``."""
    out = []
    for mod, targets in sorted(graph.items()):
        me = band(mod)
        for target in sorted(targets):
            other = band(target)
            if other == me:
                ok = me not in OWN_FOLDER_ONLY or folder(mod) == folder(target)
            else:
                ok = other in ARROWS[me]
            if not ok:
                out.append(f"{mod} ({me}) imports {target} ({other})")
    return out


GRAPH = import_graph()
MODULES = sorted(PKG.rglob("*.py"))


# ---------------------------------------------------------------- the table itself

def test_the_table_points_down_and_nothing_imports_the_run_loop():
    order = list(BANDS)
    assert set(ARROWS) == set(BANDS), "every band has its row of ARROWS"
    for b, targets in ARROWS.items():
        assert targets <= set(BANDS), f"{b}: unknown bands {sorted(targets - set(BANDS))}"
        up = [t for t in targets if order.index(t) <= order.index(b)]
        assert not up, f"{b} may import {up}, which are not below it in BANDS"
    assert not any("engine run" in t for t in ARROWS.values())
    assert not ARROWS["engine maths"] & {"engine run", "engine scorers", "engine loading", "engine settings",
                                         "engine host"}, "the engine's maths imports no policy, loading or run module"
    assert not ARROWS["engine settings"] & {"engine run", "engine scorers", "engine loading"}, \
        "the settings decide; they import no loader, scorer or run loop"


def test_every_module_is_seen_and_in_its_band():
    names = set(GRAPH)
    assert {"nbutils.studies.common.quantifiers", "nbutils.studies.common.rules", "nbutils.studies.common.quantifier_stats",
            "nbutils.studies.common.prompt_files", "nbutils.analyses.cues.analysis"} <= names
    assert {"nbutils.engine.run", "nbutils.runstore", "nbutils.engine.choices", "nbutils.studies.monotonicity.analysis",
            "nbutils.studies.negation.dataset", "nbutils.sweep", "nbutils.sweep._papermill"} <= names
    expected = {"nbutils.__main__": "cli", "nbutils.sweep": "sweep", "nbutils.sweep._cluster": "cluster",
                "nbutils.sweep._papermill": "papermill", "nbutils.report": "report", "nbutils.samples": "samples",
                "nbutils.studies.common.rules": "shared study code", "nbutils.studies.negation.stats": "study",
                "nbutils.studies": "registry", "nbutils.analyses.cues.stats": "run analysis",
                "nbutils.analysis._run": "analysis", "nbutils.engine.run": "engine run",
                "nbutils.engine.batching": "engine maths", "nbutils.runstore": "run store",
                "nbutils.runstore._sidecar": "run store", "nbutils.score_settings": "files",
                "nbutils.results._readings": "results", "nbutils.stats._firth": "stats", "nbutils.paths": "ground",
                "nbutils": "ground"}
    assert {m: band(m) for m in expected} == expected
    unplaced = [m for m in names if not any(fnmatchcase(m, p) for patterns in BANDS.values() for p in patterns)]
    assert not unplaced, f"{unplaced}: every module is named in a band of BANDS (no band takes the rest)"


@pytest.mark.parametrize("mod", sorted(GRAPH))
def test_every_import_follows_the_table(mod):
    wrong = wrong_arrows({mod: GRAPH[mod]})
    assert not wrong, "; ".join(wrong) + " — allowed arrows: ARROWS in tests/test_architecture.py"


def test_no_import_circle():
    found = {c: circle_text(GRAPH, c) for c in circles(GRAPH)}
    new = {c: text for c, text in found.items() if c not in KNOWN_CIRCLES}
    assert not new, "import circles: " + " | ".join(new.values())
    gone = [sorted(c) for c in KNOWN_CIRCLES if c not in found]
    assert not gone, f"these circles are gone: delete them from KNOWN_CIRCLES: {gone}"


def test_no_module_imports_another_wings_private_modules_or_names():
    found = set().union(*(private_imports(p) for p in MODULES))
    new = sorted(found - set(KNOWN_PRIVATE_IMPORTS))
    assert not new, f"private modules or names of another wing imported (use the wing's __init__): {new}"
    gone = sorted(set(KNOWN_PRIVATE_IMPORTS) - found)
    assert not gone, f"no longer imported: delete them from KNOWN_PRIVATE_IMPORTS: {gone}"


def _is_face(init: Path) -> bool:
    """An ``__init__`` that is only a face: its docstring, imports and ``__all__``."""
    body = ast.parse(init.read_text()).body
    return any(isinstance(n, ast.Assign) and n.targets[0].id == "__all__" for n in body) and all(
        isinstance(n, (ast.Import, ast.ImportFrom, ast.Assign)) or (isinstance(n, ast.Expr)
                                                                     and isinstance(n.value, ast.Constant))
        for n in body)


FACES = sorted(p.parent for p in PKG.glob("*/__init__.py") if _is_face(p))


def test_the_wings_are_faces():
    assert {f.name for f in FACES} >= {"stats", "results", "runstore", "analysis", "sweep", "report"}


@pytest.mark.parametrize("folder", FACES, ids=lambda w: w.name)
def test_a_wings_face_lists_what_it_binds_and_what_other_wings_take(folder):
    """A wing with a face (``__all__``): the list is exactly the public names its ``__init__`` imports (no name left
    out, none listed that it does not bind), and every name another wing imports from it is on the list."""
    name = module_name(folder / "__init__.py")
    face = importlib.import_module(name)
    tree = ast.parse((folder / "__init__.py").read_text())
    bound = {a.asname or a.name for node in tree.body if isinstance(node, ast.ImportFrom) and node.module != "__future__"
             for a in node.names}
    assert sorted(face.__all__) == sorted(n for n in bound if not n.startswith("_")), name
    taken = set()
    for path in MODULES:
        if wing(module_name(path)) == name:
            continue
        taken |= {t.rsplit(".", 1)[1] for t in imports_of(path) if t.rsplit(".", 1)[0] == name}
    taken = {t for t in taken if not t.startswith("_") and f"{name}.{t}" not in GRAPH}
    assert taken <= set(face.__all__), f"{name}: taken from outside but not on its face: {sorted(taken - set(face.__all__))}"


def test_the_private_check_finds_a_planted_import_of_a_wings_internals(tmp_path):
    pkg = tmp_path / "nbutils"
    (pkg / "wing").mkdir(parents=True)
    for f, text in {"__init__.py": "", "wing/__init__.py": "from ._inside import face\n",
                    "wing/_inside.py": "from .. import low\n\ndef face():\n    return low._hidden\n",
                    "low.py": "_hidden = 1\n", "user.py": "from .wing._inside import face\nfrom .low import _hidden\n",
                    "fine.py": "from .wing import face\nfrom __future__ import annotations\n"}.items():
        (pkg / f).write_text(text)
    found = set().union(*(private_imports(p, pkg) for p in sorted(pkg.rglob("*.py"))))
    assert found == {("nbutils.user", "nbutils.wing._inside.face"), ("nbutils.user", "nbutils.low._hidden")}


def test_no_module_is_longer_than_the_limit():
    lengths = {p.relative_to(PKG.parent).as_posix(): len(p.read_text().splitlines()) for p in MODULES}
    long = {p: n for p, n in lengths.items() if n > MAX_LINES}
    new = {p: n for p, n in long.items() if p not in LONG_MODULES}
    assert not new, f"modules over {MAX_LINES} lines (split them by job): {new}"
    short = [p for p in LONG_MODULES if p not in long]
    assert not short, f"no longer over {MAX_LINES} lines (or gone): delete them from LONG_MODULES: {short}"


# ---------------------------------------------------------------- the checks fail on what they forbid

def test_the_circle_check_finds_a_circle_in_a_graph():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert circles(graph) == [frozenset({"a", "b", "c"})]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert circle_text(graph, frozenset({"a", "b", "c"})) == "a → b, b → c, c → a"


def test_the_checks_find_a_planted_circle_and_upward_arrow_in_a_copy_of_the_package(tmp_path):
    """A copy of nbutils in which the papermill runner imports the sweep back inside a function (as the cluster jobs
    once did): the graph read from the files has the circle, and the arrow is refused."""
    copy = tmp_path / "nbutils"
    shutil.copytree(PKG, copy, ignore=lambda d, names: [n for n in names if not (n.endswith(".py")
                                                                                  or (Path(d) / n).is_dir())
                                                        or n in ("__pycache__", "data")])
    runner = copy / "sweep" / "_papermill.py"
    runner.write_text(runner.read_text() + "\n\ndef _planted():\n    from ._sweep import run_sweep\n\n    return run_sweep\n")
    graph = import_graph(copy)
    assert set(graph) == set(GRAPH)
    planted = [c for c in circles(graph) if c not in circles(GRAPH)]
    assert len(planted) == 1 and {"nbutils.sweep._papermill", "nbutils.sweep._sweep"} <= planted[0], planted
    assert "nbutils.sweep._papermill → nbutils.sweep._sweep" in circle_text(graph, planted[0])
    assert wrong_arrows(graph) == ["nbutils.sweep._papermill (papermill) imports nbutils.sweep._sweep (sweep)"]


def test_the_checks_find_a_planted_circle_between_two_modules(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from pkg.high import g  # an import inside a function counts\n    return g\n")
    (pkg / "high.py").write_text("from . import low\n\n\ndef g():\n    return low\n")
    graph = import_graph(pkg)
    assert graph["pkg.high"] == {"pkg", "pkg.low"} and graph["pkg.low"] == {"pkg.high"}
    assert circles(graph) == [frozenset({"pkg.high", "pkg.low"})]


@pytest.mark.parametrize("source,target,band_of_target", [
    ("nbutils.sweep._papermill", "nbutils.sweep._cluster", "cluster"),  # the runner imports the cluster jobs
    ("nbutils.sweep._cluster", "nbutils.sweep", "sweep"),  # the cluster imports the sweep
    ("nbutils.report", "nbutils.sweep", "sweep"),
    ("nbutils.stats._inference", "nbutils.results", "results"),  # the statistics import the words
    ("nbutils.results._words", "nbutils.artifacts", "files"),  # the words import the files floor
    ("nbutils.runstore._reading", "nbutils.analysis", "analysis"),  # the run store imports the analysis skeleton
    ("nbutils.paths", "nbutils.stats", "stats"),  # the ground floor imports a wing
    ("nbutils.engine.choices", "nbutils.engine.run", "engine run"),  # the maths imports the run loop
    ("nbutils.engine.batching", "nbutils.engine.models", "engine loading"),  # the maths imports model loading
    ("nbutils.engine.models", "nbutils.engine.scorer", "engine scorers"),  # loading imports a scorer
    ("nbutils.runstore", "nbutils.engine.batching", "engine maths"),  # the run store imports the engine
    ("nbutils.studies.negation.stats", "nbutils.engine.run", "engine run"),
    ("nbutils.studies.negation.stats", "nbutils.studies.personas.stats", "study"),  # a sibling study
    ("nbutils.studies.common.rules", "nbutils.studies.monotonicity.dataset", "study"),
    ("nbutils.analyses.cues.stats", "nbutils.studies.negation.stats", "study"),
])
def test_the_band_check_refuses_a_planted_arrow(source, target, band_of_target):
    assert wrong_arrows({source: {target}}) == [f"{source} ({band(source)}) imports {target} ({band_of_target})"]


def test_the_band_check_holds_the_engines_order_for_its_modules_to_come():
    """The scoring settings decide from the host's facts, loading carries them out: ``engine.settings`` imports no
    loader, scorer or run module, and the maths none of them (names of modules not written yet are checked too)."""
    for target in ("nbutils.engine.loading.load", "nbutils.engine.models", "nbutils.engine.choice_scorer",
                   "nbutils.engine.scorer", "nbutils.engine.run"):
        assert wrong_arrows({"nbutils.engine.settings": {target}}), target
    for maths in ("nbutils.engine.batching", "nbutils.engine.choices", "nbutils.engine.sentences",
                  "nbutils.engine.calibration"):
        for target in ("nbutils.engine.settings", "nbutils.engine.loading.host", "nbutils.engine.loading.load",
                       "nbutils.engine.choice_scorer", "nbutils.engine.run"):
            assert wrong_arrows({maths: {target}}), (maths, target)
    assert wrong_arrows({"nbutils.engine.loading.host": {"nbutils.engine.settings"}})
    assert not wrong_arrows({"nbutils.engine.settings": {"nbutils.engine.choices", "nbutils.engine.loading.host",
                                                         "nbutils.engine.loading.embedded", "nbutils.spec"},
                             "nbutils.engine.loading.load": {"nbutils.engine.settings", "nbutils.engine.loading.host"},
                             "nbutils.engine.choice_scorer": {"nbutils.engine.calibration", "nbutils.engine.settings"},
                             "nbutils.engine.run": {"nbutils.engine.settings", "nbutils.engine.choice_scorer"}})


# ---------------------------------------------------------------- imports by a string, the registry, the studies' shape

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
    resolve = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_resolve")
    inside = {id(c) for c in _string_imports(resolve)}
    outside = [c.lineno for c in _string_imports(tree) if id(c) not in inside]
    assert not outside, f"nbutils/studies/__init__.py imports by a string outside _resolve (line {outside})"
    for s in studies.REGISTRY.values():
        refs = [("params", s.params)] + ([("choice_items", s.choice_items)] if s.choice_items is not None else [])
        for what, ref in refs:
            module, _, name = ref.partition(":")
            assert module.startswith(f"nbutils.studies.{s.name}.") and name.isidentifier(), \
                f"{s.name}: {what} {ref!r} must name an object in nbutils/studies/{s.name}/"
    for name, ref in studies.RUN_ANALYSIS_PARAMS.items():
        assert ref.startswith(f"nbutils.analyses.{name}."), f"run analysis {name}: params {ref!r}"


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
    """``analyze_run(run_dir, params=None, **options)`` returning an ``Analysis``: ``params`` the analysis's parameter
    record (``analysis_params.AnalysisParams``: ``seed`` 0 and ``include_limited`` False by default), or its fields as
    keywords; ``analysis.run_analysis`` does the rest."""
    from nbutils.analysis import AnalysisParams
    from nbutils.analysis import Analysis

    mod = importlib.import_module(module)
    sig = inspect.signature(mod.analyze_run, eval_str=True)
    params = list(sig.parameters.values())
    assert params[0].name == "run_dir" and params[0].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert params[1].name == "params" and params[1].default is None, f"{module}: analyze_run(run_dir, params=None, ...)"
    assert params[2].kind is inspect.Parameter.VAR_KEYWORD and len(params) == 3, f"{module}: options are keywords"
    record = mod.STEPS.params
    assert issubclass(record, AnalysisParams) and record.__dataclass_params__.frozen, module
    assert record().seed == 0 and record().include_limited is False
    ret = sig.return_annotation
    assert isinstance(ret, type) and issubclass(ret, Analysis), f"{module}: analyze_run returns {ret!r}"


def test_the_sweep_names_no_study():
    text = (PKG / "sweep" / "_sweep.py").read_text()
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
