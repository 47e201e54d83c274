"""An independent naive scorer for answer options: the reference the engine's choice scores are checked against.

It shares no code with ``nbutils.engine``: a prompt's tokens come from the tokenizer's own chat template
(``apply_chat_template(..., add_generation_prompt=True, tokenize=True)``) for chat rendering, or from the plain
tokenizer (its special tokens included) otherwise; an option's tokens are the bare option after a chat prompt and
the option after one space after a plain prompt. Each (prompt, option) pair is then one unpadded float32 forward
pass over the whole sequence, and the option's score is the sum of its tokens' log-probabilities. Slow and exact: a
tokenization, chat-template, padding, cache or position error in the engine shows up as a difference from it.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch


def wants_chat(tokenizer, chat_template: str | bool) -> bool:
    """``always``/``True``: chat rendering; ``never``/``False``: plain; ``auto``: when the tokenizer has a template."""
    if isinstance(chat_template, bool):
        return chat_template
    return {"always": True, "never": False, "auto": bool(tokenizer.chat_template)}[chat_template]


def _chat_ids(tokenizer, messages: list[dict]) -> list[int]:
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))


def prompt_tokens(tokenizer, text: str, chat: bool, system: str | None = None) -> list[int]:
    """The prompt's token ids: the single user message through the chat template (a system message in its own turn,
    or before the user text when the template raises on a system role), or the plain text (system text first)."""
    if not chat:
        return list(tokenizer(f"{system}\n\n{text}" if system else text).input_ids)
    if not system:
        return _chat_ids(tokenizer, [{"role": "user", "content": text}])
    try:
        return _chat_ids(tokenizer, [{"role": "system", "content": system}, {"role": "user", "content": text}])
    except Exception as err:  # noqa: BLE001 - jinja's TemplateError from the template's raise_exception()
        if "system" not in str(err).lower():
            raise
        return _chat_ids(tokenizer, [{"role": "user", "content": f"{system}\n\n{text}"}])


def option_tokens(tokenizer, option: str, chat: bool) -> list[int]:
    """The option's token ids: bare as the assistant's first tokens, with a leading space as a plain continuation."""
    return list(tokenizer(option if chat else f" {option}", add_special_tokens=False).input_ids)


def sequence_logprob(model, prompt: Sequence[int], option: Sequence[int]) -> float:
    """Sum of the log-probabilities of ``option``'s tokens after ``prompt``: one unpadded forward pass, no cache."""
    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt) + list(option)], device=device)
    n = len(prompt)
    with torch.inference_mode():
        logits = model(input_ids=ids, use_cache=False).logits[0]
    # position n-1+k predicts the option's k-th token
    logp = torch.log_softmax(logits[n - 1:n - 1 + len(option)].to(torch.float64), dim=-1)
    return float(sum(logp[k, tok] for k, tok in enumerate(option)))


def reference_logprobs(model, tokenizer, texts: Sequence[str], chat_template: str | bool = "auto",
                       options: Sequence[str] | Sequence[Sequence[str]] = ("Yes", "No"),
                       systems: Sequence[str | None] | None = None) -> list[np.ndarray]:
    """Each prompt's option log-probs (one array per prompt, in option order). ``options``: one tuple for every
    prompt or one per prompt. The model must be float32."""
    dtypes = {p.dtype for p in model.parameters()}
    if dtypes != {torch.float32}:
        raise ValueError(f"the reference scores in float32 only; this model holds {sorted(map(str, dtypes))}")
    chat = wants_chat(tokenizer, chat_template)
    per = [tuple(options)] * len(texts) if all(isinstance(o, str) for o in options) else [tuple(o) for o in options]
    if len(per) != len(texts):
        raise ValueError(f"options: {len(per)} option sets for {len(texts)} prompts")
    systems = list(systems) if systems is not None else [None] * len(texts)
    out = []
    for text, opts, system in zip(texts, per, systems):
        prompt = prompt_tokens(tokenizer, text, chat, system)
        out.append(np.array([sequence_logprob(model, prompt, option_tokens(tokenizer, o, chat)) for o in opts]))
    return out
