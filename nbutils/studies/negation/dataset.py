"""Negation-bias probe (Wang, Sommerauer and Bloem): 2×2 stimuli (context × form) from the shipped roots or a user's CSV.

RESEARCH STIMULI. The shipped roots state social stereotypes on purpose, so that a model's sensitivity to them can
be measured. They are not claims about any group.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

import pandas as pd

from ... import artifacts
from ...paths import dataset_path, resolve

ROOT_COLUMNS = ["root_id", "category", "source_idea", "consistent_actor", "consistent_synonym", "inconsistent_actor",
                "inconsistent_synonym", "consistent_behaviour", "inconsistent_behaviour", "consistent_trait",
                "consistent_antonym", "inconsistent_trait", "inconsistent_antonym", "adverb"]
STRUCTURES = {  # the paper's four sentence structures; B = behaviour clause, D = description clause
    "because": "{Actor} {behaviour} because {actor} is {description}.",
    "who": "{Actor}, who {behaviour}, is {description}.",
    "which_means": "{Actor} {behaviour}, which means {actor} is {description}.",
    "thats_why": "{Actor} is {description}, that's why {actor} {behaviour}.",
}
CONDITIONS = {("consistent", "affirmative"): "SA", ("consistent", "negated"): "SN",
              ("inconsistent", "affirmative"): "NA", ("inconsistent", "negated"): "NN"}
STIMULUS_COLUMNS = ["item_id", "context", "form", "sentence"]


def load_roots(path: str | Path | None = None) -> pd.DataFrame:
    """The shipped root items (or a CSV with the same columns)."""
    if path is None:
        with resources.files(__package__).joinpath("data/negation_roots.csv").open() as f:
            roots = pd.read_csv(f, dtype=str)
    else:
        roots = pd.read_csv(resolve(path), dtype=str)
    missing = [c for c in ROOT_COLUMNS if c not in roots.columns]
    if missing:
        raise ValueError(f"roots: missing columns {missing}; required: {ROOT_COLUMNS}")
    return roots


def expand_stimuli(roots: pd.DataFrame | None = None, structures=tuple(STRUCTURES), synonyms: bool = True) -> pd.DataFrame:
    """Roots × group-label variants (original, synonym) × sentence structures → items, each in the four cells."""
    roots = load_roots() if roots is None else roots
    bad = [s for s in structures if s not in STRUCTURES]
    if bad:
        raise ValueError(f"structures: unknown {bad}; allowed: {list(STRUCTURES)}")
    rows = []
    for r in roots.itertuples(index=False):
        variants = [("original", r.consistent_actor, r.inconsistent_actor)]
        if synonyms:
            variants.append(("synonym", r.consistent_synonym, r.inconsistent_synonym))
        for label, c_actor, i_actor in variants:
            for structure in structures:
                item_id = f"{r.root_id}-{label}-{structure}"
                for context, actor, behaviour, trait, antonym in (
                        ("consistent", c_actor, r.consistent_behaviour, r.consistent_trait, r.consistent_antonym),
                        ("inconsistent", i_actor, r.inconsistent_behaviour, r.inconsistent_trait, r.inconsistent_antonym)):
                    for form, description in (("affirmative", f"{r.adverb} {trait}"), ("negated", f"not {antonym}")):
                        text = STRUCTURES[structure].format(Actor=f"The {actor}", actor=f"the {actor}",
                                                            behaviour=behaviour, description=description)
                        rows.append({"item_id": item_id, "root_id": r.root_id, "category": r.category,
                                     "label_variant": label, "structure": structure, "context": context, "form": form,
                                     "condition": CONDITIONS[(context, form)], "sentence": text})
    return pd.DataFrame(rows)


def load_stimuli_csv(path: str | Path) -> pd.DataFrame:
    """A user-supplied stimulus CSV (item_id, context, form, sentence); every item needs all four cells."""
    p = resolve(path)
    if not p.exists():
        raise ValueError(f"stimuli_csv: {p} does not exist")
    raw = p.read_bytes()
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise ValueError(f"stimuli_csv: {p} is not UTF-8 text (byte {err.start}, line {line}); save it as UTF-8") from None
    if not raw.strip():
        raise ValueError(f"stimuli_csv: {p} is empty; it needs a header row ({', '.join(STIMULUS_COLUMNS)}) and stimuli")
    df = pd.read_csv(p, dtype=str, encoding="utf-8", keep_default_na=False)
    missing = [c for c in STIMULUS_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"stimuli_csv: {p} lacks columns {missing}; required: {STIMULUS_COLUMNS}")
    if df.empty:
        raise ValueError(f"stimuli_csv: {p} has a header but no stimuli")
    blank = df.index[df["item_id"].str.strip() == ""]
    if len(blank):
        raise ValueError(f"stimuli_csv: row {blank[0] + 2} of {p} has a blank item_id")
    for col, allowed in (("context", {"consistent", "inconsistent"}), ("form", {"affirmative", "negated"})):
        bad = df.index[~df[col].isin(allowed)]
        if len(bad):
            raise ValueError(f"stimuli_csv: row {bad[0] + 2} has {col}={df.loc[bad[0], col]!r}; allowed: {sorted(allowed)}")
    empty = df.index[df["sentence"].fillna("").str.strip() == ""]
    if len(empty):
        raise ValueError(f"stimuli_csv: row {empty[0] + 2} has an empty sentence")
    dup = df.index[df.duplicated(["item_id", "context", "form"], keep="first")]
    if len(dup):
        raise ValueError(f"stimuli_csv: row {dup[0] + 2} repeats item {df.loc[dup[0], 'item_id']!r} "
                         f"({df.loc[dup[0], 'context']}, {df.loc[dup[0], 'form']})")
    counts = df.groupby("item_id", sort=False).size()
    incomplete = counts[counts != 4]
    if len(incomplete):
        item = incomplete.index[0]
        row = int(df.index[df["item_id"] == item][0]) + 2
        raise ValueError(f"stimuli_csv: item {item!r} (first at row {row}) has {incomplete.iloc[0]} of the 4 cells "
                         "(consistent/inconsistent × affirmative/negated)")
    df["root_id"] = df["root_id"].where(df["root_id"].str.strip() != "", df["item_id"]) if "root_id" in df else df["item_id"]
    df["condition"] = [CONDITIONS[(c, f)] for c, f in zip(df["context"], df["form"])]
    return df


def with_ids(df: pd.DataFrame) -> pd.DataFrame:
    """The stimuli with ``stimulus_id`` (item | context | form) as their first column: the key score files use."""
    ids = df["item_id"].astype(str) + "|" + df["context"] + "|" + df["form"]
    return df.drop(columns=["stimulus_id"], errors="ignore").assign(stimulus_id=ids.to_numpy())[
        ["stimulus_id", *[c for c in df.columns if c != "stimulus_id"]]]


def build_stimuli(stimuli_csv=None, structures=tuple(STRUCTURES), synonyms: bool = True,
                  max_roots: int | None = None) -> tuple[pd.DataFrame, dict]:
    """The stimulus set and the parameters that made it (a user CSV's sha256 included, so an edit is noticed)."""
    if max_roots is not None and (isinstance(max_roots, bool) or not isinstance(max_roots, int) or max_roots < 1):
        raise ValueError(f"max_roots: must be None or a positive integer, got {max_roots!r}")
    bad = [s for s in structures if s not in STRUCTURES]
    if bad or not structures:
        raise ValueError(f"structures: must be a non-empty list of {list(STRUCTURES)}, got {list(structures)!r}")
    parameters = dict(stimuli_csv=stimuli_csv, structures=list(structures), synonyms=bool(synonyms), max_roots=max_roots)
    if stimuli_csv:
        df = load_stimuli_csv(stimuli_csv)
        parameters["stimuli_csv_sha256"] = artifacts.sha256_file(resolve(stimuli_csv))
    else:
        roots = load_roots()
        df = expand_stimuli(roots.head(max_roots) if max_roots else roots, structures, synonyms)
    return with_ids(df), parameters


def write_stimuli(df: pd.DataFrame, run_dir, parameters: dict, overwrite: bool = False) -> dict:
    """``{run_dir}/stimuli.parquet`` + sidecar; refuses to replace a different stimulus set."""
    return artifacts.write_dataset(df, dataset_path(run_dir, "stimuli.parquet"), {"parameters": parameters}, overwrite)
