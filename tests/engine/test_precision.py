"""dtype/quantization ``auto``, calibrated re-scoring, and the GPU token budget (CUDA mocked or skipped)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from interruption import score_until
import torch

from nbutils import artifacts, paths, studies
from nbutils import score_settings as base_settings
from nbutils.engine import batching, calibration, models, run as scoring, settings as score_settings
from nbutils.engine.choices import Requests, build_requests, last_token_logprobs, score_batches
from nbutils.engine.split import FLOAT32_TAIL
from nbutils.engine.loading import host as host_module

GIB = 2**30


# ---------------------------------------------------------------- dtype: auto on CPUs with and without the flag

@pytest.mark.parametrize("cpuinfo, native", [
    ("flags\t: fpu avx2 avx512f avx512_bf16 avx512_vnni", True),
    ("flags\t: fpu avx2 avx512f amx_bf16 amx_tile", True),
    ("flags\t: fpu avx2 avx512f avx512bw avx512_vnni", False),  # plain AVX-512: bf16 is emulated there
    ("flags\t: fpu avx2 avx512_bf16x", False),  # a whole flag, not a prefix
])
def test_native_bf16_is_read_from_the_cpu_flags(cpuinfo, native):
    assert host_module.cpu_supports_bf16(cpuinfo) is native


def test_auto_on_a_native_bf16_cpu_is_the_fast_path_and_says_why(tiny_model_dir, monkeypatch, capsys):
    monkeypatch.setattr(host_module, "cpu_supports_bf16", lambda cpuinfo=None: True)
    lm = models.load_model(str(tiny_model_dir), device="cpu")
    assert lm.meta["dtype"] == "bfloat16" and lm.meta["dtype_requested"] == "auto"
    assert "native bf16" in lm.meta["dtype_reason"] and lm.meta["rescore_margin"] == "auto"
    assert next(lm.model.parameters()).dtype == torch.bfloat16
    assert next(lm.reference.parameters()).dtype == torch.float32
    assert lm.meta["quantization"] == "none" and "CPU" in lm.meta["quantization_reason"]
    assert "bfloat16 (auto: native bf16 CPU" in lm.settings.describe()  # the table the score notebook shows
    assert "dtype:" not in capsys.readouterr().out, "a choice, not a warning: said once, in the settings table"


def test_auto_without_native_bf16_is_float32_and_says_why(tiny_model_dir, monkeypatch, capsys):
    monkeypatch.setattr(host_module, "cpu_supports_bf16", lambda cpuinfo=None: False)
    lm = models.load_model(str(tiny_model_dir), device="cpu")
    assert lm.meta["dtype"] == "float32" and lm.reference is None and lm.meta["rescore_margin"] == 0.0
    assert "no native bfloat16" in lm.meta["dtype_reason"]
    assert "float32 (auto: this CPU has no native bfloat16" in lm.settings.describe()


def test_auto_with_rescoring_switched_off_stays_float32(tiny_model_dir, monkeypatch):
    monkeypatch.setattr(host_module, "cpu_supports_bf16", lambda cpuinfo=None: True)
    lm = models.load_model(str(tiny_model_dir), device="cpu", rescore_margin=0)
    assert lm.meta["dtype"] == "float32" and "rescore_margin=0" in lm.meta["dtype_reason"]


@pytest.mark.parametrize("bad", [-0.1, "wide", True])
def test_rescore_margin_is_auto_or_a_number(bad):
    with pytest.raises(ValueError, match="^rescore_margin: must be 'auto'"):
        base_settings.check_rescore_margin(bad)
    with pytest.raises(ValueError, match="^calibration_size:"):
        base_settings.ScoreSettings(calibration_size=0)


# ---------------------------------------------------------------- calibrated re-scoring

def _close_call_requests(lm, tokenizer, n: int = 24) -> tuple[Requests, np.ndarray]:
    """Prompts whose two options are, for even prompts, the two tokens with the closest float32 log-probs among the
    top 100 (a near-tie bf16 can flip) and, for odd prompts, the top token against a far-down one (a clear call)."""
    from nbutils.studies.monotonicity.dataset import generate_prompts

    texts = generate_prompts(["more than 1/2", "less than 1/3"], conditions=["concept_learning", "explicit"],
                             prompts_per_concept=n // 4, n_examples=6, seed=5)["text"].tolist()[:n]
    base = build_requests(tokenizer, texts)
    options = []
    for i, p in enumerate(base.prompt_ids):
        lp = last_token_logprobs(lm.reference, [p], base.pad_id)[0]
        top = torch.topk(lp, 100).indices
        if i % 2 == 0:
            vals = lp[top]
            gaps = (vals[:-1] - vals[1:]).abs()
            k = int(gaps.argmin())
            pair = [int(top[k]), int(top[k + 1])]
        else:
            pair = [int(top[0]), int(top[-1])]
        options.append([[t] for t in pair])
    req = Requests(base.prompt_ids, options, [(str(a), str(b)) for (a,), (b,) in options], True, base.pad_id)
    exact = np.array([last_token_logprobs(lm.reference, [p], req.pad_id)[0, [o[0][0], o[1][0]]].numpy()
                      for p, o in zip(req.prompt_ids, req.option_ids)])
    return req, exact


@pytest.mark.parametrize("tail", [0, FLOAT32_TAIL])  # whole bf16, and the split the engine uses
def test_calibrated_margin_keeps_every_float32_decision_where_bf16_alone_does_not(tiny_model_dir, tail):
    lm = models.load_model(str(tiny_model_dir), device="cpu", dtype="bfloat16")  # forced bf16, margin auto
    assert lm.reference is not None and lm.meta["rescore_margin"] == "auto"
    req, exact = _close_call_requests(lm, lm.tokenizer)
    batches = batching.plan_batches([len(p) for p in req.prompt_ids], "auto", "cpu")
    done: dict = {}
    cal = calibration.score_calibrated(lm.model, lm.reference, req, batches, done, size=8, tail=tail)
    assert cal.as_meta()["float32_tail_tokens"] == tail
    assert cal.size == 8 and max(cal.errors) > 0, "bf16 really differs from float32 on the sample"
    assert cal.margin == pytest.approx(max(calibration.MIN_MARGIN, calibration.SAFETY_FACTOR * max(cal.errors)))
    final = np.vstack([done[i]["logps"] for i in range(len(exact))])
    flags = np.array([done[i]["rescored"] for i in range(len(exact))])
    exact_choice = exact.argmax(1)
    assert (final.argmax(1) == exact_choice).all(), "every decision is float32's"
    assert 0 < flags.sum() < len(flags), "clear calls stay bf16, close ones are re-scored"
    # the same prompts without re-scoring (margin 0) do differ: the margin is what keeps them equal
    plain = score_batches(lm.model, req, batches, lm.reference, 0.0, progress=False, tail=tail)
    plain_lp = np.zeros_like(exact)
    for r in plain:
        plain_lp[r.indices] = np.vstack(r.logprobs)
    assert (plain_lp.argmax(1) != exact_choice).any(), "bf16 alone flips a near-tie, so this test can fail"
    margins = np.array([calibration.top_two_margin(lp) for lp in plain_lp])
    assert flags[margins < cal.margin].all(), "every fast-path call closer than the margin is float32's"
    parts = calibration.strata(batches, 8)
    assert sum(flags[p].any() for p in parts) == 8, "each part of the plan gave its closest call to the sample"
    assert all(flags[p[int(np.argmin(margins[p]))]] for p in parts)


def test_margin_rule_and_sample_spread():
    assert calibration.calibrated_margin([0.01, 0.04, 0.02], 3.0) == pytest.approx(0.12)
    assert calibration.calibrated_margin([0.0, 0.0]) == calibration.MIN_MARGIN == 1e-3
    with pytest.raises(ValueError, match="^safety_factor:"):
        calibration.calibrated_margin([0.1], 0.5)
    assert calibration.pairwise_error(np.array([-1.0, -2.0, -3.0]), np.array([-1.0, -2.5, -3.0])) == pytest.approx(0.5)
    one_row = [[i] for i in range(40)]
    assert calibration.strata(one_row, 8) == [list(range(k, k + 5)) for k in range(0, 40, 5)]
    gpu_like = [list(range(k * 16, k * 16 + 16)) for k in range(6)]
    assert [len(p) for p in calibration.strata(gpu_like, 20)] == [5] * 16 + [4] * 4, "parts of rows, not of batches"
    assert calibration.strata(one_row[:3], 8) == [[0], [1], [2]] and calibration.strata([], 8) == []
    with pytest.raises(ValueError, match="^calibration_size:"):
        calibration.strata(one_row, 0)
    done = {0: {"logps": [-1.0, -1.5], "rescored": False}, 1: {"logps": [-1.0, -1.1], "rescored": True},
            2: {"logps": [-2.0, -2.2], "rescored": False}, 3: {"logps": [float("nan"), -1.0], "rescored": False},
            4: {"logps": [-3.0, -2.8], "rescored": False}}
    assert calibration.closest_call([0, 1, 2, 3, 4, 5], done) == 2, "the closest call still at its fast scores"
    assert calibration.closest_call([4, 2], done) == 4, "a tie goes to the first in plan order"
    assert calibration.closest_call([1, 3, 5], done) is None


def _monotonicity_run(tmp_path, tiny_run):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    return run


def test_forced_bf16_run_records_calibration_and_matches_float32_decisions(tmp_path, tiny_run, tiny_model_dir, capsys):
    spec = studies.get("monotonicity").spec
    fast = models.load_model(str(tiny_model_dir), device="cpu", dtype="bfloat16")
    exact = models.load_model(str(tiny_model_dir), device="cpu", dtype="float32")
    df, meta = scoring.score_run(_monotonicity_run(tmp_path / "a", tiny_run), fast, spec, progress=False, calibration_size=5)
    ref, _ = scoring.score_run(_monotonicity_run(tmp_path / "b", tiny_run), exact, spec, progress=False)
    assert meta["rescore_margin"] == "auto" and meta["calibration_size"] == 5
    assert meta["rescore_margin_used"] == pytest.approx(max(calibration.MIN_MARGIN, meta["calibration_safety_factor"]
                                                            * meta["calibration_error_max"]))
    assert 0 < meta["calibration_error_max"] < meta["rescore_margin_used"]
    assert meta["float32_tail_tokens"] == FLOAT32_TAIL, "the split the calibration measured is recorded"
    assert "rescore_margin: " in capsys.readouterr().out
    assert df["rescored"].sum() >= 5, "the calibration sample's float32 scores are the run's own results"
    assert (df["choice"] == ref["choice"]).all()
    side = artifacts.read_json(paths.sidecar(paths.score_file(tmp_path / "a" / "run", paths.model_slug(fast.meta["model"]) + ".bfloat16")))
    assert side["rescore_margin_used"] == meta["rescore_margin_used"] and side["dtype_reason"] == "set explicitly"


def test_calibrated_run_resumes_to_the_uninterrupted_file(tmp_path, tiny_run, tiny_model_dir):
    spec = studies.get("monotonicity").spec
    fast = models.load_model(str(tiny_model_dir), device="cpu", dtype="bfloat16")
    run = _monotonicity_run(tmp_path / "a", tiny_run)
    part, pmeta = score_until(3, run, fast, spec, progress=False, checkpoint_every=1, calibration_size=4)
    assert not pmeta["complete"]
    resumed, meta = scoring.score_run(run, fast, spec, progress=False, checkpoint_every=1, calibration_size=4)
    whole, wmeta = scoring.score_run(_monotonicity_run(tmp_path / "b", tiny_run), fast, spec, progress=False, calibration_size=4)
    assert meta["complete"] and resumed.equals(whole)
    assert meta["rescore_margin_used"] == wmeta["rescore_margin_used"]


def test_a_run_killed_after_its_calibration_resumes_to_the_uninterrupted_file(tmp_path, tiny_run, tiny_model_dir,
                                                                                monkeypatch):
    """Killed between the margin and the re-scoring it calls for: the checkpoint holds the sample's float32 rows and
    the margin together, so the resumed run re-scores the same prompts an uninterrupted run does."""
    spec = studies.get("monotonicity").spec
    fast = models.load_model(str(tiny_model_dir), device="cpu", dtype="bfloat16")
    whole, wmeta = scoring.score_run(_monotonicity_run(tmp_path / "b", tiny_run), fast, spec, progress=False,
                                     calibration_size=4)
    run = _monotonicity_run(tmp_path / "a", tiny_run)
    calls, real = [], calibration._run

    def killed_at_the_rescoring(fn, items, model):
        calls.append(len(items))
        if len(calls) == 2:  # the first runs the last parts' samples, the second the re-scoring
            raise SystemExit("killed")  # as kill -9: nothing saved on the way out
        return real(fn, items, model)

    monkeypatch.setattr(calibration, "_run", killed_at_the_rescoring)
    with pytest.raises(SystemExit):
        scoring.score_run(run, fast, spec, progress=False, calibration_size=4)
    monkeypatch.setattr(calibration, "_run", real)
    partial = paths.partial_file(run, paths.model_slug(fast.meta["model"]) + ".bfloat16")
    assert artifacts.read_json(paths.sidecar(partial))["rescore_margin_used"] == wmeta["rescore_margin_used"]
    assert pd.read_parquet(partial)["rescored"].sum() == wmeta["calibration_size"], "the sample's rows came with it"
    resumed, meta = scoring.score_run(run, fast, spec, progress=False, calibration_size=4)
    assert meta["complete"] and meta["resumed_rows"] == len(whole) and resumed.equals(whole)
    assert int(resumed["rescored"].sum()) >= 4


def test_a_checkpoint_calibrated_for_another_float32_tail_is_calibrated_again(tmp_path, tiny_run, tiny_model_dir, capsys):
    """A margin measured for one split (e.g. whole-prompt bf16 by an older version) is not reused for another."""
    spec = studies.get("monotonicity").spec
    fast = models.load_model(str(tiny_model_dir), device="cpu", dtype="bfloat16")
    run = _monotonicity_run(tmp_path / "a", tiny_run)
    score_until(3, run, fast, spec, progress=False, checkpoint_every=1, calibration_size=4)
    side = paths.sidecar(paths.partial_file(run, paths.model_slug(fast.meta["model"]) + ".bfloat16"))
    old = artifacts.read_json(side)
    assert old["float32_tail_tokens"] == FLOAT32_TAIL
    artifacts.write_json(dict(old, float32_tail_tokens=0, rescore_margin_used=0.777), side)
    capsys.readouterr()
    _, meta = scoring.score_run(run, fast, spec, progress=False, calibration_size=4)
    assert meta["complete"] and meta["rescore_margin_used"] != 0.777 and meta["float32_tail_tokens"] == FLOAT32_TAIL
    assert "calibrated:" in capsys.readouterr().out


# ---------------------------------------------------------------- GPU: quantization auto and the token budget

@pytest.mark.parametrize("n_params, free_gib, expected", [
    (32e9, 80, "none"),   # 32B in bf16: 59.6 GiB of weights, within 85% of an 80 GiB card
    (60e9, 80, "8bit"),   # bf16 111.8 GiB does not fit; 8-bit 55.9 GiB does
    (100e9, 80, "4bit"),  # 8-bit 93.1 GiB does not; NF4 49.4 GiB does
    (8e9, 16, "8bit"),    # bf16 14.9 GiB > 13.6 GiB usable
])
def test_quantization_auto_picks_the_most_exact_precision_that_fits(n_params, free_gib, expected):
    choice, line = score_settings.choose_quantization(int(n_params), free_gib * GIB)
    assert choice == expected
    assert f"{free_gib:.1f} GiB free" in line and "bfloat16 ~" in line


def test_quantization_auto_refuses_what_fits_nowhere():
    with pytest.raises(ValueError, match="^quantization: auto found no precision that fits"):
        score_settings.choose_quantization(200_000_000_000, 80 * GIB)


def _gpu_host(free_gib: float = 80) -> host_module.Host:
    return host_module.Host(cuda=True, cuda_bf16=True, cpu_native_bf16=False, cores=2,
                            free_gpu_bytes=lambda: int(free_gib * GIB))


def test_quantization_auto_on_a_mocked_gpu_says_the_estimate_and_warns_for_8bit(capsys):
    hub = score_settings.EngineSettings(model="org/big-model")
    s = hub.resolve(_gpu_host(), n_params=lambda: 32_000_000_000)
    assert s.resolved.quantization == "none" and s.resolved.dtype == "bfloat16" and not s.resolved.warnings
    assert "quantization auto: none (bfloat16)" in s.resolved.quantization_reason
    assert "quantization auto: none (bfloat16)" in s.describe()
    s = hub.resolve(_gpu_host(), n_params=lambda: 60_000_000_000)
    assert s.resolved.quantization == "8bit"
    with pytest.warns(UserWarning, match="several times slower than bf16"):
        models.say_warnings(s)
    assert "prefer quantization='none'" in capsys.readouterr().out
    by_hand = dataclasses.replace(hub, quantization="8bit").resolve(_gpu_host(), n_params=lambda: 1)
    with pytest.warns(UserWarning, match="8-bit prefill"):  # picked by hand: said too
        models.say_warnings(by_hand)
    on_cpu = hub.resolve(dataclasses.replace(_gpu_host(), cuda=False), n_params=lambda: 1 / 0)
    assert on_cpu.resolved.quantization == "none"  # no count on CPU


def test_token_budget_from_mocked_free_memory():
    from transformers import LlamaConfig

    cfg = LlamaConfig(hidden_size=2048, intermediate_size=8192)  # SmolLM2-1.7B's widths
    per_token = 2 * (8 * 2048 + 4 * 8192)  # bf16 bytes
    assert batching.probe_token_budget(cfg, 10 * GIB) == int(0.7 * 10 * GIB / per_token) // 256 * 256 == 76288
    assert batching.probe_token_budget(cfg, 1) == 1024 and batching.probe_token_budget(cfg, 10**15) == 262144
    lengths = [700] * 200
    assert max(len(b) for b in batching.plan_batches(lengths, "auto", "cuda", 7000)) == 10


def _with_budget(settings, budget: int):
    return dataclasses.replace(settings, resolved=dataclasses.replace(settings.resolved, token_budget=budget))


def test_token_budget_is_recorded_and_a_resumed_run_keeps_its_own(tmp_path, tiny_run, tiny_model_dir):
    spec = studies.get("monotonicity").spec
    lm = models.load_model(str(tiny_model_dir), device="cpu", dtype="float32")
    run = _monotonicity_run(tmp_path, tiny_run)
    lm.settings = _with_budget(lm.settings, 4096)  # as a GPU load probes it
    score_until(2, run, lm, spec, progress=False, checkpoint_every=1)
    lm.settings = _with_budget(lm.settings, 999_999)  # a later session with more free memory
    _, meta = scoring.score_run(run, lm, spec, progress=False)
    assert meta["complete"] and meta["token_budget"] == 4096


@pytest.mark.cuda  # skipped without a CUDA GPU (tests/conftest.py)
def test_auto_on_a_real_gpu_picks_bf16_and_probes_a_budget(tiny_model_dir):
    lm = models.load_model(str(tiny_model_dir), quantization="auto")
    assert lm.meta["quantization"] == "none" and lm.meta["dtype"] in ("bfloat16", "float16")
    assert lm.meta["token_budget"] >= 1024 and lm.reference is None
