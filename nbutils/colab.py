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


# GitHub's rules: an owner is 1-39 letters, digits or single hyphens inside; a repository name is 1-100 letters,
# digits, '.', '_' or '-', not '.' or '..' and not ending in '.git'
OWNER = re.compile(r"[A-Za-z0-9](?:-?[A-Za-z0-9]){0,38}")
NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
URL_SAFE = re.compile(r"[A-Za-z0-9._/-]+")  # what a branch may hold to stand in a badge's address as it is


def check_repository(repository) -> str:
    """``repository`` once it is ``owner/name`` as GitHub allows them; else a ValueError naming ``repository``."""
    owner, _, name = str(repository).partition("/")
    if not (isinstance(repository, str) and OWNER.fullmatch(owner) and NAME.fullmatch(name)
            and name not in (".", "..") and not name.lower().endswith(".git")):
        raise ValueError(f"repository: must be owner/name as on GitHub (owner: letters, digits and single hyphens, "
                         f"at most 39; name: letters, digits, '.', '_', '-', not ending in .git), got {repository!r}")
    return repository


def check_branch(branch) -> str:
    """``branch`` once git accepts it as a branch name (``git check-ref-format --branch``'s rules) and it can stand in
    a Colab address as it is (letters, digits, '.', '_', '-', '/'); else a ValueError naming ``branch``."""
    text = branch if isinstance(branch, str) else ""
    parts = text.split("/")
    bad = (not URL_SAFE.fullmatch(text) or text.startswith("-") or text == "@" or ".." in text
           or any(not part or part.startswith(".") or part.endswith(".lock") for part in parts) or text.endswith("."))
    if bad:
        raise ValueError(f"branch: must be a git branch name made of letters, digits, '.', '_', '-' and '/' (no '..', "
                         f"no empty or dot-led part, not ending in '.' or '.lock'; a Colab address holds it as it is), "
                         f"got {branch!r}")
    return branch


def _targets(root: Path) -> list[Path]:
    """The files ``sync`` rewrites: every notebook under ``root/notebooks``, the README and docs pages (their badges),
    ``mkdocs.yml``; a symbolic link among them is refused when it leads out of ``root``."""
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    found = []
    for path in [*sorted((root / "notebooks").rglob("*.ipynb")), *pages, root / "mkdocs.yml"]:
        if ".ipynb_checkpoints" in path.parts or not path.is_file():
            continue
        real = path.resolve()
        if not real.is_relative_to(root.resolve()):
            raise ValueError(f"colab-links: {path} is a symbolic link to {real}, outside the repository {root}; "
                             "nothing was rewritten: replace the link by the file itself, or remove it")
        if real not in found:
            found.append(real)
    return found


def _rewritten(path: Path, repository: str, branch: str) -> str | None:
    """The new text of one file, or None when it already points there. A notebook is read and written through
    nbformat, so it stays a valid notebook whatever the addresses hold."""
    old = path.read_text(encoding="utf-8")
    if path.suffix == ".ipynb":
        import nbformat

        try:
            nb = nbformat.reads(old, as_version=nbformat.NO_CONVERT)
        except Exception as err:  # noqa: BLE001 - nbformat raises several kinds for a damaged file
            raise ValueError(f"colab-links: {path} is not a readable notebook ({type(err).__name__}); nothing was "
                             "rewritten: restore it (git checkout -- <file>) and run again") from None
        changed = False
        for cell in nb.cells:
            new = rewrite(cell.source, repository, branch)
            changed |= new != cell.source
            cell.source = new
        return nbformat.writes(nb) + "\n" if changed else None
    if path.name == "mkdocs.yml":
        new = re.sub(r"(?m)^repo_url: .*$", f"repo_url: {clone_url(repository)}", old)
        new = re.sub(r"(?m)^repo_name: .*$", f"repo_name: {repository}", new)
    else:
        new = rewrite(old, repository, branch)
    return new if new != old else None


def sync(root: Path, repository: str = REPOSITORY, branch: str = BRANCH) -> list[Path]:
    """Point every notebook under ``root/notebooks``, the badges of the README and docs, and ``mkdocs.yml``'s repository
    at ``repository`` and ``branch``; returns the files changed. Both values are checked and every file's new text is
    made before the first is written, so a refused value or file leaves every file as it was; each file is replaced
    atomically."""
    from .artifacts import write_text

    check_repository(repository)
    check_branch(branch)
    plan = [(path, new) for path in _targets(root) if (new := _rewritten(path, repository, branch)) is not None]
    for path, new in plan:
        write_text(new, path)
    return [path for path, _ in plan]
