"""Sentences: causal log-probability per token (first token conditioned on BOS) and masked-LM pseudo-log-likelihood."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ..score_settings import PLL_VARIANTS, check_choice
from ..spec import DatasetSpec
from .batching import model_device, pack_batches, right_pad, with_oom_halving


def _bos_id(tokenizer) -> int:
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if bos is None:
        raise ValueError("tokenizer: has neither a BOS nor an EOS token to condition the first token on")
    return bos


def sentence_frame(sentences: Sequence[str] | None, token_logps: list[np.ndarray]) -> "pd.DataFrame":
    """Per sentence: tokens scored, summed and mean log-probability, perplexity, and the token log-probs."""
    import pandas as pd

    sums = np.array([lp.sum() for lp in token_logps])
    counts = np.array([len(lp) for lp in token_logps])
    mean = sums / np.maximum(counts, 1)
    head = {} if sentences is None else {"sentence": list(sentences)}
    return pd.DataFrame({**head, "n_tokens": counts, "sum_logprob": sums, "mean_logprob": mean,
                         "ppl": np.exp(-mean), "token_logprobs": [np.asarray(lp, dtype=np.float64) for lp in token_logps]})


def causal_sequences(tokenizer, sentences: Sequence[str]) -> list[list[int]]:
    """Each sentence's token ids after BOS (BOS conditions the first token)."""
    bos = _bos_id(tokenizer)
    return [[bos] + list(tokenizer(s, add_special_tokens=False).input_ids) for s in sentences]


@torch.inference_mode()
def causal_token_logprobs(model, seqs: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """Per-token log-probabilities of each sequence after its first token, one right-padded forward pass."""
    dev = model_device(model)
    ids, mask = right_pad(seqs, 0)
    logits = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), use_cache=False).logits
    logp = logits[:, :-1].float().log_softmax(-1).gather(-1, ids[:, 1:, None].to(dev))[..., 0].cpu().numpy()
    return [logp[row, : len(s) - 1].astype(np.float64) for row, s in enumerate(seqs)]


def sentence_logprobs(model, tokenizer, sentences: Sequence[str], batch_size: int = 16) -> "pd.DataFrame":
    """Causal LM: per-token log-probabilities of each sentence, the first token conditioned on BOS; sum, mean, perplexity."""
    seqs = causal_sequences(tokenizer, sentences)
    out: list[np.ndarray] = [np.zeros(0)] * len(seqs)
    for batch in pack_batches([len(s) for s in seqs], batch_size):
        for i, lp in zip(batch, causal_token_logprobs(model, [seqs[i] for i in batch])):
            out[i] = lp
    return sentence_frame(sentences, out)




def _mlm_head(model):
    """The masked-LM head as a function of hidden states, so it runs on masked positions only (None: unknown)."""
    if hasattr(model, "cls"):  # BERT family
        return model.cls
    if hasattr(model, "lm_head"):  # RoBERTa, XLM-R, DeBERTa-v2 style
        return model.lm_head
    if hasattr(model, "head") and hasattr(model, "decoder"):  # ModernBERT
        return lambda h: model.decoder(model.head(h))
    if hasattr(model, "vocab_projector"):  # DistilBERT
        return lambda h: model.vocab_projector(model.vocab_layer_norm(model.activation(model.vocab_transform(h))))
    return None


def masked_copies(tokenizer, sentence: str, variant: str = "original") -> tuple[list[int], list[tuple[int, list[int]]]]:
    """Token ids with special tokens, and per scored token (position, positions to mask).

    ``original`` masks the one token (Salazar et al. 2020); ``within_word_l2r`` also masks the tokens to its right
    in the same word (Kauf & Ivanova 2023), so a word's later pieces cannot give its earlier ones away.
    """
    check_choice("variant", variant, PLL_VARIANTS)
    enc = tokenizer(sentence, return_special_tokens_mask=True)
    ids, special, words = enc["input_ids"], enc["special_tokens_mask"], enc.word_ids()
    copies = []
    for i, tok in enumerate(ids):
        if special[i]:
            continue
        masked = [i]
        if variant == "within_word_l2r" and words[i] is not None:
            masked += [j for j in range(i + 1, len(ids)) if words[j] == words[i] and not special[j]]
        copies.append((i, masked))
    return list(ids), copies


def pll_rows(tokenizer, sentences: Sequence[str], variant: str = "original") -> list[list[tuple[list[int], int, int]]]:
    """Per sentence, its masked copies as (masked input ids, target position, target id)."""
    if tokenizer.mask_token_id is None:
        raise ValueError("model: pseudo-log-likelihood needs a masked LM whose tokenizer has a mask token")
    out = []
    for s in sentences:
        ids, copies = masked_copies(tokenizer, s, variant)
        rows = []
        for pos, masked in copies:
            inp = list(ids)
            for j in masked:
                inp[j] = tokenizer.mask_token_id
            rows.append((inp, pos, ids[pos]))
        out.append(rows)
    return out


@torch.inference_mode()
def pll_token_logprobs(model, tokenizer, copies: Sequence[Sequence[tuple[list[int], int, int]]],
                       batch_size: int = 64) -> list[np.ndarray]:
    """Log-probability of each masked token for every sentence's copies (``pll_rows``), ``batch_size`` copies a pass."""
    head = _mlm_head(model)
    base = model.base_model if head is not None else None
    dev = model_device(model)
    flat = [(s_idx, *c) for s_idx, cs in enumerate(copies) for c in cs]
    token_lps: list[list[float]] = [[] for _ in copies]
    pad = tokenizer.pad_token_id or 0
    for start in range(0, len(flat), batch_size):
        chunk = flat[start: start + batch_size]
        ids, mask = right_pad([r[1] for r in chunk], pad)
        ids, mask = ids.to(dev), mask.to(dev)
        pos = torch.tensor([r[2] for r in chunk], device=dev)
        tgt = torch.tensor([r[3] for r in chunk], device=dev)
        arange = torch.arange(len(chunk), device=dev)
        if head is not None:
            hidden = base(input_ids=ids, attention_mask=mask).last_hidden_state[arange, pos]
            logits = head(hidden)
        else:
            logits = model(input_ids=ids, attention_mask=mask).logits[arange, pos]
        lp = logits.float().log_softmax(-1).gather(-1, tgt[:, None])[:, 0].cpu().numpy()
        for k, r in enumerate(chunk):
            token_lps[r[0]].append(float(lp[k]))
    return [np.array(t) for t in token_lps]


def pseudo_logprobs(model, tokenizer, sentences: Sequence[str], variant: str = "original",
                    batch_size: int = 64) -> "pd.DataFrame":
    """Masked LM: pseudo-log-likelihood per sentence (sum of each token's log-prob when masked), batched over copies."""
    return sentence_frame(sentences, pll_token_logprobs(model, tokenizer, pll_rows(tokenizer, sentences, variant),
                                                        batch_size))


class SentenceScorer:
    """Sentences as a ``scorer.Scorer``: causal LMs give each token's log-probability (the first conditioned on BOS),
    masked LMs (``lm.meta["masked"]``) pseudo-log-likelihood with the settings' ``pll_variant`` masking. The batch
    plan's rows are sentences per pass (causal) or masked copies per pass (masked); see ``batching.batch_policy``."""

    kind = "sentences"

    def __init__(self, lm, data, spec: DatasetSpec, settings):
        self.model, self.tokenizer, self.spec, self.settings = lm.model, lm.tokenizer, spec, settings
        self.ids = data[spec.id_column].tolist()
        self.masked = bool(lm.meta.get("masked"))
        self.size = settings.batch_plan(self.kind)[0]
        texts = data[spec.text_column].tolist()
        pll_variant = settings.pll_variant
        if self.masked:
            self.copies = pll_rows(lm.tokenizer, texts, pll_variant)
            self.lengths = [len(c) for c in self.copies]
        else:
            self.seqs = causal_sequences(lm.tokenizer, texts)
            self.lengths = [len(s) for s in self.seqs]
        self.meta = {"pll_variant": pll_variant if self.masked else None, "used_chat_template": None,
                     "options_sha256": None, "sentence_scorer": "pseudo_perplexity" if self.masked else "perplexity"}

    def input_lengths(self) -> list[int]:
        """Tokens of each sentence (or of its masked copies' input) as the model sees it."""
        if self.masked:
            return [len(c[0][0]) if c else 0 for c in self.copies]
        return list(self.lengths)

    def plan(self, batch: tuple[int, int | None] | None = None) -> list[list[int]]:
        """The batches of ``batch`` (rows per pass; a token budget does not apply), by default the settings' plan."""
        self.size = (batch or self.settings.batch_plan(self.kind))[0]
        if not self.masked:
            return pack_batches(self.lengths, self.size)
        batches, cur, used = [], [], 0  # masked: sentences whose copies fill at most `size` rows per pass
        for i in sorted(range(len(self.lengths)), key=lambda i: (-self.lengths[i], i)):
            if cur and used + self.lengths[i] > self.size:
                batches.append(cur)
                cur, used = [], 0
            cur.append(i)
            used += self.lengths[i]
        return batches + ([cur] if cur else [])

    def run(self, batches: list[list[int]], record, progress=True) -> None:
        from .choices import progress_bar

        for batch in progress_bar(batches, progress is True):
            if self.masked:
                lps = pll_token_logprobs(self.model, self.tokenizer, [self.copies[i] for i in batch], self.size)
            else:
                lps = with_oom_halving(lambda b: causal_token_logprobs(self.model, [self.seqs[i] for i in b]), batch)
            if callable(progress):
                progress(len(batch))
            record({i: {"token_logprobs": lp} for i, lp in zip(batch, lps)})

    def frame(self, rows: list[int], records: dict):
        df = sentence_frame(None, [np.asarray(records[i]["token_logprobs"], dtype=np.float64) for i in rows])
        df.insert(0, self.spec.id_column, [self.ids[i] for i in rows])
        return df
