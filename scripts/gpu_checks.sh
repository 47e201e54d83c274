#!/usr/bin/env bash
# The GPU checks, one step per call (each fits a 10-minute slot), on a CUDA machine with PyTorch and transformers.
# Wheels in .whl/ (scripts/gpu_kit.sh) are installed into a temporary folder first, so the machine needs no internet.
# Results go to $OUT (default benchmarks/results), named gpu-<card>-<step>.json; the card and driver to gpu-card.txt.
#
#   bash scripts/gpu_checks.sh tests            # the engine's tests, CUDA ones included (not skipped)
#   bash scripts/gpu_checks.sh checks           # bf16/float16/8-bit/4-bit vs float32, batch invariance (200 prompts, 1.7B)
#   bash scripts/gpu_checks.sh scale smollm2-1.7b|olmo2-7b|olmo2-13b   # throughput against the card's matmul ceiling
#   bash scripts/gpu_checks.sh resume           # 2,000 prompts, kill -9 mid-run, resume: same sha256 as uninterrupted
#
# Extra arguments after the step go to the script (e.g. --precisions bfloat16,4bit or --n 100).
# Without a CUDA GPU visible to $PYTHON's PyTorch every step is refused (exit 2) before anything is written: these are
# GPU measurements. A dry run of a benchmark script on a CPU:
#   python benchmarks/gpu_checks.py --device cpu --layers 1 --n 8
set -euo pipefail
cd "$(dirname "$0")/.."
step=${1:?usage: bash scripts/gpu_checks.sh tests|checks|scale CONFIG|resume [script arguments]}
shift
case "$step" in
  tests|checks|scale|resume) ;;
  *) echo "gpu_checks.sh: unknown step '$step' (tests, checks, scale, resume)" >&2; exit 2 ;;
esac
PYTHON=${PYTHON:-python3}
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "gpu_checks.sh: no Python '$PYTHON' (PYTHON=/path/to/python picks the one with PyTorch)" >&2; exit 2
fi
# one start of Python: whether it has PyTorch (exit 3 without), and whether that sees a CUDA GPU (exit 4 without)
found=0
torch_version=$("$PYTHON" -c 'import sys
try:
    import torch
except ImportError:
    sys.exit(3)
print(torch.__version__)
sys.exit(0 if torch.cuda.is_available() else 4)' 2>/dev/null) || found=$?
if [ "$found" = 3 ] || { [ "$found" != 0 ] && [ "$found" != 4 ]; }; then
  echo "gpu_checks.sh: $PYTHON ($(command -v "$PYTHON")) cannot import torch; run it with the Python that has PyTorch" \
       "and transformers (PYTHON=/path/to/python bash scripts/gpu_checks.sh $step)" >&2; exit 2
fi
if [ "$found" = 4 ]; then
  echo "gpu_checks.sh: no CUDA GPU is visible to $PYTHON's PyTorch ($torch_version), so the GPU checks are not run" \
       "and nothing is written; run them on a CUDA machine (a dry run of a script on this CPU:" \
       "$PYTHON benchmarks/gpu_checks.py --device cpu --layers 1 --n 8)" >&2; exit 2
fi
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/nbutils-site .whl/*.whl
  export PYTHONPATH=/tmp/nbutils-site:$PWD${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
TOK=()
[ -d .whl/tokenizer ] && TOK=(--tokenizer .whl/tokenizer)
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu-card.txt"
else  # CUDA without nvidia-smi: the card as PyTorch names it
  "$PYTHON" -c 'import torch; print(torch.cuda.get_device_name(0) + ", driver unknown")' | tee "$OUT/gpu-card.txt"
fi
card=$(head -n1 "$OUT/gpu-card.txt" | cut -d, -f1 | tr -cs 'A-Za-z0-9' '-' | tr 'A-Z' 'a-z' | sed 's/^nvidia-//; s/-$//')
case "$step" in
  tests)
    "$PYTHON" -m pytest -p no:cacheprovider -q -rs -m "not notebooks and not slow" tests/engine "$@" 2>&1 | tee "$OUT/gpu-$card-tests.log" ;;
  checks)
    "$PYTHON" benchmarks/gpu_checks.py "${TOK[@]}" --out "$OUT/gpu-$card-checks.json" "$@" ;;
  scale)
    config=${1:?usage: bash scripts/gpu_checks.sh scale smollm2-1.7b|olmo2-7b|olmo2-13b}
    shift
    "$PYTHON" benchmarks/gpu_scale.py --config "benchmarks/configs/$config.json" "${TOK[@]}" \
      --out "$OUT/gpu-$card-scale-$config.json" "$@" ;;
  resume)
    "$PYTHON" benchmarks/gpu_resume.py "${TOK[@]}" --out "$OUT/gpu-$card-resume.json" "$@" ;;
  *)
    echo "gpu_checks.sh: unknown step '$step' (tests, checks, scale, resume)" >&2; exit 2 ;;
esac
