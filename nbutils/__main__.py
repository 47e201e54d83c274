"""Command line: ``python -m nbutils sweep SWEEP.yaml``, ``python -m nbutils run NOTEBOOK -p NAME VALUE``,
``python -m nbutils merge RUN_DIR MODEL_SLUG``, ``python -m nbutils report RUN_DIR``, ``python -m nbutils studies``,
``python -m nbutils where``, ``python -m nbutils colab-links``, ``python -m nbutils show RUN_DIR`` (every item beside
the model's answer), ``python -m nbutils runs [DIR]`` (an index of the runs below DIR) and ``python -m nbutils import
lm-eval|inspect LOG [LOG …] --run-dir DIR`` (another tool's per-item logs analysed as a custom-study run).

Relative paths are taken from the project root: $NBUTILS_ROOT, else the checkout you are in (the working directory or the
nearest folder above it holding pyproject.toml and notebooks/), else the checkout nbutils was installed from with -e, else the
working directory. notebooks/… and params/… files missing there come from the copy packed into the package."""
from __future__ import annotations

import argparse
import sys


def _cli_params(notebook: str, pairs: list) -> dict:
    """The -p values typed as the notebook declares them (``nbutils.sweep.parameter_from_cli``): a ``str`` parameter keeps
    the text as typed, any other is read as YAML."""
    from .sweep import declared_parameters, parameter_from_cli
    from . import paths

    nb = paths.resolve(notebook)
    types = declared_parameters(notebook) if nb.suffix == ".ipynb" and nb.is_file() else {}
    for k in dict.fromkeys(n for n, _ in pairs):
        values = [v for n, v in pairs if n == k]
        if len(values) > 1:
            raise ValueError(f"{k}: -p gives it {len(values)} times ({', '.join(map(repr, values))}); give it once "
                             "(a key given twice in a -f file is refused too)")
    return {k: parameter_from_cli(v, k, types.get(k, (None,))[0]) for k, v in pairs}


def _count(text: str) -> int:
    """An option's whole number ≥ 1 (argparse names the option when it is not)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be an integer ≥ 1, got {text!r}")
    return n


def _warn(line: str) -> None:
    print(f"warning: {line}", file=sys.stderr)


def _headline_after_analysis(notebook: str, output: str | None, params: dict) -> None:
    """After a study's analysis (or a run analysis such as the cue profile) ran into its run directory: the run's report
    written as a sweep writes it, then the results' headline lines and where the report is."""
    from . import paths, studies
    from .report import headline, write_report
    from .results import opening, run_table_lines

    analyses = {s.notebooks["analyze"]: s.name for s in (*studies.REGISTRY.values(), *studies.ACROSS_RUNS.values())}
    nb, run_dir = paths.resolve(notebook).as_posix(), params.get("run_dir")
    ran = next((name for path, name in analyses.items() if nb.endswith(path)), None)
    if output or not run_dir or not (ran or any(nb.endswith(p) for p in studies.RUN_ANALYSES.values())):
        return
    words = paths.results_path(run_dir) if ran else paths.cues_results_path(run_dir)  # a run analysis: its own words
    print("\n".join(opening(headline(run_dir, words), run_table_lines(run_dir) if ran else [])))
    print(f"results in words → {words}")
    try:
        print(f"report → {write_report(run_dir, ran, warn=_warn)}")
    except ValueError as err:  # a run analysis's results stand without the study's report (no study analysis yet)
        if ran:
            raise
        print(f"report: not written ({err})", file=sys.stderr)


def _run_folder(notebook: str, params: dict) -> None:
    """A study read across runs (the validation) given the folder of the runs it reads and no run folder: its run
    folder is that folder, or a shipped sample's copy (``paths.reading_folder``), so its executed notebook, results and
    report land together."""
    from . import paths, studies

    study = studies.across_runs_of_notebook(notebook)
    if study is not None and params.get(study.reads) and not params.get("run_dir"):
        params["run_dir"] = paths.reading_folder(params[study.reads])


def _add_item_commands(sub) -> None:
    """The ``show`` and ``runs`` subcommands."""
    sh = sub.add_parser("show", help="every scored item beside the model's answer: prompt, gold, choice, margin, "
                                     "design")
    sh.add_argument("run_dir")
    sh.add_argument("--model", help="one model, by its label or its score file's name (scores/<slug>.parquet); "
                                    "default: every usable one")
    sh.add_argument("--disagree", nargs=2, metavar=("A", "B"),
                    help="the items models A and B (label or score file name) answer differently, both rows of each, "
                         "the largest difference in margin first")
    sh.add_argument("--wrong", action="store_true", help="errors only, the most confident first")
    sh.add_argument("--closest", type=_count, metavar="N", help="the N items of smallest |margin|")
    sh.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                    help="keep items whose design column KEY (or model, gold, choice, correct) is VALUE; repeatable "
                         "(a key given twice: either value)")
    sh.add_argument("--full", action="store_true", help="each item with its whole prompt")
    sh.add_argument("--jsonl", action="store_true", help="one JSON object per item, with the whole prompt")
    sh.add_argument("--limit", type=_count, metavar="N",
                    help="at most N items (default: 20 in the table and with --full, every item with --jsonl)")
    rs = sub.add_parser("runs", help="an index of the run directories below DIR: study, models, items, analysed, "
                                     "headline, report")
    rs.add_argument("dir", nargs="?", default="outputs", help="folder to search (default: outputs)")


def _print_lines(lines) -> int:
    """Print line by line; a reader that stops early (``| head``) ends the output quietly."""
    import os

    try:
        for line in lines:
            print(line)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python exits
    return 0


def _show(args) -> int:
    """``show``: the run's items filtered and ordered as asked, as a table (as wide as the terminal), blocks or JSON
    lines; the first line says what the margin is."""
    import shutil
    import textwrap

    from . import items as it
    from .runstore import Run

    if args.disagree and args.model:
        raise ValueError("--model: does not go with --disagree, which names the two models whose answers it shows")
    run = Run(args.run_dir)  # resolved once: the items and the names of their models
    df = it.items(run, args.model)
    if args.disagree:
        df = it.disagree(df, *args.disagree, run_dir=run)
    chosen = it.select(df, args.where, args.wrong, args.closest)
    limit = args.limit or (None if args.jsonl else 20)
    shown = chosen.head(limit) if limit else chosen
    for note in df.attrs["notes"]:
        print(note, file=sys.stderr)
    if args.jsonl:
        return _print_lines(it.jsonl(shown))
    more = len(chosen) - len(shown)
    width = max(shutil.get_terminal_size((it.WIDTH, 24)).columns, 40)  # $COLUMNS first, then the terminal, else 120
    head = textwrap.wrap(it.margin_line(shown) or "", width, break_on_hyphens=False)
    what = (f"rows, both models' answers to the {chosen[df.attrs['id_column']].nunique()} items they answer "
            f"differently{' (one of them or both wrong)' if args.wrong else ''}, of the {df.attrs['shared']} "
            "both answered" if args.disagree else "items")
    if args.closest:  # the N closest of how many
        what += f" of smallest |margin|, the closest of {len(it.select(df, args.where, args.wrong))}"
    tail = (f"{len(shown)} of {len(chosen)} {what}" + (f" ({more} more: --limit N)" if more else "")
            + ("" if args.full else "; --full shows each whole prompt, --jsonl every field"))
    return _print_lines(head + (it.full_lines(shown) if args.full else it.table_lines(shown, width))
                        + textwrap.wrap(tail, width, break_on_hyphens=False))


def _add_import_command(sub) -> None:
    """The ``import`` subcommand."""
    im = sub.add_parser("import", help="analyse other tools' per-item logs (lm-eval --log_samples files, Inspect eval "
                                       "logs; one model each, one task) as a custom-study run: import, analysis, report")
    im.add_argument("tool", choices=["lm-eval", "inspect"], help="the tool that wrote the logs")
    im.add_argument("logs", nargs="+", metavar="LOG", help="one log per model (lm-eval: samples_<task>_<date>.jsonl; "
                                                           "Inspect: .eval or .json); the first is the reference")
    im.add_argument("--run-dir", required=True, help="the run directory to write (nothing is written outside it)")
    im.add_argument("--group-by", action="append", default=[], metavar="FIELD",
                    help="a field to analyse by: doc.FIELD (lm-eval); metadata.FIELD, score or answer (Inspect); "
                         "repeatable")
    im.add_argument("--label", action="append", default=[], metavar="NAME",
                    help="the name results print for a model, one per log in the logs' order (default: the model's "
                         "name in its log)")
    im.add_argument("--overwrite", action="store_true", help="replace a run of other logs or another file")
    im.add_argument("--no-analysis", action="store_true",
                    help="only write the run (analyse it later with notebooks/custom/03_analyze.ipynb)")
    im.add_argument("--kernel", help="Jupyter kernel name for the analysis (default: the notebooks' python3)")


def _import(args) -> int:
    """``import``: the logs written as a custom-study run, then (unless ``--no-analysis``) its analysis notebook, the
    results' headline lines and the report, as ``run`` prints them."""
    from .imports import import_logs
    from .sweep import run_notebook
    from .studies import get, params_of_notebook

    done = import_logs(args.tool, args.logs, args.run_dir, args.group_by, args.label or None, args.overwrite)
    print("\n".join(done.lines()))
    if args.no_analysis:
        print(f"analyse it: python -m nbutils run {get('custom').notebooks['analyze']} -p run_dir {args.run_dir}")
        return 0
    notebook, params = get("custom").notebooks["analyze"], {"run_dir": str(args.run_dir)}
    out = run_notebook(notebook, None, params, args.kernel, record=params_of_notebook(notebook))
    print(f"executed → {out}")
    _headline_after_analysis(notebook, None, params)
    return 0


def _parser() -> argparse.ArgumentParser:
    """The command line's parser: every subcommand and its options."""
    parser = argparse.ArgumentParser(prog="nbutils", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sw = sub.add_parser("sweep", help="generate once, score every model, analyze (papermill)")
    sw.add_argument("sweep_file", nargs="?", help="YAML with study, run_dir, dataset, models, analyze (e.g. params/demo.yaml)")
    sw.add_argument("--study", help="registered study (default: the sweep file's, else monotonicity)")
    sw.add_argument("--run-dir", help="override the sweep file's run_dir")
    sw.add_argument("--dataset", help="dataset parameter file (params/<study>/datasets/*.yaml)")
    sw.add_argument("--model", action="append", dest="models", help="model parameter file; repeat for several")
    sw.add_argument("--limit", type=_count, help="score at most this many units per group (monotonicity: prompts per "
                                                 "concept and condition); stored beside full runs")
    sw.add_argument("--kernel", help="Jupyter kernel name (default: the notebooks' python3)")
    sw.add_argument("--n-boot", type=_count, help="bootstrap resamples in the analysis")
    sw.add_argument("--executor", choices=["local", "submitit-local", "slurm"],
                    help="where the score notebooks run: here one after the other (local, the default), or one job "
                         "array per sweep through submitit (slurm; submitit-local runs the same jobs on this machine); "
                         "the sweep file's `cluster:` block sets the jobs' resources and shards")
    sw.add_argument("--verbose", action="store_true", help="print full tracebacks of failed steps")
    rn = sub.add_parser("run", help="run one notebook, its -p names checked against its parameters cell first")
    rn.add_argument("notebook")
    rn.add_argument("output", nargs="?", help="executed copy (default: {run_dir}/notebooks/<name>.ipynb)")
    rn.add_argument("-p", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"), dest="params")
    rn.add_argument("-f", dest="param_file", help="YAML file of parameters")
    rn.add_argument("--kernel")
    mg = sub.add_parser("merge", help="join the shards of one model's scoring run")
    mg.add_argument("run_dir")
    mg.add_argument("slug", help="model slug, as in scores/{slug}.shard-I-of-N.parquet")
    mg.add_argument("--limit", type=_count, help="the limit of a limited sharded run")
    mg.add_argument("--overwrite", action="store_true")
    rp = sub.add_parser("report", help="write {run_dir}/report.html from the run's executed analysis (no code)")
    rp.add_argument("run_dir")
    rp.add_argument("--study", help="registered study (default: the one whose dataset the run holds)")
    sub.add_parser("studies", help="list the studies and the analyses of any run (the cue profile)")
    sub.add_parser("where", help="print the project root and where the shipped notebooks and parameter files are")
    cl = sub.add_parser("colab-links", help="point every notebook's Colab badge and setup cell at the repository set in "
                                            "nbutils/colab.py (a fork: set REPOSITORY there first, or pass --repository)")
    cl.add_argument("--repository", help="owner/name on GitHub (default: nbutils.colab.REPOSITORY)")
    cl.add_argument("--branch", help="branch the badges open (default: nbutils.colab.BRANCH)")
    _add_item_commands(sub)
    _add_import_command(sub)
    return parser


def _sweep(args) -> int:
    from .sweep import run_sweep

    report = run_sweep(args.sweep_file, args.run_dir, args.dataset, args.models, args.limit, args.kernel,
                       args.n_boot, study=args.study, verbose=args.verbose, executor=args.executor)
    print("\n".join(report.lines()))
    return 1 if report.failed else 0


def _run(args) -> int:
    from .artifacts import load_yaml
    from .model_files import resolve_params
    from .studies import params_of_notebook
    from .sweep import run_notebook

    params = resolve_params(load_yaml(args.param_file, None, "-f"), args.param_file) if args.param_file else {}
    params.update(_cli_params(args.notebook, args.params))
    _run_folder(args.notebook, params)
    out = run_notebook(args.notebook, args.output, params, args.kernel,
                       record=params_of_notebook(args.notebook))
    print(f"executed → {out}")
    _headline_after_analysis(args.notebook, args.output, params)
    return 0


def _report(args) -> int:
    from .report import write_report

    print(f"report → {write_report(args.run_dir, args.study, warn=_warn)}")
    return 0


def _studies(args) -> int:
    from .studies import listing

    print("\n".join(listing()))
    return 0


def _where(args) -> int:
    from . import paths

    print(f"root: {paths.root()}")
    print(f"shipped notebooks: {paths.shipped_copy('notebooks') or '-'}")
    print(f"shipped params: {paths.shipped_copy('params') or '-'}")
    return 0


def _colab_links(args) -> int:
    from . import colab, paths

    changed = colab.sync(paths.repo_root(), colab.REPOSITORY if args.repository is None else args.repository,
                         colab.BRANCH if args.branch is None else args.branch)
    print("\n".join(f"rewrote {p}" for p in changed) or "every badge and setup cell already points there")
    return 0


def _merge(args) -> int:
    from .runstore import merge_shards

    df, meta = merge_shards(args.run_dir, args.slug, limit=args.limit, overwrite=args.overwrite)
    print(f"merged {len(meta['merged_from'])} shards, {len(df)} rows → scores/{args.slug}.parquet")
    return 0


def _runs(args) -> int:
    from .report import index_lines

    return _print_lines(index_lines(args.dir))


COMMANDS = {"sweep": _sweep, "run": _run, "merge": _merge, "report": _report, "studies": _studies, "where": _where,
            "colab-links": _colab_links, "show": _show, "runs": _runs, "import": _import}


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code (1 when any model failed, 2 on a usage or input error)."""
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        # the notebook client's task for the cell that was running ends with "kernel died" once this process exits;
        # asyncio would log that as an unretrieved task exception: the one line printed above already says what happened
        import logging

        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        return 130
    except (ValueError, FileExistsError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001 - a failed notebook: its real error in one line
        from .sweep import error_line

        print(f"error: {error_line(err)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
