"""Review fixes in model loading: scorer/architecture mismatches, slug collisions, the re-scoring margin actually used."""
from __future__ import annotations

import shutil

import pytest

from nbutils import paths
from nbutils.engine import models
from nbutils.score_settings import DEFAULT_MODEL


@pytest.fixture(scope="module")
def tiny_bert_dir(tmp_path_factory, tiny_tokenizer):
    from transformers import BertConfig, BertForMaskedLM

    d = tmp_path_factory.mktemp("tiny-bert")
    cfg = BertConfig(vocab_size=len(tiny_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                     num_attention_heads=4, max_position_embeddings=512)
    BertForMaskedLM(cfg).save_pretrained(d)
    tiny_tokenizer.save_pretrained(d)
    return d


def test_masked_lm_given_to_the_causal_scorer_is_an_error(tiny_bert_dir):
    with pytest.raises(ValueError, match=r"^model: this is a masked LM \(bert"):
        models.load_model(str(tiny_bert_dir), device="cpu")


def test_causal_lm_given_to_the_masked_scorer_is_an_error(tiny_model_dir):
    with pytest.raises(ValueError, match="^masked: True needs a masked LM"):
        models.load_model(str(tiny_model_dir), device="cpu", masked=True)
    with pytest.raises(ValueError, match="^masked: True needs a masked LM"):
        models.load_model(DEFAULT_MODEL, masked=True)


def test_two_local_folders_with_the_same_name_get_different_slugs(tmp_path, tiny_model_dir):
    a, b = tmp_path / "x" / "my-model", tmp_path / "y" / "my-model"
    shutil.copytree(tiny_model_dir, a)
    shutil.copytree(tiny_model_dir, b)
    sa, sb = paths.model_slug(str(a)), paths.model_slug(str(b))
    assert sa != sb and sa.startswith("my-model-") and sb.startswith("my-model-")
    assert paths.model_slug(str(a)) == sa, "stable for the same folder"
    assert paths.model_slug("allenai/OLMo-2-1124-13B-Instruct") == "allenai--OLMo-2-1124-13B-Instruct"


def test_a_folder_in_the_project_is_named_by_its_place_there_in_every_checkout(tmp_path, monkeypatch):
    import hashlib

    slugs = []
    for checkout in ("one", "two"):
        folder = tmp_path / checkout / "adapters" / "a-lora"
        folder.mkdir(parents=True)
        monkeypatch.setenv("NBUTILS_ROOT", str(tmp_path / checkout))
        slugs.append(paths.model_slug(str(folder)))
    assert slugs[0] == slugs[1] == "a-lora-" + hashlib.sha256(b"adapters/a-lora").hexdigest()[:8]


def test_the_rescore_margin_actually_used_is_recorded_and_said(tiny_model_dir, capsys):
    lm = models.load_model(str(tiny_model_dir), device="cpu", dtype="float32", rescore_margin=0.5)
    assert lm.meta["rescore_margin"] == 0.0 and lm.meta["rescore_margin_requested"] == 0.5
    assert "already float32" in lm.meta["rescore_margin_note"]
    assert "rescore_margin: 0.5 requested, 0 used" in capsys.readouterr().out
    with pytest.raises(ValueError, match="^rescore_margin:"):
        models.load_model(str(tiny_model_dir), device="cpu", rescore_margin=-1)
