"""Sentence log-probability (causal) and pseudo-log-likelihood (masked) against naive references."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from nbutils.engine.sentences import (masked_copies, pll_rows, pll_token_logprobs, pseudo_logprobs,
                                      sentence_logprobs)

SENTENCES = ["The priest is truly honest.", "The priest is not sneaky.",
             "The housewife leaves the dishes in the sink for a week.", "Unbelievably, nobody came."]


@pytest.fixture(scope="module")
def tiny_bert():
    """A 2-layer BERT masked LM with a WordPiece tokenizer trained on the fly; no downloads."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(SENTENCES * 3, trainers.WordPieceTrainer(vocab_size=120, special_tokens=specials))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    fast = BertTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                             pad_token="[PAD]", mask_token="[MASK]")
    torch.manual_seed(2)
    cfg = BertConfig(vocab_size=len(fast), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=128)
    return BertForMaskedLM(cfg).eval(), fast


def naive_causal(model, tokenizer, sentence):
    ids = [tokenizer.bos_token_id] + tokenizer(sentence, add_special_tokens=False).input_ids
    out = []
    with torch.inference_mode():
        for k in range(1, len(ids)):
            logits = model(input_ids=torch.tensor([ids[:k]])).logits[0, -1]
            out.append(logits.log_softmax(-1)[ids[k]].item())
    return np.array(out)


def naive_pll(model, tokenizer, sentence, variant):
    ids, copies = masked_copies(tokenizer, sentence, variant)
    out = []
    with torch.inference_mode():
        for pos, masked in copies:
            inp = list(ids)
            for j in masked:
                inp[j] = tokenizer.mask_token_id
            logits = model(input_ids=torch.tensor([inp])).logits[0, pos]  # the full MLM head over every position
            out.append(logits.log_softmax(-1)[ids[pos]].item())
    return np.array(out)


@pytest.mark.parametrize("model_name", ["tiny_llama", "tiny_gpt2"])
def test_causal_sentence_logprob_matches_prefix_by_prefix_reference(request, tiny_tokenizer, model_name):
    model = request.getfixturevalue(model_name)
    df = sentence_logprobs(model, tiny_tokenizer, SENTENCES, batch_size=3)
    for row, s in zip(df.itertuples(), SENTENCES):
        ref = naive_causal(model, tiny_tokenizer, s)
        assert row.n_tokens == len(ref), "every token scored, the first one conditioned on BOS"
        assert np.abs(np.array(row.token_logprobs) - ref).max() < 1e-4
        assert row.sum_logprob == pytest.approx(ref.sum(), abs=1e-3)
        assert row.ppl == pytest.approx(np.exp(-ref.mean()), rel=1e-4)


@pytest.mark.parametrize("variant", ["original", "within_word_l2r"])
def test_pseudo_log_likelihood_matches_naive_reference(tiny_bert, variant):
    model, tok = tiny_bert
    df = pseudo_logprobs(model, tok, SENTENCES, variant=variant, batch_size=7)
    for row, s in zip(df.itertuples(), SENTENCES):
        ref = naive_pll(model, tok, s, variant)
        assert np.abs(np.array(row.token_logprobs) - ref).max() < 1e-4
        assert row.ppl == pytest.approx(np.exp(-ref.mean()), rel=1e-4)


def test_within_word_variant_masks_the_rest_of_the_word(tiny_bert):
    _, tok = tiny_bert
    ids, original = masked_copies(tok, "Dishonestly, nobody came.", "original")
    _, l2r = masked_copies(tok, "Dishonestly, nobody came.", "within_word_l2r")
    assert all(len(m) == 1 for _, m in original) and [p for p, _ in original] == [p for p, _ in l2r]
    pieces = tok.convert_ids_to_tokens(ids)
    first = next(i for i, t in enumerate(pieces) if t not in ("[CLS]", "[SEP]"))
    n_pieces = 1 + sum(1 for t in pieces[first + 1:] if t.startswith("##"))  # an unseen word: split by this vocab
    assert n_pieces > 1, pieces
    assert dict(l2r)[first] == list(range(first, first + n_pieces)), "its first piece masks the pieces after it"
    with pytest.raises(ValueError, match="^variant:"):
        masked_copies(tok, "x", "right_to_left")


def test_a_loaded_masked_lm_scores_a_run_with_its_copies_batched_as_the_settings_say(tmp_path, tiny_bert):
    from nbutils import studies
    from nbutils.engine import models, run as scoring
    from nbutils.studies.negation import dataset

    model, tok = tiny_bert
    folder = tmp_path / "bert"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    lm = models.load_model(str(folder), device="cpu", masked=True)  # a masked LM scores sentences
    assert lm.settings.scorer == "sentences" and lm.meta["rescore_margin"] == 0.0 and lm.reference is None
    df, params = dataset.build_stimuli(structures=["because"], max_roots=1)
    dataset.write_stimuli(df, tmp_path / "neg", params)
    scores, meta = scoring.score_run(tmp_path / "neg", lm, studies.get("negation").spec, batch_size=16, limit=1,
                                     progress=False)  # one item: its four sentences
    assert meta["sentence_scorer"] == "pseudo_perplexity" and meta["batch_rows"] == 16 and meta["settings"]["masked"]
    texts = df.set_index("stimulus_id").loc[scores["stimulus_id"], "sentence"].tolist()
    ref = pll_token_logprobs(lm.model, lm.tokenizer, pll_rows(lm.tokenizer, texts, "original"), 1)
    for got, want in zip(scores["token_logprobs"], ref):
        assert np.abs(np.asarray(got) - want).max() < 1e-5, "copies batched 16 a pass score as one by one"
