"""Batch plans, padding, and out-of-memory halving, shared by every scorer."""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from ..score_settings import AUTO, check_batch_size


# batch_size: auto, per scorer and device (decided by ``batch_policy`` alone)
AUTO_CHOICE_ROWS_GPU = 64  # answer choices on a GPU: at most this many prompts per batch, under the token budget
DEFAULT_TOKEN_BUDGET = 16384  # answer choices on a GPU when no budget was probed
AUTO_SENTENCE_ROWS = 32  # sentences (or a masked LM's masked copies) per forward pass


def batch_policy(batch_size, scorer: str = "choices", device: str = "cpu",
                 token_budget: int | None = None) -> tuple[int, int | None]:
    """What ``batch_size`` means: (rows per forward pass, token budget per batch or None).

    An integer is rows per pass (prompts for answer choices; sentences, or a masked LM's masked copies, for
    sentences). ``auto``: answer choices on a GPU pack up to ``token_budget`` tokens (``DEFAULT_TOKEN_BUDGET`` when
    none was probed) and ``AUTO_CHOICE_ROWS_GPU`` prompts per batch, on a CPU one prompt per pass (padding costs more
    there than batching saves); sentences ``AUTO_SENTENCE_ROWS`` per pass."""
    check_batch_size(batch_size)
    if batch_size != AUTO:
        return batch_size, None
    if scorer == "sentences":
        return AUTO_SENTENCE_ROWS, None
    if str(device).startswith("cuda"):
        return AUTO_CHOICE_ROWS_GPU, token_budget or DEFAULT_TOKEN_BUDGET
    return 1, None


def plan_batches(lengths: Sequence[int], batch_size: int | str = "auto", device: str = "cpu",
                 token_budget: int | None = None, scorer: str = "choices") -> list[list[int]]:
    """Longest first, grouped under a token budget or a fixed number of rows as ``batch_policy`` reads
    ``batch_size`` for ``scorer`` on ``device``; deterministic."""
    return pack_batches(lengths, *batch_policy(batch_size, scorer, device, token_budget))


def pack_batches(lengths: Sequence[int], max_rows: int, budget: int | None = None) -> list[list[int]]:
    """Longest first, at most ``max_rows`` rows per batch and, with a ``budget``, at most that many tokens (rows × the
    batch's longest input); deterministic."""
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


def probe_token_budget(config, free_bytes: int, bytes_per_value: int = 2, room: float = 0.7,
                       lo: int = 1024, hi: int = 262144) -> int:
    """Tokens per batch that fit ``room`` of the GPU's free memory (probed once, after the weights are loaded).

    Per token a prefill without cache holds at most about 8 hidden-size and 4 MLP-size values at once (residual,
    normed copy, q/k/v/o, gate/up/act), layer by layer; SDPA keeps attention linear in length. Rounded down to a
    multiple of 256 and clamped to [lo, hi].
    """
    hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd", 1024)
    inter = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * hidden
    per_token = bytes_per_value * (8 * hidden + 4 * inter)
    budget = int(room * free_bytes / per_token) // 256 * 256
    return max(lo, min(hi, budget))


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Left-padded ids, attention mask and position ids (mask and positions None when no padding is needed)."""
    width = max(len(s) for s in seqs)
    if all(len(s) == width for s in seqs):
        return torch.tensor([list(s) for s in seqs], device=device), None, None
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, s in enumerate(seqs):
        ids[row, width - len(s):] = torch.tensor(list(s))
        mask[row, width - len(s):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


def right_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and attention mask (CPU tensors) for a batch of token sequences."""
    ids = torch.full((len(seqs), max(len(s) for s in seqs)), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, s in enumerate(seqs):
        ids[row, : len(s)] = torch.tensor(list(s))
        mask[row, : len(s)] = 1
    return ids, mask


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's input embeddings."""
    return model.get_input_embeddings().weight.device


def is_oom(err: BaseException) -> bool:
    """True for a CUDA (or other backend) out-of-memory error."""
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err).lower()


def with_oom_halving(fn: Callable[[list[int]], list], batch: list[int]) -> list:
    """``fn(batch)``; on out-of-memory, free the cache, split the batch in two and retry each half."""
    try:
        return fn(batch)
    except (torch.OutOfMemoryError, RuntimeError) as err:
        if not is_oom(err) or len(batch) == 1:
            raise
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        half = len(batch) // 2
        return with_oom_halving(fn, batch[:half]) + with_oom_halving(fn, batch[half:])
