"""The scoring settings resolved against the host: ``EngineSettings`` is the record ``score_settings.ScoreSettings``
(every parameter, its default and its check, the score file's name, read without torch) with what the host and, on a
GPU, the model's size decide (``Resolved``), resolved once into what is carried out.

Everything below the score notebook reads this object: ``loading`` carries out its device, dtype, quantization and
float32 twin; ``run.score_run`` reads its run parameters and batch plan; the scorers read their part. Every choice an
``auto`` parameter leaves open is made here, each by one function:

- ``choose_dtype`` — ``dtype: auto`` → bfloat16 / float16 / float32, and why;
- ``choose_quantization`` — ``quantization: auto`` → the most exact precision that fits the GPU;
- ``resolve_margin`` — the re-scoring margin a model allows (0 where there is no float32 twin to re-score with);
- ``batching.batch_policy`` — what ``batch_size`` means for a scorer on a device (rows per pass, a GPU's token budget).

The resolved object is written whole into the score file's sidecar (``meta["settings"]``), beside the flat keys
the readers use.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from .. import score_settings
from ..score_settings import AUTO, EMBEDDED
from .batching import batch_policy
from .loading.host import ACTIVATION_ROOM, Host, check_fits_gpu, estimate_weight_bytes, resolve_device
from .loading.quantization import bitsandbytes_cpu_problem

EIGHT_BIT_SLOW = ("bitsandbytes 8-bit prefill is several times slower than bf16 (int8 matmuls with outlier "
                  "decomposition); prefer quantization='none' (bf16) whenever it fits")
QUANTIZED_CPU_NOTE = ("on the CPU, bitsandbytes quantization is for checking whether quantization changes your "
                      "results, not for speed: it runs slower than float32 here")
FLOAT16_ON_CPU = ("dtype: float16 on a CPU is slow (no native float16 matmuls here) and its close calls are re-scored "
                  "in float32, which can be every prompt; dtype: float32 or auto is faster and exact on a CPU")
FLOAT16_MAX = 65504.0  # the largest finite float16


@dataclass(frozen=True)
class Resolved:
    """What the host and the model made of the parameters: what ``loading`` carries out and the run records."""

    device: str
    dtype: str
    dtype_reason: str
    quantization: str
    quantization_reason: str | None
    rescore_margin: float | str  # a number (0: off), or "auto": calibrated at the start of the run
    rescore_margin_note: str | None
    cpu_native_bf16: bool
    threads: int
    memory: str | None = None  # a GPU's weight estimate against its free memory (hub models)
    token_budget: int | None = None  # tokens per batch on a GPU, probed once after the weights are loaded
    warnings: tuple[str, ...] = ()  # what the user should hear once (slow or unusual choices)

    @property
    def float32_twin(self) -> bool:
        """Whether a float32 copy is kept to re-score close calls (a margin that is not 0)."""
        return bool(self.rescore_margin)


@dataclass(frozen=True)
class EngineSettings(score_settings.ScoreSettings):
    """Every parameter of one scoring run, validated when built (``score_settings.validate``); ``resolved`` holds
    the host's decisions."""

    resolved: Resolved | None = field(default=None, compare=True)

    # ------------------------------------------------------------ the host's decisions
    def resolve(self, host: Host, n_params: Callable[[], int] | None = None) -> "EngineSettings":
        """These settings with every ``auto`` decided for ``host``: device, dtype, quantization, the re-scoring
        margin, threads, and a GPU's memory check. ``n_params`` (called only on a GPU, for a model that is not
        embedded or for ``quantization: auto``) counts the model's parameters."""
        if n_params is None and self.embedded:
            n_params = lambda: EMBEDDED[self.model].n_parameters  # noqa: E731
        device = resolve_device(self.device, host.cuda)
        gpu = device.startswith("cuda")
        warnings: list[str] = []
        quantized_on_cpu = self.quantization in ("8bit", "4bit") and not gpu
        if quantized_on_cpu:
            problem = bitsandbytes_cpu_problem(self.quantization)
            if problem:
                raise ValueError(f"quantization: {self.quantization!r} cannot run on this CPU: {problem}. Install "
                                 "bitsandbytes >= 0.46 (its CPU backend), or use quantization='none'")
            if self.masked:
                raise ValueError("quantization: 8bit/4bit is for causal LMs here; use quantization='none' with "
                                 "masked: True")
        margin = 0.0 if self.scorer == "sentences" else self.rescore_margin  # masked LMs score sentences (validate)
        if quantized_on_cpu and self.dtype == AUTO:
            dtype, dtype_reason = "float32", f"auto: {self.quantization} weights on the CPU, every other module in float32"
        else:
            dtype, dtype_reason = choose_dtype(self.dtype, device, host, rescoring=margin != 0)
        if self.dtype != AUTO and dtype == "float16" and not gpu:
            warnings.append(FLOAT16_ON_CPU)
        quantization, q_reason = self._quantization(device, dtype, host, n_params, warnings)
        margin_used, note = resolve_margin(margin, dtype, quantization, device)
        if note and margin != AUTO:
            warnings.append(f"rescore_margin: {margin} requested, 0 used ({note})")
        memory = None
        if gpu and not self.embedded:
            memory = check_fits_gpu(n_params(), quantization if quantization != "none" else dtype, host.free_gpu_bytes())
        threads = self.threads if self.threads is not None else host.cores
        return dataclasses.replace(self, resolved=Resolved(
            device=device, dtype=dtype, dtype_reason=dtype_reason, quantization=quantization,
            quantization_reason=q_reason, rescore_margin=margin_used, rescore_margin_note=note,
            cpu_native_bf16=host.cpu_native_bf16, threads=threads, memory=memory, warnings=tuple(warnings)))

    def _quantization(self, device: str, dtype: str, host: Host, n_params, warnings: list) -> tuple[str, str | None]:
        """``quantization: auto`` → none on a CPU, the most exact precision that fits a GPU; notes for 8-bit and CPU."""
        quantization, reason = self.quantization, None
        if quantization == AUTO:
            if not device.startswith("cuda"):
                return "none", ("quantization auto: none (CPU: full precision; 8bit/4bit run on the CPU only when "
                                "asked for, to check whether they change results)")
            quantization, reason = choose_quantization(n_params(), host.free_gpu_bytes(),
                                                       dtype if dtype != "float32" else "bfloat16")
        if quantization != "none" and self.adapter:
            raise ValueError(f"adapter: merged into full-precision weights; quantization {quantization} cannot "
                             "take it here. Use quantization: none (a GPU with room for the model in bf16)")
        if quantization in ("8bit", "4bit") and not device.startswith("cuda"):
            warnings.append(f"quantization: {quantization}: {QUANTIZED_CPU_NOTE}")
            return quantization, f"set explicitly; {QUANTIZED_CPU_NOTE}"
        if quantization == "8bit":
            warnings.append(f"quantization: 8bit: {EIGHT_BIT_SLOW}")
        return quantization, reason

    def after_load(self, config, free_bytes: int) -> "EngineSettings":
        """On a GPU: the token budget that fits the free memory left once the weights are loaded (probed once)."""
        from .batching import probe_token_budget

        r = self.need_resolved()
        if not r.device.startswith("cuda"):
            return self
        budget = probe_token_budget(config, free_bytes, 2 if r.dtype != "float32" else 4)
        return dataclasses.replace(self, resolved=dataclasses.replace(r, token_budget=budget))

    def need_resolved(self) -> Resolved:
        if self.resolved is None:
            raise ValueError("settings: not resolved for a host yet (EngineSettings.resolve)")
        return self.resolved

    # ------------------------------------------------------------ the batch plan
    def batch_plan(self, scorer: str | None = None) -> tuple[int, int | None]:
        """(rows per forward pass, token budget per batch or None) that ``batch_size`` means for ``scorer`` (this
        run's by default) on the resolved device; see ``batching.batch_policy``."""
        r = self.need_resolved()
        return batch_policy(self.batch_size, scorer or self.scorer, r.device, r.token_budget)

    def keep_plan_of(self, prior: dict) -> "EngineSettings":
        """These settings with the batch plan a checkpoint (``prior``: its sidecar) was scored with, so a resumed
        run batches exactly as the interrupted one did (a batch's padding can move the last digits of a score)."""
        if not prior:
            return self
        r = self.need_resolved()
        budget = prior.get("token_budget") or r.token_budget
        return dataclasses.replace(self, batch_size=prior.get("batch_size", self.batch_size),
                                   resolved=dataclasses.replace(r, token_budget=budget))

    # ------------------------------------------------------------ what is recorded
    def as_dict(self) -> dict:
        """Every setting, the resolved ones under ``resolved`` (for the sidecar's ``settings``)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "resolved"}
        if self.resolved is not None:
            out["resolved"] = dict(dataclasses.asdict(self.resolved), warnings=list(self.resolved.warnings))
        return out

    def sidecar(self) -> dict:
        """The flat sidecar keys the settings decide (what readers of a score file look up)."""
        r = self.need_resolved()
        return {"model": self.model, "adapter": self.adapter,
                "adapter_scale": score_settings.scale_recorded(self.adapter, self.adapter_scale), "dtype": r.dtype, "device": r.device,
                "dtype_requested": self.dtype, "dtype_reason": r.dtype_reason, "cpu_native_bf16": r.cpu_native_bf16, "quantization": r.quantization,
                "quantization_requested": self.quantization, "quantization_reason": r.quantization_reason,
                "rescore_margin": r.rescore_margin,
                "rescore_margin_requested": 0.0 if self.scorer == "sentences" else self.rescore_margin,
                "rescore_margin_note": r.rescore_margin_note, "masked": bool(self.masked)}

    def table(self) -> list[tuple[str, str, str]]:
        """(setting, requested, used and why) per setting: what the score notebook shows once."""
        r = self.need_resolved()
        rows, budget = self.batch_plan()
        batch = f"{rows} row{'s' if rows > 1 else ''} per pass" + (f", ≤ {budget} tokens per batch" if budget else "")
        margin = AUTO if r.rescore_margin == AUTO else "0 (off)" if not r.rescore_margin else f"{r.rescore_margin}"
        out = [("model", self.model, self.slug + " (score file name)"),
               *([("adapter", self.adapter, "LoRA merged into the weights at load")] if self.adapter else []),
               *([("adapter_scale", str(self.adapter_scale), "the LoRA's scaling times this, before the merge")]
                 if score_settings.scale_recorded(self.adapter, self.adapter_scale) is not None else []),
               ("device", self.device, r.device),
               ("dtype", self.dtype, f"{r.dtype} ({r.dtype_reason})"),
               ("quantization", self.quantization, f"{r.quantization}" + (f" ({r.quantization_reason})"
                                                                          if r.quantization_reason else "")),
               ("rescore_margin", str(self.rescore_margin), margin + (f" ({r.rescore_margin_note})"
                                                                       if r.rescore_margin_note else "")),
               ("batch_size", str(self.batch_size), batch),
               ("threads", str(self.threads), str(r.threads))]
        if r.memory:
            out.append(("memory", "", r.memory))
        if r.token_budget is not None:
            out.append(("token_budget", "", f"{r.token_budget} tokens per batch (from the GPU's free memory after loading)"))
        out += [("scorer", self.scorer, "masked LM (pseudo-log-likelihood)" if self.masked else "causal LM"),
                ("chat_template", self.chat_template, ""), ("limit", str(self.limit), f"seed {self.limit_seed}"),
                ("shard", f"{self.shard_index} of {self.num_shards}", "")]
        return out

    def describe(self) -> str:
        """The table as plain text, one setting a line."""
        return "\n".join(f"{name:<15} {req:<22} {used}".rstrip() for name, req, used in self.table())


# ---------------------------------------------------------------- the decisions, each in one function

def choose_dtype(dtype: str, device: str, host: Host | None = None, rescoring: bool = True) -> tuple[str, str]:
    """The dtype to compute in and why: ``auto`` → bf16 on a GPU that has it (else float16); on a CPU with native
    bf16 (AVX512-BF16/AMX) bf16 with a float32 tail and float32 re-scoring of close calls when ``rescoring``;
    float32 elsewhere."""
    if dtype != AUTO:  # checked once, by score_settings.validate
        return dtype, "set explicitly"
    host = host or Host.probe()
    if device.startswith("cuda"):
        if host.cuda_bf16:
            return "bfloat16", "auto: this GPU supports bfloat16"
        return "float16", "auto: this GPU has no bfloat16, float16 instead"
    if not host.cpu_native_bf16:
        return "float32", "auto: this CPU has no native bfloat16 (no avx512_bf16/amx_bf16 flag), where bf16 is emulated and slower"
    if not rescoring:
        return "float32", "auto: native bf16 CPU, but rescore_margin=0 turns float32 re-scoring off, so float32 keeps decisions exact"
    return "bfloat16", ("auto: native bf16 CPU (avx512_bf16/amx_bf16): bf16 fast path (each prompt's last tokens "
                        "and close calls in float32)")


def choose_quantization(n_params: int, free_bytes: int, dtype: str = "bfloat16") -> tuple[str, str]:
    """The most exact precision whose weights fit ``free_bytes`` with ``ACTIVATION_ROOM`` left for activations:
    ``none`` (``dtype``), else ``8bit``, else ``4bit`` (NF4); ValueError naming the estimate when none fits."""
    usable = (1 - ACTIVATION_ROOM) * free_bytes
    lines = []
    for quant, precision in (("none", dtype), ("8bit", "8bit"), ("4bit", "4bit")):
        need = estimate_weight_bytes(n_params, precision)
        lines.append(f"{precision} ~{need / 2**30:.1f} GiB")
        if need <= usable:
            return quant, (f"quantization auto: {quant} ({precision}): {n_params / 1e9:.2f}B parameters need "
                           f"{', '.join(lines)} of weights; {free_bytes / 2**30:.1f} GiB free, "
                           f"{ACTIVATION_ROOM:.0%} kept for activations")
    raise ValueError(f"quantization: auto found no precision that fits: {n_params / 1e9:.2f}B parameters need "
                     f"{', '.join(lines)}; {free_bytes / 2**30:.1f} GiB free on the GPU. Use a larger GPU")


def resolve_margin(margin, dtype: str, quantization: str, device: str) -> tuple[float | str, str | None]:
    """The re-scoring margin actually used (``auto`` stays ``auto``: calibrated at the start of the run) and why."""
    if not margin:
        return 0.0, None
    if dtype == "float32" and quantization == "none":
        return 0.0, "already float32: nothing to re-score"
    if quantization != "none":
        return 0.0, f"{quantization} weights: no float32 copy to re-score with"
    if margin == AUTO and device.startswith("cuda"):
        return 0.0, "auto on a GPU: a float32 twin would double GPU memory; give a number to force re-scoring"
    if margin == AUTO:
        return AUTO, "calibrated at the start of the run on a sample of its own prompts"
    return margin, None


def non_finite_message(dtype: str, quantization: str, n_bad: int, n: int, first, adapter_scale=None) -> str:
    """The error for log-probabilities that came out NaN or inf: the setting to change first (``adapter_scale`` above
    1, ``dtype`` or ``quantization``), what happened in ``n_bad`` of ``n`` rows (``first``: the first such row's id),
    and the fix."""
    rows = f"{n_bad} of {n} rows scored here (first: {first!r}) have log-probabilities that are NaN or inf"
    if adapter_scale is not None and adapter_scale > 1:
        return (f"adapter_scale: {adapter_scale!r}: {rows}: the adapter merged at {adapter_scale!r} times its strength "
                "makes the model compute them. Use a smaller adapter_scale (1: the adapter as trained). Nothing "
                "non-finite was written")
    if quantization == "8bit":
        return (f"quantization: 8bit: {rows}: LLM.int8 casts each layer's input to float16, and this model's "
                f"activations overflow float16's range (±{FLOAT16_MAX:,.0f}). Use quantization: 4bit (bf16 compute) "
                "or none. Nothing non-finite was written")
    if dtype == "float16":
        return (f"dtype: float16: {rows}: this model's activations overflow float16's range (±{FLOAT16_MAX:,.0f}). "
                "Use dtype: bfloat16 (the same memory and float32's range; GPUs before Ampere, such as Colab's T4, "
                "run it slower) or float32. Nothing non-finite was written")
    return (f"dtype: {dtype}: {rows} even at this precision, so the model itself computes them (broken weights "
            "or config); check the model folder, and that it scores finite numbers in float32. Nothing non-finite "
            "was written")
