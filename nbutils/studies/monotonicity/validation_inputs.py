"""A validation study's run root checked before any seed is analysed, as a sweep is checked before it scores: only the
seeds asked for, each holding the ladder and the decoy at the same strengths, every score file's sidecar a record of
its own file (``scripts/validation.py`` checks its parameter file likewise before anything runs). Each refusal is a
ValueError naming the parameter, file or folder.
"""
from __future__ import annotations

from pathlib import Path

from ... import paths
from ...runstore import SidecarError, read_sidecar

NO_DECOY = (None, "", "none")


def adapter_name(adapter) -> str | None:
    """An adapter's folder name, what a ladder and its score files are matched by (None for no adapter)."""
    return Path(str(adapter)).name.rstrip("/") if isinstance(adapter, str) and adapter.strip() else None


def same_adapter(recorded, wanted: str) -> bool:
    """Whether a sidecar's recorded ``adapter`` is ``wanted`` (by folder name: the same adapter read from elsewhere)."""
    return adapter_name(recorded) is not None and adapter_name(recorded) == adapter_name(wanted)


def check_root(found: dict[int, Path], root, ladder_adapter: str, decoy_adapter: str | None,
               seeds=None) -> dict[int, Path]:
    """The runs the power notebook reads, by seed, checked before any is analysed (``found``: the root's runs by seed,
    ``validation.seed_runs``): the seeds asked for (``seeds``; None: every ``seed-<N>`` folder), each present; in
    each, every sidecar of the ladder's or the decoy's adapter a readable record of its own file
    (``runstore.misnamed``) with a number for its strength; the ladder in every seed and the decoy too when one is
    named; and the same arms and strengths in every seed (a strength seen in some seeds only has no rate across
    them)."""
    from ...runstore import misnamed

    if not isinstance(ladder_adapter, str) or not ladder_adapter.strip():
        raise ValueError(f"ladder_adapter: the adapter whose strengths make the ladder (a folder or its name), got "
                         f"{ladder_adapter!r}")
    if decoy_adapter is not None and not isinstance(decoy_adapter, str):
        raise ValueError(f"decoy_adapter: the decoy's adapter, or 'none', got {decoy_adapter!r}")
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
                meta = read_sidecar(side)
            except SidecarError as err:  # names the file, the key and what to score again
                raise ValueError(f"root: {err}") from None
            except ValueError as err:
                raise ValueError(f"root: {side} cannot be read ({err}); score that model again") from None
            adapter = meta.get("adapter")
            if isinstance(adapter, str) and adapter:
                recorded.add(adapter)
            arm = ("ladder" if same_adapter(adapter, ladder_adapter) else
                   "decoy" if decoy is not None and same_adapter(adapter, decoy) else None)
            if arm is None:
                continue
            why = misnamed(side, meta)  # the record has checked that adapter_scale is a number or null
            if why is not None:
                raise ValueError(f"root: {side}: {why}")
            arms.add((arm, paths.scale_of(meta.get("adapter_scale"))))
        for arm, adapter in (("ladder", ladder_adapter), ("decoy", decoy)):
            if adapter is not None and not any(a == arm for a, _ in arms):
                raise ValueError(f"{arm}_adapter: {run} holds no scores of {adapter!r}; its score files record the "
                                 f"adapters {sorted(recorded) or 'none'}"
                                 + ("; decoy_adapter='none' reads a study without a decoy" if arm == "decoy" else ""))
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
