"""Answer choices: the log-probability a model gives each answer option after a prompt.

Options may be Yes/No, letters (A–E) or full texts, and the set may differ per prompt. When every option of
every prompt in a batch is one token, one forward pass per prompt scores them all (logits of the last position
only). Otherwise the prompt is prefilled once and each option is scored from the cached state. Raw sums are
returned with the token and byte counts needed for lm-evaluation-harness style normalised scores.
"""
from __future__ import annotations

import math
import re
from contextlib import closing
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Sequence

import numpy as np
import torch

from ..score_settings import CHAT_TEMPLATE_MODES, check_choice
from ..spec import (LETTERS, YES_NO, ChoiceItems, decisions,  # noqa: F401 - LETTERS for callers
                    normalize_answer, options_per_row)
from .batching import in_order, left_pad, model_device, pass_workers, plan_batches, with_oom_halving
from .split import TAIL_GROUP_ROWS, cache_of, split_forward, tail_logprobs, with_cache

@dataclass
class Requests:
    """Tokenized prompts and per-prompt answer continuations, ready for the engine."""

    prompt_ids: list[list[int]]
    option_ids: list[list[list[int]]]  # [prompt][option] -> token ids of the option as scored
    option_strings: list[tuple[str, ...]]  # [prompt] -> option texts as scored (base models: with a leading space)
    used_chat_template: bool
    pad_id: int
    system_in_user_turn: bool = False  # the template refused a system message, so it was prefixed to the user turn

    @property
    def answer_ids(self) -> list[list[int]]:
        """The option token ids when every prompt has the same options (the monotonicity study's Yes/No)."""
        return self.option_ids[0]

    @property
    def answer_strings(self) -> tuple[str, ...]:
        """The option texts as scored, when every prompt has the same options."""
        return self.option_strings[0]

    def single_token_at(self, i: int) -> bool:
        """True when every option of prompt ``i`` is one token."""
        return all(len(a) == 1 for a in self.option_ids[i])

    @property
    def single_token(self) -> bool:
        """True when every option of every prompt is one token, so one forward pass per prompt scores them all."""
        return all(self.single_token_at(i) for i in range(len(self.prompt_ids)))

    def option_token_counts(self, i: int) -> list[int]:
        """Tokens in each option of prompt ``i`` (for per-token normalisation)."""
        return [len(a) for a in self.option_ids[i]]

    def option_byte_counts(self, i: int) -> list[int]:
        """UTF-8 bytes of each option of prompt ``i`` as scored (for per-character normalisation, as lm-eval's acc_norm)."""
        return [len(s.encode("utf-8")) for s in self.option_strings[i]]

    def subset(self, rows: Sequence[int]) -> "Requests":
        """The requests of ``rows``, in that order."""
        return Requests([self.prompt_ids[i] for i in rows], [self.option_ids[i] for i in rows],
                        [self.option_strings[i] for i in rows], self.used_chat_template, self.pad_id,
                        self.system_in_user_turn)


def _refuses_system(err: Exception) -> bool:
    return "system" in str(err).lower()


def render_chat(tokenizer, text: str, system: str | None = None) -> tuple[str, bool]:
    """``text`` as the single user message in the model's own template, with the generation prompt.

    ``system`` goes into a system message; a template that refuses one (it raises) gets it prefixed to the user
    turn instead, and the second value says so. ``enable_thinking=False`` switches Qwen3's reasoning block off.
    """
    kwargs = dict(add_generation_prompt=True, tokenize=False, enable_thinking=False)
    if system:
        try:
            return tokenizer.apply_chat_template([{"role": "system", "content": system},
                                                  {"role": "user", "content": text}], **kwargs), False
        except Exception as err:  # noqa: BLE001 - jinja's TemplateError from raise_exception()
            if not _refuses_system(err):
                raise
            return tokenizer.apply_chat_template([{"role": "user", "content": f"{system}\n\n{text}"}], **kwargs), True
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], **kwargs), False


def _no_double_bos(ids: list[int], bos_id: int | None) -> list[int]:
    return ids[1:] if bos_id is not None and len(ids) > 1 and ids[0] == ids[1] == bos_id else ids


def use_chat_template(tokenizer, chat_template: str = "auto") -> bool:
    """Whether prompts go through the chat template (``auto``: when the tokenizer has one)."""
    check_choice("chat_template", chat_template, CHAT_TEMPLATE_MODES)
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat_template == "always" and not has_template:
        raise ValueError("chat_template: 'always' was requested but this tokenizer has no chat template")
    return chat_template == "always" or (chat_template == "auto" and has_template)


def build_requests(tokenizer, texts: Sequence[str], chat_template: str = "auto",
                   answers: Sequence[str] | Sequence[Sequence[str]] = YES_NO,
                   systems: Sequence[str | None] | None = None) -> Requests:
    """Tokenize prompts once. Chat models: the prompt as the user message, bare options as the assistant's first
    tokens. Base models: the prompt as is (a system text prefixed), options as continuations with a leading space.

    ``answers`` is one option tuple for every prompt or one tuple per prompt.
    """
    use_chat = use_chat_template(tokenizer, chat_template)
    per = options_per_row(answers, len(texts))
    for i, opts in enumerate(per):
        if len(opts) < 2 or len(set(opts)) != len(opts) or any(not str(o).strip() for o in opts):
            raise ValueError(f"options: prompt {i} needs at least two distinct, non-blank options, got {list(opts)!r}")
    systems = list(systems) if systems is not None else [None] * len(texts)
    bos = tokenizer.bos_token_id
    refused = False
    if use_chat:
        rendered = []
        for t, s in zip(texts, systems):
            r, moved = render_chat(tokenizer, t, s)
            rendered.append(r)
            refused |= moved
        prompt_ids = tokenizer(rendered, add_special_tokens=False).input_ids
        scored = per
    else:
        prompt_ids = tokenizer([f"{s}\n\n{t}" if s else t for t, s in zip(texts, systems)], add_special_tokens=True).input_ids
        scored = [tuple(" " + a for a in opts) for opts in per]
    prompt_ids = [_no_double_bos(list(p), bos) for p in prompt_ids]
    cache: dict[str, list[int]] = {}

    def ids(s: str) -> list[int]:
        if s not in cache:
            cache[s] = list(tokenizer(s, add_special_tokens=False).input_ids)
        return cache[s]

    option_ids = [[ids(a) for a in opts] for opts in scored]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    return Requests(prompt_ids, option_ids, scored, use_chat, pad, refused)


@torch.inference_mode()
def last_token_logprobs(model: torch.nn.Module, seqs: Sequence[Sequence[int]], pad_id: int,
                        reference: torch.nn.Module | None = None, tail: int = 0) -> torch.Tensor:
    """Float32 log-softmax of the next-token distribution after each sequence: [batch, vocab].

    With a float32 ``reference`` and ``tail`` > 0, ``model`` computes all but the last ``tail`` tokens and the
    reference the rest from the cast cache (split precision); a batch with a prompt of ``tail`` tokens or fewer,
    or a model whose cache cannot be cast, is scored whole by the reference."""
    split = reference is not None and tail > 0
    if split and min(len(s) for s in seqs) <= tail:
        model, split = reference, False
    ids, mask, positions = left_pad(seqs, pad_id, model_device(model))
    out = split_forward(model, reference, ids, mask, positions, tail) if split else None
    if out is None:
        out = (reference if split else model)(input_ids=ids, attention_mask=mask, position_ids=positions,
                                              logits_to_keep=1, use_cache=False)
    return out.logits[:, -1, :].float().log_softmax(-1)


def _prefill(model: torch.nn.Module, prompt: Sequence[int], reference=None, tail: int = 0):
    """Prefill ``prompt`` with cache; returns (the model that continues from the cache, its output). Split
    precision as in ``last_token_logprobs`` when a reference and a tail are given and the prompt is longer."""
    ids = torch.tensor([list(prompt)], device=model_device(model))
    if reference is not None and tail > 0:
        out = split_forward(model, reference, ids, None, None, tail) if len(prompt) > tail else None
        if out is not None:
            return reference, out
        model = reference
    return model, model(input_ids=ids, use_cache=True, logits_to_keep=1)


@torch.inference_mode()
def _multi_token_logprobs(model: torch.nn.Module, prompt: Sequence[int], answers: Sequence[Sequence[int]],
                          reference=None, tail: int = 0) -> list[float]:
    """Prefill the prompt once, then score each answer from the cached state (cropped back after each)."""
    dev = model_device(model)
    model, out = _prefill(model, prompt, reference, tail)
    cache = cache_of(out)
    first = out.logits[0, -1].float().log_softmax(-1)
    scores = []
    for ans in answers:
        lp = first[ans[0]].item()
        if len(ans) > 1:
            nxt = model(input_ids=torch.tensor([list(ans[:-1])], device=dev), **with_cache(model, cache), use_cache=True)
            logp = nxt.logits[0].float().log_softmax(-1)
            lp += logp.gather(-1, torch.tensor(ans[1:], device=dev)[:, None]).sum().item()
            cache.crop(-(len(ans) - 1))  # drop this answer's tokens, keep the prompt's
        scores.append(lp)
    return scores


def _score_rows(model: torch.nn.Module, req: Requests, batch: list[int], reference=None, tail: int = 0) -> list[np.ndarray]:
    if all(req.single_token_at(i) for i in batch):
        logp = last_token_logprobs(model, [req.prompt_ids[i] for i in batch], req.pad_id, reference, tail)
        out = []
        for row, i in enumerate(batch):
            cols = torch.tensor([a[0] for a in req.option_ids[i]], device=logp.device)
            out.append(logp[row, cols].cpu().numpy().astype(np.float64))
        return out
    return [np.array(_multi_token_logprobs(model, req.prompt_ids[i], req.option_ids[i], reference, tail)) for i in batch]


def score_batch(model: torch.nn.Module, req: Requests, batch: list[int], reference=None, tail: int = 0) -> list[np.ndarray]:
    """Log-probabilities of each prompt's options (one array per prompt); out-of-memory halves the batch and retries.
    ``reference`` and ``tail`` > 0: split precision (the last ``tail`` prompt tokens in the reference's float32)."""
    return with_oom_halving(partial(_score_rows, model, req, reference=reference, tail=tail), batch)


def top_two_margin(lp: np.ndarray) -> float:
    """Log-prob of the best option minus the runner-up (≥ 0): how close the decision was; NaN when a log-prob is
    NaN or inf (no decision can be read off them)."""
    s = np.sort(lp)
    return float(s[-1] - s[-2]) if np.isfinite(s).all() else float("nan")


@dataclass
class BatchResult:
    """What one batch produced: indices into the request list, log-probs per prompt, and which were re-scored.

    ``low_precision`` keeps the fast model's own log-probs from before re-scoring (None without a reference), so
    the error of the fast path can be measured against float32 on every prompt, not only the re-scored ones.
    """

    indices: list[int]
    logprobs: list[np.ndarray]
    rescored: list[bool] = field(default_factory=list)
    low_precision: list[np.ndarray] | None = None
    n_batches: int = 1  # planned batches it holds (one-prompt batches split together, ``tail_groups``)

    def records(self) -> dict:
        """``{row: {"logps": array, "rescored": bool}}``, what a run's checkpoint keeps per row."""
        return {i: {"logps": lp, "rescored": bool(r)} for i, lp, r in zip(self.indices, self.logprobs, self.rescored)}


def score_batches(model, req: Requests, batches: list[list[int]], reference=None, rescore_margin: float = 0.0,
                  on_result: Callable[[BatchResult], None] | None = None, progress=True,
                  tail: int = 0) -> list[BatchResult]:
    """Run the planned batches; with a float32 ``reference``, re-score prompts whose top-two margin is below
    ``rescore_margin`` or not finite (the fast path overflowed), and with ``tail`` > 0 compute each prompt's last
    ``tail`` tokens in the reference's float32 (split precision). One-prompt batches of one-token options are split
    in groups (``tail_groups``), each group one result. On a CPU, groups are scored ``pass_workers`` at a time, their
    results handed on in plan order. ``progress``: True for a tqdm bar, False for none, or a callable(n_rows) per
    result."""
    results = []
    groups = tail_groups(req, batches, reference, tail)
    score = partial(score_group, model, req, reference=reference, rescore_margin=rescore_margin, tail=tail)
    done = in_order(score, groups, *pass_workers(model, len(groups)))
    with progress_bar(batches, progress is True) as bar, closing(done):
        for group, result in zip(groups, done):
            results.append(result)
            bar.update(len(group))
            if callable(progress):
                progress(len(results[-1].indices))
            if on_result is not None:
                on_result(results[-1])
    return results


def score_group(model, req: Requests, group: list[list[int]], reference, rescore_margin: float, tail: int,
                non_finite: bool = False) -> BatchResult:
    """One group of ``tail_groups`` on the fast path, its prompts below ``rescore_margin`` re-scored in float32 (and,
    with ``non_finite``, those whose fast-path log-probs are NaN or inf, whatever the margin)."""
    lp = fast_scores(model, req, group, reference, tail)
    rows = [i for b in group for i in b]
    rescored = [False] * len(rows)
    low = None
    if reference is not None and (rescore_margin > 0 or non_finite):
        low = [a.copy() for a in lp]
        close = [k for k in range(len(rows)) if not top_two_margin(lp[k]) >= rescore_margin]  # NaN too
        if close:
            again = [a for k in close for a in score_batch(reference, req, [rows[k]])] if len(group) > 1 \
                else score_batch(reference, req, [rows[k] for k in close])
            for k, a in zip(close, again):
                lp[k] = a
                rescored[k] = True
    return BatchResult(rows, lp, rescored, low, len(group))


def fast_scores(model, req: Requests, group: list[list[int]], reference=None, tail: int = 0) -> list[np.ndarray]:
    """``score_batch`` of a group from ``tail_groups``: one batch as it is, or one-prompt batches whose float32 tails
    go through the reference together (``split.tail_logprobs``)."""
    if len(group) == 1:
        return score_batch(model, req, group[0], reference, tail)
    logps = tail_logprobs(model, reference, [req.prompt_ids[b[0]] for b in group], tail)
    return [lp[[o[0] for o in req.option_ids[b[0]]]].cpu().numpy().astype(np.float64) for b, lp in zip(group, logps)]


def tail_groups(req: Requests, batches: list[list[int]], reference=None, tail: int = 0) -> list[list[list[int]]]:
    """The batches in runs of consecutive one-prompt batches whose float32 tails go through the reference together
    (up to ``TAIL_GROUP_ROWS``; split precision, one-token options, prompts longer than the tail); every other batch
    alone. Fixed by the list alone, so a resumed run, which drops the groups already recorded, groups the rest alike."""
    groups: list[list[list[int]]] = []
    run: list[list[int]] = []
    for b in batches:
        if reference is not None and tail > 0 and len(b) == 1 and req.single_token_at(b[0]) \
                and len(req.prompt_ids[b[0]]) > tail:
            run.append(b)
            if len(run) == TAIL_GROUP_ROWS:
                groups.append(run)
                run = []
            continue
        if run:
            groups.append(run)
            run = []
        groups.append([b])
    return groups + ([run] if run else [])


def answer_logprobs(model, req: Requests, batch_size: int | str = "auto", progress: bool = False) -> np.ndarray:
    """Convenience: log-probabilities [n_prompts, n_options] in prompt order (every prompt with the same number)."""
    out = np.zeros((len(req.prompt_ids), len(req.option_ids[0])))
    batches = plan_batches([len(p) for p in req.prompt_ids], batch_size, str(model_device(model)))
    for res in score_batches(model, req, batches, progress=progress):
        out[res.indices] = np.vstack(res.logprobs)
    return out


# ---------------------------------------------------------------- turning log-probs into a score table

def option_names(options: Sequence[str]) -> list[str]:
    """Column suffixes for a fixed option set: Yes/No → yes, no; letters → a, b…; other short words lowercased;
    anything else by position (0, 1, …)."""
    low = [re.sub(r"[^a-z0-9]+", "_", str(o).strip().lower()).strip("_") for o in options]
    if all(low) and len(set(low)) == len(low) and all(len(x) <= 12 for x in low):
        return low
    return [str(i) for i in range(len(options))]


def choice_frame(ids: Sequence, items, req: Requests, logps: Sequence[np.ndarray], rescored: Sequence[bool],
                 id_column: str = "prompt_id"):
    """The score table of a choices run, one row per prompt (in ``ids`` order).

    Columns: ``logp_<option>`` (raw sum of the option's token log-probs), ``norm_token_<option>`` (per token) and
    ``norm_char_<option>`` (per UTF-8 byte of the option as scored); ``choice`` (the option with the highest raw
    log-prob), ``choice_norm_token``, ``choice_norm_char``; ``margin`` (with two options: first minus second, e.g.
    Yes − No; with more: best minus runner-up); with gold answers ``correct`` (and ``correct_norm_*``); for Yes/No
    ``pred_yes`` and ``label``; ``option_mass`` (the options' total probability: their share of the next-token
    distribution when each is one token); ``n_tokens`` (prompt tokens) and ``rescored``. Fixed option sets name their columns
    (``logp_yes``, ``logp_a``); per-row sets by position (``logp_0``, ``logp_1``, …).
    """
    import pandas as pd

    n = len(ids)
    per = options_per_row(items.options, n)
    fixed = len(set(per)) == 1
    names = option_names(per[0]) if fixed else [str(k) for k in range(max(len(o) for o in per))]
    k_max = len(names)
    raw = np.full((n, k_max), np.nan)
    ntok = np.full((n, k_max), np.nan)
    nbyte = np.full((n, k_max), np.nan)
    mass = np.full(n, np.nan)  # the options' total probability; NaN where a log-prob is NaN or +inf
    for r, (lp, opts) in enumerate(zip(logps, per)):
        raw[r, : len(opts)] = lp
        mass[r] = np.exp(lp).sum() if not (np.isnan(lp).any() or np.isposinf(lp).any()) else np.nan
        ntok[r, : len(opts)] = req.option_token_counts(r)
        nbyte[r, : len(opts)] = req.option_byte_counts(r)
    cols: dict = {}
    for k, name in enumerate(names):
        cols[f"logp_{name}"] = raw[:, k]
    for k, name in enumerate(names):
        cols[f"norm_token_{name}"] = raw[:, k] / ntok[:, k]
    for k, name in enumerate(names):
        cols[f"norm_char_{name}"] = raw[:, k] / nbyte[:, k]

    choice, margins = decisions(raw, per)
    frame = {id_column: list(ids), **cols, "margin": margins, "choice": choice,
             "choice_norm_token": decisions(raw / ntok, per)[0], "choice_norm_char": decisions(raw / nbyte, per)[0]}
    if fixed and tuple(per[0]) == YES_NO:
        frame["pred_yes"] = np.array([c == "Yes" for c in choice])
    if items.gold is not None:
        gold = list(items.gold)
        if fixed and tuple(per[0]) == YES_NO:
            frame["label"] = np.array([g == "Yes" for g in gold])
        frame["correct"] = np.array([c == g for c, g in zip(choice, gold)])
        frame["correct_norm_token"] = np.array([c == g for c, g in zip(frame["choice_norm_token"], gold)])
        frame["correct_norm_char"] = np.array([c == g for c, g in zip(frame["choice_norm_char"], gold)])
    frame["option_mass"] = mass
    frame["n_tokens"] = np.array([len(p) for p in req.prompt_ids], dtype="int64")
    frame["rescored"] = np.array(list(rescored), dtype=bool)
    return pd.DataFrame(frame)


# ---------------------------------------------------------------- a run's identity: its options

def options_digest(per: Sequence[tuple[str, ...]]) -> str:
    """sha256 of every row's option texts, in order (part of a run's identity)."""
    import hashlib

    h = hashlib.sha256()
    for opts in per:
        h.update(("\x1f".join(opts) + "\x1e").encode())
    return h.hexdigest()


def progress_bar(batches: list, enabled: bool = True):
    """The scoring bar (tqdm; a widget in JupyterLab, text under papermill, whose executed notebook and the report
    built from it keep text, not a widget's state): it redraws every ``bar_step`` batches, never on a timer (tqdm's
    monitor redraws a bar idle for 10 s, which would give a slow model a line per batch)."""
    import os

    from ..paths import PAPERMILL_ENV

    if os.environ.get(PAPERMILL_ENV):
        from tqdm.std import tqdm
    else:
        from tqdm.auto import tqdm

    return tqdm(batches, desc="scoring", unit="batch", disable=not enabled, mininterval=2.0,
                miniters=bar_step(len(batches)), maxinterval=math.inf)


def bar_step(n_batches: int) -> int:
    """Batches between two updates of a progress bar: about every 10%, so an executed notebook holds at most a dozen
    progress outputs (a widget in JupyterLab redraws as often)."""
    return max(1, -(-n_batches // 10))
