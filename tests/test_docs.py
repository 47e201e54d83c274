"""The documentation says only what is true of the repository: the site builds in strict mode (no broken link, no
page missing from the navigation), every repository path the README and docs name exists, every ``nbutils`` command
they show is accepted by the command line, and every ``-p NAME`` they pass to a notebook is one of its parameters.

Commands are checked without running anything heavy: the CLI's entry point is called with the functions that would
do the work replaced by recorders (``sweep``, ``run``, ``merge``, ``report``). A sweep command goes through the real
sweep up to the point where it would take the run directory's lock, so every file and block it names is checked
against its notebook exactly as a real sweep checks it.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from nbutils import __main__ as cli, colab, paths
from nbutils.sweep import _papermill as notebooks, _sweep as sweep

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted(DOCS.rglob("*.md"))]
REPO = f"{colab.clone_url()}/blob/{colab.BRANCH}/"
# what a repository path starts with; outputs/ is the user's, except the sample run that ships
TOP = ("nbutils/", "notebooks/", "params/", "scripts/", "tests/", "benchmarks/", "docs/", "outputs/samples", ".ci/",
       "environment.yml", "pyproject.toml", "mkdocs.yml")
PATH_RE = re.compile(r"(?<![\w/.{}-])((?:" + "|".join(re.escape(t) for t in TOP) + r")[\w./-]*)")
PLACEHOLDER = re.compile(r"(^|/)(my[-_]|mine\b)")  # a user's own file in an example: params/models/my-model.yaml
COMMAND_RE = re.compile(r"(?:^|[\s`(])((?:\.venv/bin/)?(?:python -m )?nbutils (?:sweep|run|merge|report|studies|where)\b[^`\n#]*)")


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def _blocks_and_spans(text: str) -> list[str]:
    """Fenced code blocks (line by line) and inline code spans: where commands are written."""
    out = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M):
        out += [line for line in block.splitlines() if line.strip()]
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    out += re.findall(r"`([^`\n]+)`", prose)
    return out


def _commands() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for chunk in _blocks_and_spans(_text(page)):
            for m in COMMAND_RE.finditer(" " + chunk):
                found.append((page.relative_to(ROOT).as_posix(), m.group(1).strip()))
    return sorted(set(found))


COMMANDS = _commands()


def test_site_builds_in_strict_mode(tmp_path):
    """`mkdocs build --strict`: a broken link or anchor, a page missing from the nav or a nav entry without a page
    fails (the `docs` extra installs mkdocs-material; scripts/setup.sh installs it)."""
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
                           "--site-dir", str(tmp_path / "site")], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"), timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "site" / "studies" / "monotonicity" / "index.html").is_file()


def test_every_page_is_in_the_navigation():
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    listed = set(re.findall(r"[\w/-]+\.md", str(nav)))
    assert {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")} <= listed


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_repository_path_named_exists(page):
    text = re.sub(r"--out\s+\S+", "", _text(page))  # what a command would write need not exist yet
    named = {m.rstrip(".,:;") for m in PATH_RE.findall(text)}
    named |= {u.split("#")[0] for u in re.findall(re.escape(REPO) + r"([^)\s>]+)", text)}
    # relative links from this page (the mkdocs build checks those inside docs/; this covers the READMEs too)
    named |= {(page.parent / t.split("#")[0]).resolve().relative_to(ROOT).as_posix()
              for t in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in t and not t.startswith("#")}
    missing = sorted(p for p in named if p and not PLACEHOLDER.search(p) and not (ROOT / p).exists())
    assert not missing, f"{page.relative_to(ROOT)} names files that do not exist: {missing}"


def test_the_docs_show_commands_of_every_kind():
    kinds = {re.search(r"nbutils (\w+)", c).group(1) for _, c in COMMANDS}
    assert {"sweep", "run", "merge", "report", "studies", "where"} <= kinds, kinds


@pytest.mark.parametrize("page", sorted((DOCS / "studies").glob("*.md")), ids=lambda p: p.stem)
def test_parameter_tables_name_only_parameters_of_the_page_notebooks(page, parameters_cache):
    """A study page's `| parameter |` tables list names from the parameters cells of the notebooks it names."""
    text = _text(page)
    notebooks = sorted(set(re.findall(r"notebooks/[\w/]+\.ipynb", text)))
    assert notebooks, f"{page.name} names no notebook"
    allowed = set().union(*(parameters_cache(nb) for nb in notebooks))
    rows = re.findall(r"^\| `(\w+)` \|", "\n".join(t for t in re.split(r"\n\n", text) if t.startswith("| parameter |")),
                      flags=re.M)
    assert rows, f"{page.name} has no parameter table"
    assert not set(rows) - allowed, f"{page.name} lists {sorted(set(rows) - allowed)}, not parameters of {notebooks}"


class _Checked(BaseException):
    """Raised where a checked command would start working: everything before it was accepted (a BaseException, so
    the command line's own error handling lets it through)."""


@pytest.fixture(scope="module")
def parameters_cache():
    """Each notebook's parameters read once (papermill.inspect_notebook through the runner's own function)."""
    cache: dict[str, set[str]] = {}
    real = notebooks.notebook_parameters

    def cached(notebook: str) -> set[str]:
        key = str(paths.resolve(notebook))
        if key not in cache:
            cache[key] = real(notebook)
        return cache[key]
    return cached


@pytest.mark.parametrize("where,command", COMMANDS, ids=[c for _, c in COMMANDS])
def test_every_command_shown_is_accepted(where, command, monkeypatch, parameters_cache, capsys):
    """The command line parses it; `run` checks its notebook and every `-p`/`-f` name against the notebook's
    parameters cell; `sweep` checks its sweep file and every parameter file and block it names, as a real sweep does
    before it takes the run's lock; `merge` and `report` are parsed only (they need a finished run)."""
    argv = shlex.split(command)
    argv = argv[argv.index("nbutils") + 1:]
    monkeypatch.setattr(notebooks, "notebook_parameters", parameters_cache)
    monkeypatch.setattr(sweep, "notebook_parameters", parameters_cache)
    if len(argv) == 1 and argv[0] in ("run", "sweep", "merge", "report"):  # the subcommand named in prose
        with pytest.raises(SystemExit) as exc:
            cli.main([argv[0], "--help"])
        assert exc.value.code == 0
        return
    calls = []

    def run_notebook(notebook, output, params, kernel=None, record=None):
        if not paths.resolve(notebook).is_file():
            raise ValueError(f"notebook: {notebook} does not exist")
        notebooks.check_parameters(notebook, params, "-p", record=record)
        calls.append(notebook)
        return Path("checked")

    def stop(*args, **kwargs):
        calls.append("sweep")
        raise _Checked

    def recorded(*args, **kwargs):
        calls.append(args)
        raise _Checked

    def cluster_host(name, cluster, source):  # the live cluster is the host's, not the page's: a command shown for
        calls.append(("cluster", name))      # a SLURM login node is checked here up to the point where it asks SLURM

    import nbutils.sweep

    monkeypatch.setattr(notebooks, "run_notebook", run_notebook)
    monkeypatch.setattr(nbutils.sweep, "run_notebook", run_notebook)  # what the command line takes from the face
    monkeypatch.setattr(sweep, "check_host", cluster_host)
    monkeypatch.setattr(sweep, "run_lock", stop)
    monkeypatch.setattr(sweep, "execute", stop)
    monkeypatch.setattr(sweep, "write_report", stop)
    import nbutils.report
    import nbutils.runstore
    monkeypatch.setattr(nbutils.runstore, "merge_shards", recorded)
    monkeypatch.setattr(nbutils.report, "write_report", recorded)  # any run folder, the validation study's too
    try:
        code = cli.main(argv)
    except _Checked:
        code = 0
    except SystemExit as exc:  # argparse refused it
        code = exc.code
    err = capsys.readouterr().err
    assert code == 0, f"{where}: `{command}` was refused: {err.strip()}"
    if argv[0] in ("run", "sweep", "merge", "report"):
        assert calls, f"{where}: `{command}` did not reach its work"


def test_nbutils_studies_lists_what_the_readme_lists(capsys):
    """The README's table of studies and ``python -m nbutils studies`` name the same studies and run analyses, and the
    install instructions name no package index (the package is installed from a clone or its git URL)."""
    readme = (paths.repo_root() / "README.md").read_text()
    table = readme.split("## The studies", 1)[1].split("\n\n")[1]
    rows = [line.split("|")[1].strip() for line in table.splitlines()[2:] if line.startswith("|")]
    assert cli.main(["studies"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    names = {"cue profiling": "cues"}
    assert sorted(names.get(r, r.split(" (")[0]) for r in rows) == sorted(listed), (rows, listed)
    for page in [paths.repo_root() / "README.md", *(paths.repo_root() / "docs").rglob("*.md")]:
        assert not re.search(r"pip install \"?llm-bias-probes(\[[\w,]+\])?\"?(?!\s*@)(\s|`|$)", page.read_text()), page


def test_nbutils_run_of_the_score_notebook_prints_rows_rate_and_eta(tmp_path, capsys):
    """The lines a sweep prints while a model scores, printed by ``nbutils run`` of the score notebook too (read from
    the engine's progress file); a notebook's progress bar updates about every 10% (a dozen outputs at most)."""
    import json
    import time

    import math

    from nbutils.engine.choices import bar_step, progress_bar

    assert "score.ipynb" in notebooks.WATCHED
    partial = paths.partial_dir(tmp_path)
    partial.mkdir(parents=True)
    with notebooks.Progress(tmp_path, "", every=0.05, who="run"):
        (partial / "smollm2-135m-instruct.progress.json").write_text(
            json.dumps({"n_done": 30, "n_planned": 120, "rows_per_second": 0.75}))
        time.sleep(0.5)
    assert "[run] smollm2-135m-instruct: 30/120 rows, 0.75/s, ETA 2.0 min" in capsys.readouterr().out
    assert [bar_step(n) for n in (1, 9, 10, 60, 1001)] == [1, 1, 1, 6, 101]
    bar = progress_bar(list(range(60)))
    assert bar.miniters == 6 and bar.maxinterval == math.inf, "no redraw on a timer: a slow model's bar stays quiet"
    bar.close()


def test_the_readme_is_read_in_five_minutes():
    """README.md: at most 1,200 words; the two commands (the demo, and the tests that .ci/run runs) on its first
    screen, before any figure; figure captions of at most 40 words; every shipped sample in its samples table with the
    notebook that analyses it, the positive control's with its commands. Detail lives in docs/."""
    readme = _text(ROOT / "README.md")
    lines = readme.splitlines()
    assert len(readme.split()) <= 1200, f"README.md has {len(readme.split())} words (at most 1,200): move detail to docs/"
    demo, tests = (next(i for i, line in enumerate(lines) if line.startswith(c)) for c in
                   ("bash scripts/demo.sh", "bash scripts/test.sh"))
    figures = [i for i, line in enumerate(lines) if line.startswith("![")]
    assert max(demo, tests) < 25 and (not figures or max(demo, tests) < figures[0]), "the commands come first"
    assert "bash scripts/test.sh" in _text(ROOT / ".ci" / "run"), "the README's test command is the one CI runs"
    for i in figures:
        caption = " ".join(lines[i + 2:]).split("*", 2)[1] if lines[i + 2].startswith("*") else ""
        assert caption and len(caption.split()) <= 40, f"the caption below {lines[i]} has {len(caption.split())} words"
    table = readme.split("| sample |", 1)[1].split("\n\n", 1)[0]
    rows = {line.split("`")[1]: line for line in table.splitlines() if line.startswith("| `")}
    shipped = {f"outputs/samples/{p.name}" for p in (ROOT / "outputs" / "samples").iterdir() if p.is_dir()}
    assert set(rows) == shipped, (sorted(rows), sorted(shipped))
    assert all(".ipynb" in row for row in rows.values())
    assert "cp -r outputs/samples/control outputs/control_sample" in readme
    assert "-p run_dir outputs/control_sample" in readme
