"""The README's figures, made from the shipped samples: each sample's accuracy by threshold (its analysis's Figure 1),
the models in the order they were scored, drawn as the analysis draws it (``plots.accuracy_grid``) and written with
the analysis's settings. Beside them, ``docs/img/figures.json`` records the sha256 of every sample file each figure was
made from, so a test can tell a figure made before its sample changed (``tests/test_readme_figures.py``).

    python scripts/readme_figures.py            # write docs/img/*.png and docs/img/figures.json
    python scripts/readme_figures.py --check    # exit 1 when a figure is not what this script makes now

Exit status 0: done (or, with --check, every figure up to date); 1: a figure out of date; 2: bad input.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = {"qwen_accuracy_by_threshold.png": "outputs/samples/qwen",
           "accuracy_by_threshold.png": "outputs/samples/monotonicity",
           "control_accuracy_by_threshold.png": "outputs/samples/control"}  # docs/img/<name> ← the sample it shows
RECORD = "figures.json"
TOLERANCE = 0.001  # share of pixels two renderings may differ in (by more than a tenth of full scale: anti-aliasing
# of another font version) and still count as equal; a panel's title written anew changes about 0.4%


def inputs(sample: str) -> dict[str, str]:
    """The sample's files a figure is made from (its dataset, score files and their sidecars), by sha256."""
    from nbutils import artifacts, paths

    run = ROOT / sample
    files = [run / "prompts.parquet", paths.sidecar(run / "prompts.parquet")]
    files += [f for side in paths.score_sidecars(run) for f in (side, side.with_suffix(".parquet"))]
    return {f.relative_to(ROOT).as_posix(): artifacts.sha256_file(f) for f in sorted(files)}


def figure(sample: str):
    """The sample's accuracy by threshold, its models in the order they were scored."""
    from nbutils.studies.common.model_comparison import scored_order
    from nbutils.studies.monotonicity import plots, stats
    from nbutils.studies.monotonicity.scores import load_scores

    run = ROOT / sample
    scores = load_scores(run)
    order = scored_order(run, scores["model"].unique(), scores.attrs.get("slugs"))
    acc = stats.accuracy_table(scores)
    acc = acc.sort_values("model", key=lambda s: s.map({m: i for i, m in enumerate(order)}), kind="stable")
    return plots.accuracy_grid(acc)


def write(folder: Path) -> list[Path]:
    """Every figure into ``folder`` (PNG, as the analysis writes it, without the writer's version in its metadata)
    and the record of their inputs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nbutils import artifacts

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, sample in FIGURES.items():
        fig = figure(sample)
        fig.savefig(folder / name, dpi=150, bbox_inches="tight", metadata={"Software": None})
        plt.close(fig)
        out.append(folder / name)
    artifacts.write_json({name: {"sample": sample, "inputs": inputs(sample)} for name, sample in FIGURES.items()},
                         folder / RECORD)
    return out + [folder / RECORD]


def differences(made: Path, shipped: Path) -> list[str]:
    """Why the figures in ``shipped`` are not the ones in ``made`` (this script's, just drawn): a sample changed since
    its figure was made (by the recorded sha256), or the images differ (size, or more than ``TOLERANCE`` of their pixels)."""
    import numpy as np
    from matplotlib.image import imread

    from nbutils import artifacts

    why = []
    record = artifacts.read_json(shipped / RECORD) if (shipped / RECORD).is_file() else {}
    for name, sample in FIGURES.items():
        if (record.get(name) or {}).get("inputs") != inputs(sample):
            why.append(f"{name}: {sample} changed since the figure was made (its files' sha256 differ from "
                       f"{RECORD}'s)")
        if not (shipped / name).is_file():
            why.append(f"{name}: missing from {shipped}")
            continue
        a, b = imread(made / name), imread(shipped / name)
        if a.shape != b.shape:
            why.append(f"{name}: {b.shape[1]}×{b.shape[0]} px, but the script draws {a.shape[1]}×{a.shape[0]}")
        elif (diff := float((np.abs(a.astype(float) - b.astype(float)).max(axis=2) > 0.1).mean())) > TOLERANCE:
            why.append(f"{name}: differs from what the script draws ({100 * diff:.2f}% of its pixels)")
    return why


def main(argv: list[str] | None = None) -> int:
    import tempfile

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="compare docs/img with a fresh drawing; write nothing")
    args = p.parse_args(argv)
    shipped = ROOT / "docs" / "img"
    if not args.check:
        for f in write(shipped):
            print(f"wrote {f.relative_to(ROOT)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        write(Path(tmp))
        why = differences(Path(tmp), shipped)
    print("\n".join(why) or "every README figure is what the script draws from its sample now")
    return 1 if why else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
