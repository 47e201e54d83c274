"""Every input of the validation study checked before anything is scored or analysed, as a sweep is checked: the
parameter file of ``scripts/validation.py`` (its ``analyze`` block, the dataset at every seed, every model file as the
sweep reads it, one adapter for the whole ladder at distinct strengths and another for the decoy), and a run root as
the power notebook reads it (only the seeds asked for, each holding the ladder and the decoy at the same strengths,
every score file's sidecar describing its own file). Each refusal is a ValueError naming the key, file or folder.
"""
from __future__ import annotations

import numbers
from pathlib import Path

from ... import artifacts, paths

ANALYZE_KEYS = ("n_boot",)  # what the script passes on to each seed's analysis
NO_DECOY = (None, "", "none")


def _adapter_name(adapter) -> str | None:
    return Path(str(adapter)).name.rstrip("/") if isinstance(adapter, str) and adapter.strip() else None


def check_params(cfg: dict, source) -> None:
    """The validation's parameter file (``cfg`` as read, its keys and seeds already checked) before anything runs:
    ``analyze`` holds only ``ANALYZE_KEYS`` with values the analysis takes; the dataset file is checked against the
    generate notebook at every seed; every model file as the sweep checks it (``sweep.check_sweep``, which writes
    nothing); the ladder's files all name one adapter at distinct strengths, and the decoy another adapter."""
    import yaml

    from ...notebooks import check_parameters, load_yaml
    from ...studies import get
    from ...sweep import check_sweep
    from .params import MonotonicityParams

    analyze = cfg.get("analyze")
    if analyze is not None and not isinstance(analyze, dict):
        raise ValueError(f"analyze: must be a mapping (n_boot: …) in {source}, got {analyze!r}")
    unknown = sorted(set(analyze or {}) - set(ANALYZE_KEYS))
    if unknown:
        raise ValueError(f"analyze: {unknown} in {source} is not passed to the seeds' analyses; the block takes "
                         f"{list(ANALYZE_KEYS)}")
    try:
        MonotonicityParams.from_mapping(dict(analyze or {}))
    except ValueError as err:
        raise ValueError(f"analyze: {err} (in {source})") from None
    record = get("monotonicity")
    data = load_yaml(cfg["dataset"], None, "dataset")
    for seed in cfg["seeds"]:
        check_parameters(record.notebooks["generate"], dict(data, seed=seed), f"dataset {cfg['dataset']} at seed {seed}",
                         fixed=("run_dir",))
    root = paths.resolve(cfg["run_root"])
    check_sweep(run_dir=str(root / f"seed-{cfg['seeds'][0]}"), dataset=str(cfg["dataset"]), models=list(cfg["models"]),
                n_boot=(analyze or {}).get("n_boot"), study="monotonicity")
    strengths: dict[float, str] = {}
    ladder_adapter = None
    for m in cfg["ladder"]:
        p = yaml.safe_load(paths.resolve(m).read_text()) or {}
        name = _adapter_name(p.get("adapter"))
        if name is None:
            raise ValueError(f"ladder: {m} names no adapter; every file of the ladder is the control's adapter at "
                             "one strength (adapter_scale)")
        if ladder_adapter is not None and name != ladder_adapter[0]:
            raise ValueError(f"ladder: {m} names the adapter {p['adapter']!r} and {ladder_adapter[1]} "
                             f"{ladder_adapter[2]!r}; a ladder is one adapter at several strengths")
        ladder_adapter = ladder_adapter or (name, m, p["adapter"])
        scale = float(p.get("adapter_scale", 1.0))
        if scale in strengths:
            raise ValueError(f"ladder: {strengths[scale]} and {m} are both strength {scale:g}; give each strength once")
        strengths[scale] = m
    if cfg.get("decoy"):
        decoy = _adapter_name((yaml.safe_load(paths.resolve(cfg["decoy"]).read_text()) or {}).get("adapter"))
        if decoy is None or decoy == ladder_adapter[0]:
            raise ValueError(f"decoy: {cfg['decoy']} must name an adapter other than the ladder's ({ladder_adapter[2]!r})"
                             f"; it is read as the false-positive check beside it")


def check_root(root, ladder_adapter: str, decoy_adapter: str | None, seeds=None) -> dict[int, Path]:
    """The runs the power notebook reads, by seed, checked before any is analysed: the seeds asked for (``seeds``;
    None: every ``seed-<N>`` folder), each present; in each, every sidecar of the ladder's or the decoy's adapter a
    readable record of its own file (``score_reading.misnamed``) with a number for its strength; the ladder in every
    seed and the decoy too when one is named; and the same arms and strengths in every seed (a strength seen in some
    seeds only has no rate across them)."""
    from ...score_reading import misnamed
    from .validation import _same_adapter, seed_runs

    if not isinstance(ladder_adapter, str) or not ladder_adapter.strip():
        raise ValueError(f"ladder_adapter: the adapter whose strengths make the ladder (a folder or its name), got "
                         f"{ladder_adapter!r}")
    if decoy_adapter is not None and not isinstance(decoy_adapter, str):
        raise ValueError(f"decoy_adapter: the decoy's adapter, or 'none', got {decoy_adapter!r}")
    found = seed_runs(root)
    if seeds is not None:
        if (not isinstance(seeds, (list, tuple)) or not seeds
                or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds) or len(set(seeds)) != len(seeds)):
            raise ValueError(f"seeds: a list of distinct integers (the prompt seeds to read), got {seeds!r}")
        missing = [s for s in seeds if s not in found]
        if missing:
            raise ValueError(f"seeds: {paths.resolve(root)} holds no run of seed {missing[0]} (seed-{missing[0]}/ with "
                             f"prompts.parquet); it holds {sorted(found)}")
        found = {s: found[s] for s in seeds}
    decoy = None if decoy_adapter in NO_DECOY else decoy_adapter
    arms_of: dict[int, set] = {}
    for seed, run in found.items():
        arms, recorded = set(), set()
        for side in paths.score_sidecars(run):
            try:
                meta = artifacts.read_json(side)
            except ValueError as err:
                raise ValueError(f"root: {side} cannot be read ({err}); score that model again") from None
            adapter = meta.get("adapter")
            if isinstance(adapter, str) and adapter:
                recorded.add(adapter)
            arm = ("ladder" if _same_adapter(adapter, ladder_adapter) else
                   "decoy" if decoy is not None and _same_adapter(adapter, decoy) else None)
            if arm is None:
                continue
            scale = meta.get("adapter_scale")
            if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)):
                raise ValueError(f"root: {side} records adapter_scale {scale!r}, not a number; score that model again")
            why = misnamed(side, meta)
            if why is not None:
                raise ValueError(f"root: {side}: {why}")
            arms.add((arm, 1.0 if scale is None else float(scale)))
        for arm, adapter in (("ladder", ladder_adapter), ("decoy", decoy)):
            if adapter is not None and not any(a == arm for a, _ in arms):
                raise ValueError(f"{arm}_adapter: {run} holds no scores of {adapter!r}; its score files record the "
                                 f"adapters {sorted(recorded) or 'none'}")
        arms_of[seed] = arms
    first, want = next(iter(arms_of.items()))
    for seed, arms in arms_of.items():
        if arms != want:
            odd = sorted(arms ^ want)[0]
            where, other = (seed, first) if odd in arms else (first, seed)
            raise ValueError(f"root: the {odd[0]} at strength {odd[1]:g} was scored in seed {where} and not in seed "
                             f"{other}; every seed needs the same models (score the missing one, or leave that seed "
                             "out with seeds)")
    return found
