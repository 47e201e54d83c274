"""The scoring engine: loads models and scores a run's dataset (knows models and tokens, never a study).

It needs the packages of the ``score`` extra (PyTorch, transformers, accelerate, gguf; bitsandbytes for 8-/4-bit);
the base install analyses runs without them. Importing the engine without them is one ImportError saying how to
install them, not a traceback from deep inside a loader.
"""
from __future__ import annotations

import importlib.util

SCORE_PACKAGES = ("torch", "transformers", "accelerate", "gguf")  # what every model load needs
INSTALL_HINT = 'pip install "llm-bias-probes[score]"'



def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a broken install, or an import hook that refuses it
        return False


_missing = [name for name in SCORE_PACKAGES if not _installed(name)]
if _missing:
    raise ImportError(f"scoring a model needs {', '.join(_missing)}, which this environment lacks: the base install "
                      f"only analyses runs. Install the score extra: {INSTALL_HINT} (from a checkout: "
                      f'pip install -e ".[score]"), then restart the kernel')
