#!/usr/bin/env bash
# Prepare .whl/ for a GPU machine that has PyTorch and transformers but cannot reach PyPI or a model hub (a cluster
# node, an air-gapped server): the wheels it lacks for scoring (bitsandbytes, gguf, submitit, at the versions installed here) for its
# Python (GPU_PYTHON, default 3.12, x86-64 Linux), and the embedded model's tokenizer saved as a folder, around which
# the GPU benchmarks build random-weight models. Run it here after scripts/setup.sh; copy the repository with .whl/ to
# the GPU machine and run scripts/gpu_checks.sh there.
set -euo pipefail
cd "$(dirname "$0")/.."
PYV=${GPU_PYTHON:-3.12}
mkdir -p .whl
rm -f .whl/*.whl
# the wheels such a machine lacks, at the versions installed here: bitsandbytes (8-/4-bit), gguf (the engine imports
# it), submitit (the run store's cluster path)
WHEELS=$(.venv/bin/python -c 'import importlib.metadata as m; print(" ".join(f"{p}=={m.version(p)}" for p in
("bitsandbytes", "gguf", "submitit")))')
platforms=()
for tag in manylinux_2_24_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
           manylinux1_x86_64; do platforms+=(--platform "$tag"); done
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
  "${platforms[@]}" -d .whl $WHEELS
HF_HUB_OFFLINE=1 PYTHONPATH=benchmarks .venv/bin/python -c \
  'from gpu_scale import load_tokenizer; load_tokenizer(None).save_pretrained(".whl/tokenizer")' 
echo "gpu kit: $(ls .whl/*.whl | xargs -n1 basename | tr '\n' ' ')and .whl/tokenizer/ ($(du -sh .whl | cut -f1) in all)"
