"""Colab: every "Open in Colab" badge and every setup cell uses the one repository address of ``nbutils.colab`` and
opens a notebook that exists; ``python -m nbutils colab-links`` points them all at a fork and changes nothing else."""
from __future__ import annotations

import shutil

import nbformat
import pytest

from nbutils import __main__ as cli
from nbutils import colab, paths

ROOT = paths.repo_root()
NOTEBOOKS = sorted(p for p in (ROOT / "notebooks").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def rel(path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=rel)
def test_each_notebook_opens_itself_in_colab_from_the_repository(notebook):
    nb = nbformat.read(notebook, as_version=4)
    assert colab.badge_links(nb.cells[0].source) == [(colab.REPOSITORY, colab.BRANCH, rel(notebook))]
    assert colab.badge_url(rel(notebook)) in nb.cells[0].source
    setup = [c for c in nb.cells if c.cell_type == "code" and '"google.colab" in sys.modules' in c.source]
    assert len(setup) == 1 and nb.cells.index(setup[0]) == 1, "the setup cell is the first code cell"
    assert colab.clone_links(setup[0].source) == [colab.REPOSITORY]
    assert f'"{colab.clone_url()}"' in setup[0].source
    others = "".join(c.source for c in nb.cells if c is not setup[0] and c is not nb.cells[0])
    assert not colab.badge_links(others) and not colab.clone_links(others), "one badge and one clone, no more"


def test_every_badge_in_the_readme_and_docs_opens_a_notebook_of_this_repository():
    found = {}
    for page in PAGES:
        for repository, branch, notebook in colab.badge_links(page.read_text(encoding="utf-8")):
            found[(rel(page), notebook)] = (repository, branch)
    assert ("README.md", "notebooks/quickstart.ipynb") in found, "the README's Colab entry is the quickstart"
    for (page, notebook), where in found.items():
        assert where == (colab.REPOSITORY, colab.BRANCH), f"{page}: a badge opens {where}"
        assert (ROOT / notebook).is_file(), f"{page}: a badge opens {notebook}, which does not exist"


def test_the_docs_site_names_the_same_repository():
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert f"repo_url: {colab.clone_url()}\n" in text and f"repo_name: {colab.REPOSITORY}\n" in text


def test_colab_links_points_a_fork_at_itself_and_changes_nothing_else(tmp_path, monkeypatch, capsys):
    fork = tmp_path / "fork"
    shutil.copytree(ROOT / "notebooks", fork / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copy2(ROOT / "mkdocs.yml", fork / "mkdocs.yml")
    shutil.copy2(ROOT / "README.md", fork / "README.md")
    monkeypatch.setattr(paths, "repo_root", lambda: fork)
    assert cli.main(["colab-links", "--repository", "someone/probes-fork", "--branch", "dev"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(NOTEBOOKS) + 2  # every notebook, README.md, mkdocs.yml
    readme = (fork / "README.md").read_text(encoding="utf-8")
    assert colab.badge_links(readme) == [("someone/probes-fork", "dev", "notebooks/quickstart.ipynb")]
    assert "repo_url: https://github.com/someone/probes-fork\n" in (fork / "mkdocs.yml").read_text(encoding="utf-8")
    for notebook in NOTEBOOKS:
        text = (fork / rel(notebook)).read_text(encoding="utf-8")
        assert colab.badge_links(text) == [("someone/probes-fork", "dev", rel(notebook))]
        assert colab.clone_links(text) == ["someone/probes-fork"]
        assert colab.rewrite(text) == notebook.read_text(encoding="utf-8"), "only the addresses changed"
    assert cli.main(["colab-links", "--repository", "someone/probes-fork", "--branch", "dev"]) == 0
    assert "already" in capsys.readouterr().out
    assert cli.main(["colab-links", "--repository", "https://github.com/x"]) == 2
    assert "repository: must be owner/name" in capsys.readouterr().err
