"""bitsandbytes: the config for 8-/4-bit weights, whether this CPU runs them, what was really loaded; and loading
without the libraries' chatter (progress bars, notices that say nothing about the results)."""
from __future__ import annotations

import contextlib
import functools
import logging
import warnings

import torch
from tqdm import TqdmWarning

from ...score_settings import QUANTIZATIONS, check_choice

# tqdm.auto (imported by transformers and huggingface_hub) warns once per kernel when ipywidgets is missing, then draws
# a plain text bar, which is what a papermill run records anyway: the warning says nothing about the results
warnings.filterwarnings("ignore", message="IProgress not found", category=TqdmWarning)



def quantization_config(quantization: str):
    """The bitsandbytes config for ``8bit`` / ``4bit`` (NF4, bf16 compute, double quantization); None for ``none``."""
    check_choice("quantization", quantization, QUANTIZATIONS)
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
