"""What this machine offers for scoring: the device, native bf16 on the CPU, threads, GPU memory and what fits in it."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

ACTIVATION_ROOM = 0.15  # share of free GPU memory kept for activations when choosing a precision
BYTES_PER_PARAM = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0, "8bit": 1.0, "4bit": 0.5}


@dataclass(frozen=True)
class Host:
    """A snapshot of the host, read once: whether CUDA is there (and has bf16), whether the CPU has native bf16, how
    many cores this process may use, and a reader of the GPU's free memory (called only where a decision needs it)."""

    cuda: bool
    cuda_bf16: bool
    cpu_native_bf16: bool
    cores: int
    free_gpu_bytes: Callable[[], int]

    @classmethod
    def probe(cls) -> "Host":
        cuda = torch.cuda.is_available()
        return cls(cuda=cuda, cuda_bf16=bool(cuda and torch.cuda.is_bf16_supported()),
                   cpu_native_bf16=cpu_supports_bf16(), cores=available_cores(), free_gpu_bytes=free_gpu_bytes)


def free_gpu_bytes() -> int:
    """Free memory on the current CUDA device, in bytes."""
    return torch.cuda.mem_get_info()[0]


def resolve_device(device: str, cuda: bool | None = None) -> str:
    """``auto`` → ``cuda`` when available, else ``cpu``; validate explicit choices (``cuda``: whether CUDA is there,
    asked of torch when not given)."""
    if cuda is None:
        cuda = torch.cuda.is_available()
    if device == "auto":
        return "cuda" if cuda else "cpu"
    if device == "cpu" or device.startswith("cuda"):
        if device.startswith("cuda") and not cuda:
            raise ValueError(f"device: {device!r} was requested but CUDA is not available; use 'cpu' or 'auto'")
        return device
    raise ValueError(f"device: must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def cpu_supports_bf16(cpuinfo: str | None = None) -> bool:
    """True when this CPU has native bfloat16 matmul instructions (AVX512-BF16 or AMX), where bf16 is fast.

    oneDNN reports bf16 as "supported" on plain AVX-512 too, where it is emulated and ~3x slower than float32,
    so the CPU flags decide (``cpuinfo``: the text of /proc/cpuinfo, read when not given).
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    return any(f in cpuinfo.split() for f in ("avx512_bf16", "amx_bf16"))


def available_cores() -> int:
    """The cores this process may use (its CPU affinity where the OS tells it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def set_threads(threads: int | None) -> int:
    """Set torch's CPU threads: ``None`` → all cores this process may use."""
    if threads is None:
        threads = available_cores()
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads: must be a positive integer or None, got {threads!r}")
    torch.set_num_threads(threads)
    return threads


def count_parameters(config) -> int:
    """Exact parameter count of a model built from ``config``, without allocating its weights."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):  # unlike accelerate's init_empty_weights, this keeps tied embeddings tied
        m = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in m.parameters())


def estimate_weight_bytes(n_params: int, precision: str) -> int:
    """Weight memory for ``precision`` (a dtype name, ``8bit`` or ``4bit``); 4-bit adds ~6% for scales."""
    per = BYTES_PER_PARAM[precision] * (1.06 if precision == "4bit" else 1.0)
    return int(n_params * per)


def check_fits_gpu(n_params: int, precision: str, free_bytes: int | None = None) -> str:
    """Print-ready line of estimated weights vs free GPU memory; ValueError if it cannot fit."""
    need = estimate_weight_bytes(n_params, precision)
    if free_bytes is None:
        free_bytes = free_gpu_bytes()
    line = (f"{n_params / 1e9:.2f}B parameters in {precision}: ~{need / 2**30:.1f} GiB of weights; "
            f"{free_bytes / 2**30:.1f} GiB free on the GPU")
    if need > 0.95 * free_bytes:
        raise ValueError(f"quantization: the model does not fit: {line}. Try quantization='4bit' or a larger GPU")
    return line
