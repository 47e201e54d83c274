"""Command line: `python -m nbutils sweep params/demo.yaml` and `python -m nbutils merge RUN_DIR MODEL_SLUG`."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code (1 when any model failed)."""
    parser = argparse.ArgumentParser(prog="nbutils", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sw = sub.add_parser("sweep", help="generate once, score every model, analyze (papermill)")
    sw.add_argument("sweep_file", nargs="?", help="YAML with run_dir, dataset, models, analyze (e.g. params/demo.yaml)")
    sw.add_argument("--run-dir", help="override the sweep file's run_dir")
    sw.add_argument("--dataset", help="dataset parameter file (params/datasets/*.yaml)")
    sw.add_argument("--model", action="append", dest="models", help="model parameter file; repeat for several")
    sw.add_argument("--limit", type=int, help="score at most this many prompts per concept and condition")
    sw.add_argument("--kernel", help="Jupyter kernel name (default: the notebooks' python3)")
    sw.add_argument("--n-boot", type=int, help="bootstrap resamples in the analysis")
    mg = sub.add_parser("merge", help="join the shards of one model's scoring run")
    mg.add_argument("run_dir")
    mg.add_argument("slug", help="model slug, as in scores/{slug}.shard-I-of-N.parquet")
    mg.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.command == "sweep":
            from .sweep import run_sweep

            report = run_sweep(args.sweep_file, args.run_dir, args.dataset, args.models, args.limit, args.kernel, args.n_boot)
            print("\n".join(report.lines()))
            return 1 if report.failed else 0
        from .runs import merge_shards

        df, meta = merge_shards(args.run_dir, args.slug, overwrite=args.overwrite)
        print(f"merged {len(meta['merged_from'])} shards, {len(df)} prompts → scores/{args.slug}.parquet")
        return 0
    except (ValueError, FileExistsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
