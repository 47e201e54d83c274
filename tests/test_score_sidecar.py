"""A score file's sidecar is one typed, versioned record (``score_sidecar.ScoreSidecar``): every sidecar written (a
finished file, a checkpoint, the shipped samples) validates against the JSON Schema shipped as package data, which is
the record's own; a key the record does not know, or a value of the wrong kind, is refused before anything is written;
a sidecar written before the layout was versioned is read as it was meant, or refused with a message that says what to
score again (never a KeyError), and so is one of another version."""
from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from nbutils import artifacts, paths, runstore, studies
from nbutils.runstore import SCHEMA_VERSION, ScoreSidecar, SidecarError, _sidecar as score_sidecar
from nbutils.score_settings import IDENTITY_KEYS
from simulated_runs import simulated_run

jsonschema = pytest.importorskip("jsonschema")

ROOT = paths.repo_root()
SHIPPED = ROOT / "nbutils" / "schemas" / "score_sidecar.schema.json"
SAMPLE_SIDECARS = sorted((ROOT / "outputs" / "samples").rglob("scores/*.json"))
SPEC = studies.get("monotonicity").spec


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(SHIPPED.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def problems(validator, obj) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run with two score files written as the score notebook writes them."""
    return simulated_run(tmp_path_factory.mktemp("sidecar"), {"a": lambda p: p["label"], "b": lambda p: ~p["label"]})


def test_the_shipped_schema_is_the_records_own_and_is_package_data():
    assert json.loads(SHIPPED.read_text()) == score_sidecar.json_schema(), (
        "nbutils/schemas/score_sidecar.schema.json differs from score_sidecar.json_schema(); write it out again")
    assert '"schemas/*.json"' in (ROOT / "pyproject.toml").read_text()
    schema = score_sidecar.json_schema()
    assert set(schema["properties"]) == {"schema_version", *score_sidecar.KEYS}
    assert [k for k in score_sidecar.IDENTITY_KINDS] == list(IDENTITY_KEYS)


@pytest.mark.parametrize("side", SAMPLE_SIDECARS, ids=lambda p: str(p.relative_to(ROOT / "outputs" / "samples")))
def test_every_shipped_sidecar_validates_and_reads_back_as_written(validator, side):
    written = json.loads(side.read_text())
    assert written["schema_version"] == SCHEMA_VERSION
    assert problems(validator, written) == []
    record = score_sidecar.read(side)
    assert record.to_json() == written and dict(record) == written
    assert record.identity.model == written["model"] and record["scores_sha256"] == written["scores_sha256"]


def test_score_files_and_checkpoints_are_written_through_the_record(validator, run, tmp_path):
    sides = paths.score_sidecars(run)
    assert len(sides) == 2
    for side in sides:
        assert problems(validator, json.loads(side.read_text())) == []
    meta = score_sidecar.read(sides[0])
    files = runstore.ScoreFiles(tmp_path, "a")
    files.checkpoint(["p0", "p1"], {0: {"logp_yes": -1.0}}, dict(meta, n_done=1, n_planned=2))
    partial = json.loads(paths.sidecar(files.partial).read_text())
    assert partial["complete"] is False and partial["n_done"] == 1 and problems(validator, partial) == []


@pytest.mark.parametrize("change, said", [
    ({"colour": "blue"}, r"^colour: not a key of a score sidecar \(ScoreSidecar\); the keys are \["),
    ({"n_parameters": "135M"}, r"^n_parameters: must be null or an integer in a score sidecar, got '135M'"),
    ({"num_shards": None}, r"^num_shards: must be an integer in a score sidecar, got None"),
    ({"complete": "yes"}, r"^complete: must be true or false in a score sidecar, got 'yes'"),
    ({"schema_version": 99}, r"^schema_version: this suite writes score sidecars of schema_version 1, got 99"),
])
def test_a_key_it_does_not_know_or_a_wrong_kind_is_refused_before_anything_is_written(run, tmp_path, change, said):
    meta = dict(score_sidecar.read(paths.score_sidecars(run)[0]), **change)
    with pytest.raises(ValueError, match=said):
        ScoreSidecar.of(meta)
    df = pd.read_parquet(paths.score_sidecars(run)[0].with_suffix(".parquet"))
    with pytest.raises(ValueError, match=said):
        runstore.write_scores(df, meta, tmp_path / "x.parquet")
    assert list(tmp_path.iterdir()) == []


def _older(run, tmp_path, drop=(), **edit):
    """A copy of ``run`` whose first score file's sidecar is written as before the layout was versioned."""
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    side = paths.score_sidecars(copy)[0]
    meta = {k: v for k, v in json.loads(side.read_text()).items() if k not in ("schema_version", *drop)}
    artifacts.write_json(dict(meta, **edit), side)
    return copy, side


def test_an_older_sidecar_is_read_as_it_was_meant(run, tmp_path):
    copy, side = _older(run, tmp_path, drop=("num_shards", "shard_index", "adapter_scale", "limit_seed"),
                        retired_key="a key no longer recorded")
    record = score_sidecar.read(side)
    assert (record["num_shards"], record["shard_index"], record["adapter_scale"], record["limit_seed"]) == (1, 0, None, 0)
    assert "retired_key" not in record
    assert set(runstore.load_scores(copy, SPEC)["slug"]) == {"a", "b"}


@pytest.mark.parametrize("drop", [("id_column",), ("dataset_sha256", "complete")])
def test_an_older_sidecar_without_a_key_it_needs_says_what_to_score_again(run, tmp_path, drop):
    copy, side = _older(run, tmp_path, drop=drop)
    with pytest.raises(SidecarError, match=rf"{side.name} was written by an older version of the suite and lacks "
                                           rf"{', '.join(drop)} .*score that model again into this run"):
        score_sidecar.read(side)
    inventory = runstore.score_inventory(copy, SPEC)
    row = inventory.set_index("model").loc[side.stem]
    assert row["status"] == "unreadable" and "score that model again" in row["why"]
    scores = runstore.load_scores(copy, SPEC)
    assert set(scores["slug"]) == {"b"}
    assert any(n.startswith(f"not analysed: {side.name} is an unreadable sidecar (") and "lacks" in n
               for n in runstore.excluded_notes(scores))


@pytest.mark.parametrize("version", [2, "1", 0.5])
def test_a_sidecar_of_another_version_or_a_wrong_value_is_refused_by_name(run, tmp_path, version):
    copy, side = _older(run, tmp_path, schema_version=version)
    with pytest.raises(SidecarError, match=rf"{side.name} has schema_version {version!r}; .*score that model again"):
        score_sidecar.read(side)
    copy2, side2 = _older(run, tmp_path / "2", schema_version=SCHEMA_VERSION, n_rows="many")
    with pytest.raises(SidecarError, match=r"n_rows: must be an integer in a score sidecar, got 'many'; score that model"):
        score_sidecar.read(side2)


def test_the_record_reads_as_the_flat_mapping_of_its_file(run):
    record = score_sidecar.read(paths.score_sidecars(run)[0])
    assert record.get("calibration_rule") is None and "calibration_rule" not in record
    assert record.get("model") == record.identity.model == "a"
    with pytest.raises(KeyError):
        record["merged_from"]
    assert record.replace(label="A", limit=3).to_json() == dict(record.to_json(), label="A", limit=3)
    said = record.describe().splitlines()
    assert said[:2] == [f"score sidecar (schema_version {SCHEMA_VERSION})",
                        "identity (what must match for two score files to be the same scoring):"]
    assert [ln.split(":")[0].strip() for ln in said[2:2 + len(IDENTITY_KEYS)]] == list(IDENTITY_KEYS)
    assert {ln.split(":")[0].strip() for ln in said[3 + len(IDENTITY_KEYS):]} == set(record) - {"schema_version",
                                                                                               *IDENTITY_KEYS}
    assert "  model: 'a'" in said and f"  n_rows: {record['n_rows']}" in said
    pretty = pytest.importorskip("IPython.lib.pretty")
    assert pretty.pretty(record) == record.describe(), "a notebook cell shows the record as describe says it"
