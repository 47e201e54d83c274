"""Forward passes side by side on a CPU: the same log-probs, bit for bit, as one after the other; results in plan order;
an early stop waits for the running passes only; the caller's torch threads as they were."""
from __future__ import annotations

import copy
import threading
import time
from contextlib import closing

import numpy as np
import pytest
import torch

from nbutils.engine import batching
from nbutils.engine.batching import in_order, pass_workers, plan_batches
from nbutils.engine.calibration import score_calibrated
from nbutils.engine.choices import build_requests, score_batches, top_two_margin
from nbutils.studies.monotonicity.dataset import generate_prompts


@pytest.fixture
def two_threads():
    """torch at two threads for the test (an xdist worker pinned to one core has one), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def texts():
    frames = [generate_prompts(["more than 1/2", "less than 1/3"], prompts_per_concept=4, n_examples=k, seed=k)
              for k in (2, 6)]
    return [t for df in frames for t in df["text"].tolist()]


def test_pass_workers_splits_the_threads_on_a_cpu_only(tiny_llama, two_threads):
    assert pass_workers(tiny_llama) == (batching.CPU_WORKERS, 2 // batching.CPU_WORKERS)
    assert pass_workers(tiny_llama, calls=1) == (1, 2), "a single call keeps every thread"
    torch.set_num_threads(1)
    assert pass_workers(tiny_llama) == (1, 1)


def test_in_order_keeps_the_order_and_stops_after_the_running_calls(two_threads):
    started, lock = [], threading.Lock()

    def slow(k):
        with lock:
            started.append(k)
        time.sleep(0.05 if k % 2 == 0 else 0.01)  # even items slower: later ones finish first
        return k * k

    assert list(in_order(slow, range(9), workers=2, threads=1)) == [k * k for k in range(9)]
    assert torch.get_num_threads() == 2, "the caller's threads are given back"
    started.clear()
    with closing(in_order(slow, range(100), workers=2, threads=1, ahead=4)) as done:
        first = [next(done) for _ in range(3)]
    assert first == [0, 1, 4]
    assert len(started) <= 3 + 4, "queued calls are cancelled on close; only the running ones finish"
    assert torch.get_num_threads() == 2


def test_in_order_hands_on_a_worker_error(two_threads):
    def fail_at_3(k):
        if k == 3:
            raise ValueError("no 3")
        return k

    with pytest.raises(ValueError, match="no 3"):
        list(in_order(fail_at_3, range(8), workers=2, threads=1))
    assert torch.get_num_threads() == 2


def test_scores_side_by_side_equal_one_after_the_other(tiny_llama, tiny_tokenizer, texts, two_threads, monkeypatch):
    """The fast path (bf16 prefix, grouped float32 tails, calibration, re-scoring) and float32, each with two
    passes at once and with one: the same log-probs bit for bit, in the same results and order."""
    req = build_requests(tiny_tokenizer, texts, "never")
    fast = copy.deepcopy(tiny_llama).to(torch.bfloat16)
    batches = plan_batches([len(p) for p in req.prompt_ids], 1)

    def everything():
        calibrated: dict = {}
        cal = score_calibrated(fast, tiny_llama, req, batches, calibrated, size=4, tail=4)
        low = score_batches(fast, req, batches, progress=False, tail=4, reference=tiny_llama)
        margin = float(np.median([top_two_margin(lp) for r in low for lp in r.logprobs]))  # half re-scored
        res = score_batches(fast, req, batches, tiny_llama, margin, progress=False, tail=4)
        plain = score_batches(tiny_llama, req, batches, progress=False)
        assert any(any(r.rescored) for r in res) and not all(all(r.rescored) for r in res), "some close calls"
        rows = sorted(calibrated)
        assert rows == sorted(i for b in batches for i in b) and sum(calibrated[i]["rescored"] for i in rows) >= 4
        first = [(rows, np.vstack([calibrated[i]["logps"] for i in rows]), [calibrated[i]["rescored"] for i in rows])]
        return cal, first + [(r.indices, np.vstack(r.logprobs), r.rescored) for r in res + plain]

    cal2, side_by_side = everything()
    assert pass_workers(fast, len(batches))[0] == 2, "the side-by-side path is the one tested"
    monkeypatch.setattr(batching, "CPU_WORKERS", 1)
    cal1, one_by_one = everything()
    assert cal2.errors == cal1.errors and cal2.margin == cal1.margin
    assert len(side_by_side) == len(one_by_one)
    for (i2, lp2, r2), (i1, lp1, r1) in zip(side_by_side, one_by_one):
        assert i2 == i1 and r2 == r1
        assert np.array_equal(lp2, lp1)
    assert torch.get_num_threads() == 2
