"""Loading a model for scoring: resolve the settings for this host once, say what is worth saying once, then load.

``load_model(settings)`` takes a validated ``settings.EngineSettings`` (or the same parameters by name, for scripts),
resolves it (``EngineSettings.resolve``: device, dtype, quantization, re-scoring margin, memory) and hands it to
``loading.load``, which carries it out.
"""
from __future__ import annotations

import warnings

from ..score_settings import DEFAULT_MODEL, SETTINGS
from .loading.host import Host
from .loading.load import LoadedModel, ModelSource, load
from .loading.quantization import quiet_loading
from .settings import EngineSettings


@quiet_loading()
def load_model(model: str | EngineSettings = DEFAULT_MODEL, *, scorer: str | None = None, host: Host | None = None,
               **params) -> LoadedModel:
    """Load a model by embedded name, hub id or local folder, as ``model`` (an ``EngineSettings``) or the settings
    given by name say (``quantization``, ``dtype``, ``device``, ``revision``, ``threads``, ``rescore_margin``,
    ``masked``, ``adapter``: defaults as ``EngineSettings``'s; ``scorer``: the dataset's scorer kind, sentences for a
    masked LM by default); keep a float32 twin when re-scoring is on. ``host``: the host to resolve for (probed when
    not given). The resolved settings are ``LoadedModel.settings``; their warnings are printed once.

    ``dtype: auto`` on a native-bf16 CPU is the fast path (bf16 prefix, each prompt's last ``split.FLOAT32_TAIL``
    tokens in float32, close calls re-scored whole in float32 with a margin calibrated on the run's prompts:
    ``rescore_margin: auto``); float32 on other CPUs; bf16 on GPUs. ``meta["rescore_margin"]`` is the margin this
    model allows (0 without a float32 twin, ``"auto"`` when the answer-choice scorer is to calibrate it).
    ``scorer: sentences`` (a dataset scored as sentences) has no decisions to re-score, so the margin is 0 and
    ``dtype: auto`` exact float32 on a CPU. ``quantization: auto`` is ``none`` on CPU and the most exact precision
    that fits the GPU.
    """
    if isinstance(model, EngineSettings):
        settings = model
    else:
        kind = scorer or ("sentences" if params.get("masked") is True else SETTINGS["scorer"])
        settings = EngineSettings(model=model, scorer=kind, **params)
    source = None if settings.embedded else ModelSource(settings.model, settings.revision)
    settings = settings.resolve(host or Host.probe(), None if source is None else source.n_params)
    say_warnings(settings)
    return load(settings, source)


def say_warnings(settings: EngineSettings) -> None:
    """Print, once, what the resolved settings warn of (8-bit's slowness is also a Python warning)."""
    for line in settings.need_resolved().warnings:
        if line.startswith("quantization: 8bit:"):
            warnings.warn(line, stacklevel=3)
        print(line)
