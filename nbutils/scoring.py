"""The likelihood engine: answer log-probabilities with one forward pass, sentence log-probs, pseudo-log-likelihood."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

ANSWERS = ("Yes", "No")
CHAT_TEMPLATE_MODES = ("auto", "always", "never")


@dataclass
class Requests:
    """Tokenized prompts and answer continuations, ready for the engine."""

    prompt_ids: list[list[int]]
    answer_ids: list[list[int]]
    answer_strings: tuple[str, ...]
    used_chat_template: bool
    pad_id: int

    @property
    def single_token(self) -> bool:
        """True when every answer is one token, so one forward pass per prompt scores all answers."""
        return all(len(a) == 1 for a in self.answer_ids)


def render_chat(tokenizer, text: str) -> str:
    """``text`` as the single user message in the model's own template, with the generation prompt.

    ``enable_thinking=False`` switches Qwen3's reasoning block off; other templates ignore it.
    """
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         tokenize=False, enable_thinking=False)


def _no_double_bos(ids: list[int], bos_id: int | None) -> list[int]:
    return ids[1:] if bos_id is not None and len(ids) > 1 and ids[0] == ids[1] == bos_id else ids


def build_requests(tokenizer, texts: Sequence[str], chat_template: str = "auto",
                   answers: Sequence[str] = ANSWERS) -> Requests:
    """Tokenize prompts once; chat models get the chat template and bare answers, base models " Yes"/" No"."""
    if chat_template not in CHAT_TEMPLATE_MODES:
        raise ValueError(f"chat_template: must be one of {list(CHAT_TEMPLATE_MODES)}, got {chat_template!r}")
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat_template == "always" and not has_template:
        raise ValueError("chat_template: 'always' was requested but this tokenizer has no chat template")
    use_chat = chat_template == "always" or (chat_template == "auto" and has_template)
    bos = tokenizer.bos_token_id
    if use_chat:
        rendered = [render_chat(tokenizer, t) for t in texts]
        prompt_ids = tokenizer(rendered, add_special_tokens=False).input_ids
        answer_strings = tuple(answers)
    else:
        prompt_ids = tokenizer(list(texts), add_special_tokens=True).input_ids
        answer_strings = tuple(" " + a for a in answers)
    prompt_ids = [_no_double_bos(list(p), bos) for p in prompt_ids]
    answer_ids = [tokenizer(a, add_special_tokens=False).input_ids for a in answer_strings]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    return Requests(prompt_ids, answer_ids, answer_strings, use_chat, pad)


def plan_batches(lengths: Sequence[int], batch_size: int | str = "auto", device: str = "cpu") -> list[list[int]]:
    """Longest first, grouped under a token budget (``auto``) or a fixed number of prompts; deterministic."""
    if batch_size == "auto":
        budget, max_rows = (16384, 64) if str(device).startswith("cuda") else (1, 1)
    elif isinstance(batch_size, int) and not isinstance(batch_size, bool) and batch_size >= 1:
        budget, max_rows = None, batch_size
    else:
        raise ValueError(f"batch_size: must be 'auto' or a positive integer, got {batch_size!r}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        width = lengths[cur[0]] if cur else lengths[i]
        full = len(cur) >= max_rows or (budget is not None and (len(cur) + 1) * width > budget)
        if cur and full:
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


def _left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    width = max(len(s) for s in seqs)
    if all(len(s) == width for s in seqs):
        return torch.tensor(seqs, device=device), None, None
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, s in enumerate(seqs):
        ids[row, width - len(s):] = torch.tensor(s)
        mask[row, width - len(s):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's input embeddings."""
    return model.get_input_embeddings().weight.device


@torch.inference_mode()
def last_token_logprobs(model: torch.nn.Module, seqs: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """Float32 log-softmax of the next-token distribution after each sequence: [batch, vocab]."""
    ids, mask, positions = _left_pad(seqs, pad_id, model_device(model))
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=1, use_cache=False)
    return out.logits[:, -1, :].float().log_softmax(-1)


@torch.inference_mode()
def _multi_token_logprobs(model: torch.nn.Module, prompt: Sequence[int], answers: Sequence[Sequence[int]]) -> list[float]:
    """Prefill the prompt once, then score each answer from the cached state (cropped back after each)."""
    dev = model_device(model)
    out = model(input_ids=torch.tensor([list(prompt)], device=dev), use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    first = out.logits[0, -1].float().log_softmax(-1)
    scores = []
    for ans in answers:
        lp = first[ans[0]].item()
        if len(ans) > 1:
            nxt = model(input_ids=torch.tensor([list(ans[:-1])], device=dev), past_key_values=cache, use_cache=True)
            logp = nxt.logits[0].float().log_softmax(-1)
            lp += logp.gather(-1, torch.tensor(ans[1:], device=dev)[:, None]).sum().item()
            cache.crop(-(len(ans) - 1))  # drop this answer's tokens, keep the prompt's
        scores.append(lp)
    return scores


def _is_oom(err: BaseException) -> bool:
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err).lower()


def score_batch(model: torch.nn.Module, req: Requests, batch: list[int]) -> np.ndarray:
    """Log-probabilities [len(batch), n_answers]; a CUDA out-of-memory error halves the batch and retries."""
    try:
        if req.single_token:
            logp = last_token_logprobs(model, [req.prompt_ids[i] for i in batch], req.pad_id)
            cols = torch.tensor([a[0] for a in req.answer_ids], device=logp.device)
            return logp[:, cols].cpu().numpy().astype(np.float64)
        return np.array([_multi_token_logprobs(model, req.prompt_ids[i], req.answer_ids) for i in batch])
    except (torch.OutOfMemoryError, RuntimeError) as err:
        if not _is_oom(err) or len(batch) == 1:
            raise
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        half = len(batch) // 2
        return np.concatenate([score_batch(model, req, batch[:half]), score_batch(model, req, batch[half:])])


@dataclass
class BatchResult:
    """What one batch produced: indices into the request list, log-probs, and which were re-scored.

    ``low_precision`` keeps the fast model's own log-probs from before re-scoring (None without a reference), so
    the error of the fast path can be measured against float32 on every prompt, not only the re-scored ones.
    """

    indices: list[int]
    logprobs: np.ndarray
    rescored: list[bool] = field(default_factory=list)
    low_precision: np.ndarray | None = None


def score_batches(model, req: Requests, batches: list[list[int]], reference=None, rescore_margin: float = 0.0,
                  on_result: Callable[[BatchResult], None] | None = None, progress: bool = True) -> list[BatchResult]:
    """Run the planned batches; with a float32 ``reference``, re-score prompts whose margin is below ``rescore_margin``."""
    from tqdm.auto import tqdm

    results = []
    for batch in tqdm(batches, desc="scoring", unit="batch", disable=not progress, mininterval=2.0):
        lp = score_batch(model, req, batch)
        rescored = [False] * len(batch)
        low = None
        if reference is not None and rescore_margin > 0 and lp.shape[1] == 2:
            low = lp.copy()
            close = [k for k in range(len(batch)) if abs(lp[k, 0] - lp[k, 1]) < rescore_margin]
            if close:
                lp[close] = score_batch(reference, req, [batch[k] for k in close])
                for k in close:
                    rescored[k] = True
        res = BatchResult(batch, lp, rescored, low)
        results.append(res)
        if on_result is not None:
            on_result(res)
    return results


def answer_logprobs(model, req: Requests, batch_size: int | str = "auto", progress: bool = False) -> np.ndarray:
    """Convenience: log-probabilities [n_prompts, n_answers] in prompt order."""
    out = np.zeros((len(req.prompt_ids), len(req.answer_ids)))
    batches = plan_batches([len(p) for p in req.prompt_ids], batch_size, str(model_device(model)))
    for res in score_batches(model, req, batches, progress=progress):
        out[res.indices] = res.logprobs
    return out


def naive_answer_logprobs(model, tokenizer, texts: Sequence[str], chat_template: str = "auto",
                          answers: Sequence[str] = ANSWERS) -> np.ndarray:
    """Reference method of the seeds: score prompt+answer and prompt as whole sequences, subtract (slow, exact)."""
    req = build_requests(tokenizer, texts, chat_template, answers)
    out = np.zeros((len(texts), len(answers)))
    dev = model_device(model)
    with torch.inference_mode():
        for i, p in enumerate(req.prompt_ids):
            for j, a in enumerate(req.answer_ids):
                ids = torch.tensor([p + a], device=dev)
                logp = model(input_ids=ids, use_cache=False).logits[0].float().log_softmax(-1)
                targets = torch.tensor(p + a, device=dev)[len(p):]
                out[i, j] = logp[len(p) - 1:-1].gather(-1, targets[:, None]).sum().item()
    return out


# ---------------------------------------------------------------- sentences: causal log-probability, masked PLL

def _bos_id(tokenizer) -> int:
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if bos is None:
        raise ValueError("tokenizer: has neither a BOS nor an EOS token to condition the first token on")
    return bos


def _right_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and attention mask (CPU tensors) for a batch of token sequences."""
    ids = torch.full((len(seqs), max(len(s) for s in seqs)), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, s in enumerate(seqs):
        ids[row, : len(s)] = torch.tensor(list(s))
        mask[row, : len(s)] = 1
    return ids, mask


def _sentence_frame(sentences: Sequence[str], token_logps: list[np.ndarray]) -> "pd.DataFrame":
    import pandas as pd

    sums = np.array([lp.sum() for lp in token_logps])
    counts = np.array([len(lp) for lp in token_logps])
    mean = sums / np.maximum(counts, 1)
    return pd.DataFrame({"sentence": list(sentences), "n_tokens": counts, "sum_logprob": sums, "mean_logprob": mean,
                         "ppl": np.exp(-mean), "token_logprobs": [lp.tolist() for lp in token_logps]})


@torch.inference_mode()
def sentence_logprobs(model, tokenizer, sentences: Sequence[str], batch_size: int = 16) -> "pd.DataFrame":
    """Causal LM: per-token log-probabilities of each sentence, the first token conditioned on BOS; sum, mean, perplexity."""
    bos = _bos_id(tokenizer)
    seqs = [[bos] + tokenizer(s, add_special_tokens=False).input_ids for s in sentences]
    out: list[np.ndarray] = [np.zeros(0)] * len(seqs)
    dev = model_device(model)
    for batch in plan_batches([len(s) for s in seqs], batch_size):
        ids, mask = _right_pad([seqs[i] for i in batch], 0)
        logits = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), use_cache=False).logits
        logp = logits[:, :-1].float().log_softmax(-1).gather(-1, ids[:, 1:, None].to(dev))[..., 0].cpu().numpy()
        for row, i in enumerate(batch):
            out[i] = logp[row, : len(seqs[i]) - 1].astype(np.float64)
    return _sentence_frame(sentences, out)


PLL_VARIANTS = ("original", "within_word_l2r")


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
    if variant not in PLL_VARIANTS:
        raise ValueError(f"variant: must be one of {list(PLL_VARIANTS)}, got {variant!r}")
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


@torch.inference_mode()
def pseudo_logprobs(model, tokenizer, sentences: Sequence[str], variant: str = "original",
                    batch_size: int = 64) -> "pd.DataFrame":
    """Masked LM: pseudo-log-likelihood per sentence (sum of each token's log-prob when masked), batched over copies."""
    if tokenizer.mask_token_id is None:
        raise ValueError("model: pseudo-log-likelihood needs a masked LM whose tokenizer has a mask token")
    head = _mlm_head(model)
    base = model.base_model if head is not None else None
    dev = model_device(model)
    rows = []  # (sentence index, masked input ids, target position, target id)
    for s_idx, s in enumerate(sentences):
        ids, copies = masked_copies(tokenizer, s, variant)
        for pos, masked in copies:
            inp = list(ids)
            for j in masked:
                inp[j] = tokenizer.mask_token_id
            rows.append((s_idx, inp, pos, ids[pos]))
    token_lps: list[list[float]] = [[] for _ in sentences]
    pad = tokenizer.pad_token_id or 0
    for start in range(0, len(rows), batch_size):
        chunk = rows[start: start + batch_size]
        ids, mask = _right_pad([r[1] for r in chunk], pad)
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
    return _sentence_frame(sentences, [np.array(t) for t in token_lps])
