"""Split precision: a low-precision prefix, the last few prompt tokens and the answer in float32.

The low-precision model prefills all but the last ``FLOAT32_TAIL`` tokens of a prompt; its key/value cache is cast
to float32 and the float32 reference computes the tail and the answer. bf16's error on the answer's margin comes
mostly from the scored position's own path through the network, not from the cached context it attends to: on
SmolLM2-135M (696-token prompts) the tail cuts the largest margin error about 4× (0.14 → 0.03), so the calibrated
re-score margin, and the share of prompts re-scored whole in float32, shrink. A tail of 1 token is not enough there
(a 0.2 systematic shift); 4–48 tokens measured alike.

The tail's float32 pass costs about one read of the reference's weights, whatever its few tokens: on SmolLM2-135M
on 2 CPU cores, 0.10 s for 8 tokens and 0.065 s for 1, against about 1.5 s for a whole float32 prompt. Where a run
scores one prompt per pass (the CPU plan), ``tail_logprobs`` therefore prefills each prompt alone (no padding
in the expensive part) and sends the tails of up to ``TAIL_GROUP_ROWS`` prompts through the reference together,
their caches left-padded to one length: one weight read for the group instead of one per prompt.
"""
from __future__ import annotations

import inspect
from typing import Sequence

import torch

from .batching import model_device

FLOAT32_TAIL = 8
TAIL_GROUP_ROWS = 8  # prompts whose float32 tails share one pass through the reference
TAIL_GROUP_BYTES = 512 * 2**20  # at most this much padded float32 key/value cache in one tail pass


def with_cache(model, cache) -> dict:
    """The keyword that hands ``cache`` to ``model``'s forward: ``cache`` where the installed transformers has it,
    else ``past_key_values`` (older releases; newer ones warn that it is deprecated)."""
    forward = getattr(model, "forward", model)
    try:
        names = inspect.signature(forward).parameters
    except (TypeError, ValueError):
        names = {}
    return {"cache" if "cache" in names else "past_key_values": cache}


def cache_of(output):
    """The key/value cache a forward pass returned (``cache``, or ``past_key_values`` in older transformers)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def cast_cache(cache, dtype: torch.dtype):
    """Cast a transformers key/value cache to ``dtype`` in place (every layer's keys and values); returns it.

    Raises TypeError for a cache without per-layer keys and values (e.g. a recurrent state), where the split
    cannot be made; callers then score the prompt whole in the reference precision."""
    layers = getattr(cache, "layers", None)
    if not layers:
        raise TypeError(f"cannot split precision with a {type(cache).__name__}: it has no per-layer keys/values")
    for layer in layers:
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not isinstance(keys, torch.Tensor) or not isinstance(values, torch.Tensor):
            raise TypeError(f"cannot split precision with a {type(cache).__name__}: a layer has no key/value tensors")
        layer.keys, layer.values = keys.to(dtype), values.to(dtype)
    return cache


def split_forward(model, reference, ids: torch.Tensor, mask, positions, tail: int):
    """``model`` on all but the last ``tail`` columns (with cache), then ``reference`` on the rest from the cast
    cache; returns the reference's output (its cache continues the sequence), or None where the cache cannot be cast."""
    cut = slice(None, -tail)
    head = model(input_ids=ids[:, cut], attention_mask=None if mask is None else mask[:, cut],
                 position_ids=None if positions is None else positions[:, cut], use_cache=True, logits_to_keep=1)
    try:
        cache = cast_cache(cache_of(head), reference.dtype)
    except TypeError:
        return None
    if positions is None:
        positions = torch.arange(ids.shape[1], device=ids.device).expand(ids.shape[0], -1)
    return reference(input_ids=ids[:, -tail:], attention_mask=mask, position_ids=positions[:, -tail:],
                     **with_cache(reference, cache), use_cache=True, logits_to_keep=1)


def _plain(cache, length: int) -> bool:
    """Whether every layer of ``cache`` is a plain growing key/value layer holding ``length`` positions (what the
    padded merge assumes; sliding-window, static, quantized or recurrent layers are scored one prompt at a time)."""
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer and isinstance(getattr(layer, "keys", None), torch.Tensor)
                                and layer.keys.shape[0] == 1 and layer.keys.shape[-2] == length for layer in layers)


def _cache_bytes(cache, dtype: torch.dtype) -> int:
    size = torch.empty((), dtype=dtype).element_size()
    return sum((layer.keys.numel() + layer.values.numel()) * size for layer in cache.layers)


def _merged_tail(reference, caches: list, seqs: Sequence[Sequence[int]], tail: int) -> torch.Tensor:
    """One reference pass over the tails of ``seqs``, from their prefix caches cast and left-padded to one length."""
    dev = model_device(reference)
    lens = [len(s) - tail for s in seqs]
    width = max(lens)
    merged = caches[0]
    for li, layer in enumerate(merged.layers):
        for name in ("keys", "values"):
            parts = [getattr(c.layers[li], name).to(reference.dtype) for c in caches]
            if all(p.shape[-2] == width for p in parts):
                padded = torch.cat(parts)
            else:
                padded = parts[0].new_zeros((len(parts), *parts[0].shape[1:-2], width, parts[0].shape[-1]))
                for row, p in enumerate(parts):
                    padded[row, ..., width - p.shape[-2]:, :] = p[0]
            setattr(layer, name, padded)
    mask = None
    if any(n != width for n in lens):
        mask = torch.zeros((len(seqs), width + tail), dtype=torch.long, device=dev)
        for row, n in enumerate(lens):
            mask[row, width - n:] = 1
    ids = torch.tensor([list(s[-tail:]) for s in seqs], device=dev)
    positions = torch.stack([torch.arange(n, n + tail, device=dev) for n in lens])
    out = reference(input_ids=ids, attention_mask=mask, position_ids=positions, **with_cache(reference, merged),
                    use_cache=True, logits_to_keep=1)
    return out.logits[:, -1, :].float().log_softmax(-1)


def _alone(reference, head, ids: torch.Tensor, tail: int) -> torch.Tensor:
    """One prompt's tail from its own prefix cache (cast), or the whole prompt in the reference where it cannot be."""
    try:
        cache = cast_cache(head, reference.dtype)
    except TypeError:
        res = reference(input_ids=ids, logits_to_keep=1, use_cache=False)
    else:
        positions = torch.arange(ids.shape[1] - tail, ids.shape[1], device=ids.device)[None]
        res = reference(input_ids=ids[:, -tail:], position_ids=positions, **with_cache(reference, cache), use_cache=True,
                        logits_to_keep=1)
    return res.logits[0, -1, :].float().log_softmax(-1)


@torch.inference_mode()
def tail_logprobs(model, reference, seqs: Sequence[Sequence[int]], tail: int,
                  budget_bytes: int = TAIL_GROUP_BYTES) -> list[torch.Tensor]:
    """Float32 log-softmax of the next token after each of ``seqs`` (each longer than ``tail``), one [vocab] tensor per
    sequence: ``model`` prefills each prompt alone, the reference computes the tails together, as many per pass as
    ``budget_bytes`` of padded float32 cache allow (at least one). A prompt whose cache is not a plain key/value cache
    gets its tail alone, or is scored whole by the reference where its cache cannot be cast at all."""
    dev = model_device(model)
    out: list[torch.Tensor | None] = [None] * len(seqs)
    group: list[tuple[int, object]] = []

    def flush():
        if group:
            rows = _merged_tail(reference, [c for _, c in group], [seqs[i] for i, _ in group], tail)
            for (i, _), lp in zip(group, rows):
                out[i] = lp
            group.clear()

    for i, s in enumerate(seqs):
        ids = torch.tensor([list(s)], device=dev)
        head = cache_of(model(input_ids=ids[:, :-tail], use_cache=True, logits_to_keep=1))
        if not _plain(head, len(s) - tail):
            out[i] = _alone(reference, head, ids, tail)
            continue
        width = max([len(s)] + [len(seqs[j]) for j, _ in group]) - tail
        if group and (len(group) + 1) * _cache_bytes(head, reference.dtype) // (len(s) - tail) * width > budget_bytes:
            flush()
        group.append((i, head))
    flush()
    return out
