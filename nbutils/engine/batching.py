"""Batch plans, padding, and out-of-memory halving, shared by every scorer."""
from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, Sequence

import torch

from ..score_settings import AUTO, check_batch_size


# batch_size: auto, per scorer and device (decided by ``batch_policy`` alone)
AUTO_CHOICE_ROWS_GPU = 64  # answer choices on a GPU: at most this many prompts per batch, under the token budget
DEFAULT_TOKEN_BUDGET = 16384  # answer choices on a GPU when no budget was probed
AUTO_SENTENCE_ROWS = 32  # sentences (or a masked LM's masked copies) per forward pass
CPU_WORKERS = 2  # forward passes at once on a CPU, each on its share of torch's threads (``pass_workers``)


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


def pass_workers(model: torch.nn.Module, calls: int | None = None) -> tuple[int, int]:
    """(forward passes at once, torch threads each) for ``model`` and ``calls`` calls to make: on a CPU with at least
    two torch threads, ``CPU_WORKERS`` passes on an equal share of the threads; otherwise (a GPU, one thread, a
    quantized model, whose layers keep state between calls, or a single call) one pass on them all.

    A transformer's forward pass of one prompt uses two CPU threads poorly: attention and the small element-wise
    steps scale badly, so two prompts side by side, one thread each, score faster than one after the other on both
    threads (SmolLM2-135M, 2-core AMD EPYC with native bf16: 1.14× on the bf16 fast path, 1.06× in float32;
    ``benchmarks/pass_workers.py``). Each prompt's log-probs are the same either way: its pass runs
    alone on its worker's threads, and a pass on one thread gives the same bits as on two here (checked by the tests).
    """
    threads = torch.get_num_threads()
    if model_device(model).type != "cpu" or threads < 2 or getattr(model, "hf_quantizer", None) is not None \
            or (calls is not None and calls < 2):
        return 1, threads
    workers = min(CPU_WORKERS, threads)
    return workers, threads // workers


def in_order(fn: Callable, items: Iterable, workers: int = 1, threads: int | None = None,
             ahead: int | None = None) -> Iterator:
    """``fn(item)`` for each item, yielded in the items' order, with up to ``workers`` calls running at once in threads
    (each with ``threads`` torch threads); ``workers`` 1 runs them one by one in the caller's thread.

    At most ``ahead`` calls (default twice ``workers``) are queued or running at once, so one slow call
    does not leave the other workers idle. Closing the iterator (``contextlib.closing``; a caller that stops early)
    cancels the queued calls, waits for the running ones (at most ``workers``) and gives the caller's thread its torch
    threads back."""
    if workers <= 1:
        for item in items:
            yield fn(item)
        return
    mine = torch.get_num_threads()

    def call(item):
        if threads is not None and torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        return fn(item)

    limit = max(workers, ahead or 2 * workers)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nbutils-pass")
    pending: deque = deque()
    source = iter(items)
    try:
        for item in source:
            pending.append(pool.submit(call, item))
            if len(pending) >= limit:
                break
        while pending:
            result = pending.popleft().result()
            for item in source:
                pending.append(pool.submit(call, item))
                break
            yield result
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        torch.set_num_threads(mine)  # a library's global thread setting, touched by the workers, back as it was
