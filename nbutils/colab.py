"""Where the notebooks' "Open in Colab" badges and Colab setup cells point: the repository is named here, once.

A badge is static Markdown and a setup cell runs before ``nbutils`` is installed, so each notebook carries the address
as text; this module is the one place it is set, and ``python -m nbutils colab-links`` writes it into every notebook
(and the README's and docs' badges and ``mkdocs.yml``). A fork sets ``REPOSITORY`` (and ``BRANCH``) below, runs that command and commits the
notebooks; ``tests/test_colab.py`` checks that every badge and setup cell uses this address and names a notebook that
exists.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

REPOSITORY = "llm-bias-probes/llm-bias-probes"  # owner/name on GitHub: the badges open notebooks from here
BRANCH = "main"  # the branch the badges open

BADGE = re.compile(r"https://colab\.research\.google\.com/github/([\w.-]+/[\w.-]+)/blob/([\w./-]+?)/(notebooks/[\w./-]+\.ipynb)")
# the setup cell's `git clone` address, a quoted string (quotes escaped in a notebook's JSON)
CLONE = re.compile(r'(\\?")https://github\.com/([\w.-]+/[\w.-]+?)(?:\.git)?(\\?")')


def in_colab() -> bool:
    """True in a Google Colab runtime (its kernel has imported ``google.colab``)."""
    return "google.colab" in sys.modules


def clone_url(repository: str = REPOSITORY) -> str:
    """The address a setup cell clones."""
    return f"https://github.com/{repository}"


def badge_url(notebook: str, repository: str = REPOSITORY, branch: str = BRANCH) -> str:
    """The Colab address of ``notebook`` (a path from the repository root, e.g. ``notebooks/quickstart.ipynb``)."""
    return f"https://colab.research.google.com/github/{repository}/blob/{branch}/{notebook}"


def badge_links(text: str) -> list[tuple[str, str, str]]:
    """Every Colab address in ``text`` as (repository, branch, notebook path)."""
    return BADGE.findall(text)


def clone_links(text: str) -> list[str]:
    """Every repository a setup cell in ``text`` clones."""
    return [m.group(2) for m in CLONE.finditer(text)]


def rewrite(text: str, repository: str = REPOSITORY, branch: str = BRANCH) -> str:
    """``text`` with every Colab badge and clone address pointing at ``repository`` and ``branch``."""
    text = BADGE.sub(lambda m: badge_url(m.group(3), repository, branch), text)
    return CLONE.sub(lambda m: f"{m.group(1)}{clone_url(repository)}{m.group(3)}", text)


def sync(root: Path, repository: str = REPOSITORY, branch: str = BRANCH) -> list[Path]:
    """Point every notebook under ``root/notebooks``, the badges of the README and docs, and ``mkdocs.yml``'s repository
    at ``repository``; returns the files changed. Files are edited as text, so nothing else in them moves."""
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repository):
        raise ValueError(f"repository: must be owner/name as on GitHub, got {repository!r}")
    changed = []
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]  # their badges (the README's quickstart)
    for path in [*sorted((root / "notebooks").rglob("*.ipynb")), *pages]:
        if ".ipynb_checkpoints" in path.parts or not path.is_file():
            continue
        old = path.read_text(encoding="utf-8")
        new = rewrite(old, repository, branch)
        if new != old:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    mkdocs = root / "mkdocs.yml"
    if mkdocs.is_file():
        old = mkdocs.read_text(encoding="utf-8")
        new = re.sub(r"(?m)^repo_url: .*$", f"repo_url: {clone_url(repository)}", old)
        new = re.sub(r"(?m)^repo_name: .*$", f"repo_name: {repository}", new)
        if new != old:
            mkdocs.write_text(new, encoding="utf-8")
            changed.append(mkdocs)
    return changed
