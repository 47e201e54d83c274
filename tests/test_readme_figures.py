"""The README's figures are what ``scripts/readme_figures.py`` draws from the shipped samples now: a figure made before
its sample changed (the sha256 the script recorded), or one that differs from a fresh drawing, fails."""
from __future__ import annotations

import importlib.util
import shutil

from nbutils import artifacts, paths

ROOT = paths.repo_root()
spec = importlib.util.spec_from_file_location("readme_figures", ROOT / "scripts" / "readme_figures.py")
figures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(figures)


def test_the_readme_figures_are_what_the_script_draws_from_the_samples(tmp_path):
    made = tmp_path / "made"
    figures.write(made)
    shipped = ROOT / "docs" / "img"
    assert figures.differences(made, shipped) == [], "run `python scripts/readme_figures.py` and commit docs/img/"
    readme, captions = (ROOT / "README.md").read_text(), (ROOT / "docs" / "getting-started.md").read_text()
    assert all(f"img/{name}" in captions for name in figures.FIGURES), "every figure with its full caption"
    assert f"docs/img/{next(iter(figures.FIGURES))}" in readme, "the README shows the first"
    # the check can fail: a sample changed since its figure was made, or a figure drawn otherwise
    copy = tmp_path / "shipped"
    shutil.copytree(shipped, copy)
    record = artifacts.read_json(copy / figures.RECORD)
    name = next(iter(figures.FIGURES))
    record[name]["inputs"] = {k: "0" * 64 for k in record[name]["inputs"]}
    artifacts.write_json(record, copy / figures.RECORD)
    other = list(figures.FIGURES)[1]
    shutil.copy(made / name, copy / other)  # another figure in its place
    why = figures.differences(made, copy)
    assert any(w.startswith(f"{name}: ") and "changed since the figure was made" in w for w in why), why
    assert any(w.startswith(f"{other}: ") for w in why), why
