"""Loading a model as resolved settings say (``settings.EngineSettings.resolve``): weights in the chosen dtype or
bitsandbytes precision on the chosen device, the float32 twin that re-scores close calls, and the checks that the
model is what the scorer needs. It carries out decisions; it makes none."""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from functools import cached_property

import torch

from ...score_settings import EMBEDDED
from .adapters import apply_adapter
from .embedded import load_embedded
from .host import count_parameters, free_gpu_bytes, set_threads
from .quantization import quantization_config, quantization_details

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
    """A model ready for scoring, with what is needed to reproduce it."""

    model: torch.nn.Module
    tokenizer: object
    meta: dict = field(default_factory=dict)
    reference: torch.nn.Module | None = None  # float32 twin used to re-score close calls
    settings: object = None  # the resolved ``settings.EngineSettings`` it was loaded with


class ModelSource:
    """A model that is not embedded, opened on first use: its config and tokenizer (a clear error naming the model
    when neither loads), and its parameter count (for the GPU's memory decisions)."""

    def __init__(self, model: str, revision: str | None = None):
        self.model, self.kwargs = model, ({"revision": revision} if revision else {})

    @cached_property
    def _opened(self):
        from transformers import AutoConfig, AutoTokenizer

        try:
            return (AutoConfig.from_pretrained(self.model, **self.kwargs),
                    AutoTokenizer.from_pretrained(self.model, **self.kwargs))
        except (OSError, ValueError) as err:
            raise ValueError(
                f"model: cannot load {self.model!r} ({type(err).__name__}: {str(err).splitlines()[0]}). Give "
                f"an embedded model ({', '.join(EMBEDDED)}), a local folder in Hugging Face format, or a hub id "
                "already in the local cache (HF_HUB_OFFLINE=1 forbids downloads)") from None

    @property
    def config(self):
        return self._opened[0]

    @property
    def tokenizer(self):
        return self._opened[1]

    def n_params(self) -> int:
        return self._n_params

    @cached_property
    def _n_params(self) -> int:
        return count_parameters(self.config)


def load(settings, source: ModelSource | None = None) -> LoadedModel:
    """Load the model of resolved ``settings`` (``source``: the opened model when it is not embedded)."""
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    r = settings.need_resolved()
    set_threads(r.threads)
    t0 = time.perf_counter()
    meta = settings.sidecar()
    qconf = quantization_config(r.quantization)
    torch_dtype = torch.float32 if r.float32_twin else TORCH_DTYPES[r.dtype]  # the twin is the loaded float32 model
    # the whole model on the one device: an "auto" map could offload layers to the CPU or disk, where bitsandbytes
    # runs them unquantized in float32 without a word
    on_device = {} if qconf is None else dict(quantization_config=qconf, device_map={"": r.device})
    if settings.embedded:
        net, tok, extra = load_embedded(settings.model, torch_dtype, **on_device)
        meta.update(extra)
    else:
        source = source or ModelSource(settings.model, settings.revision)
        tok = source.tokenizer
        check_architecture(source.config, settings.masked)
        auto_cls = AutoModelForMaskedLM if settings.masked else AutoModelForCausalLM
        net = auto_cls.from_pretrained(settings.model, **source.kwargs, dtype=torch_dtype, **on_device)
        meta["revision"] = getattr(net.config, "_commit_hash", None) or settings.revision
    if settings.adapter:  # merged before the device move and the float32 twin, so both carry it
        net, adapter_meta = apply_adapter(net, settings.adapter, settings.model, settings.base_names,
                                          settings.adapter_scale)
        meta.update(adapter_meta)
    if r.quantization == "none":
        net = net.to(r.device)
    else:
        meta["quantization_details"] = check_quantized(net, settings.model, r.quantization, qconf, r.device)
    net.eval()
    reference = None
    if r.float32_twin:
        reference, net = net, _half_copy(net, TORCH_DTYPES[r.dtype])
    if r.device.startswith("cuda"):
        settings = settings.after_load(net.config, free_gpu_bytes())
        meta["token_budget"] = settings.resolved.token_budget
    meta.update(load_seconds=round(time.perf_counter() - t0, 2), threads=torch.get_num_threads(),
                n_parameters=sum(p.numel() for p in net.parameters()),
                chat_template_available=bool(getattr(tok, "chat_template", None)))
    return LoadedModel(net, tok, meta, reference, settings)


def check_quantized(net: torch.nn.Module, model: str, quantization: str, qconf, device: str) -> dict:
    """What bitsandbytes loaded (``quantization_details``); an error when it put modules off the device (where they
    would run unquantized) or quantized no layer."""
    details = quantization_details(net, quantization, qconf)
    elsewhere = sorted({v for v in details["device_map"].values() if v in ("cpu", "disk") and v != device})
    if elsewhere:
        raise ValueError(f"quantization: {quantization} placed modules on {elsewhere} beside {device}; bitsandbytes "
                         "would run them unquantized. Use a GPU with room for the whole model, or 4bit")
    if not details["quantized_linear_layers"]:
        raise ValueError(f"quantization: {quantization} was asked for, but no layer of {model!r} was quantized")
    return details


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
    return copy.deepcopy(model).to(dtype).eval()
