#!/usr/bin/env bash
# Regenerate outputs/sample/, the sample run that ships with the repository so that the analysis notebooks run with no
# model (`-p run_dir outputs/sample`): the demo prompts (params/monotonicity/datasets/demo.yaml) and their scores by the
# embedded default model, on the CPU in float32 so that every machine gives the same numbers. Only the dataset, the score
# file and their sidecars are kept; the analysis makes the rest. Replaces outputs/sample/ as a whole (it says so).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PY=.venv/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run="$work/run"
"$PY" -m nbutils run notebooks/monotonicity/01_generate.ipynb "$work/01_generate.ipynb" \
    -f params/monotonicity/datasets/demo.yaml -p run_dir "$run"
"$PY" -m nbutils run notebooks/score.ipynb "$work/score.ipynb" -f params/models/smollm2-135m-instruct.yaml \
    -p run_dir "$run" -p device cpu -p dtype float32
keep="$work/sample"
mkdir -p "$keep/scores"
cp "$run"/prompts.parquet "$run"/prompts.json "$keep/"
cp "$run"/scores/smollm2-135m-instruct.parquet "$run"/scores/smollm2-135m-instruct.json "$keep/scores/"
cp outputs/sample/README.md "$keep/" 2>/dev/null || true
[ -d outputs/sample ] && echo "replacing outputs/sample/ (its dataset, scores and anything an analysis wrote there)"
rm -rf outputs/sample
mkdir -p outputs
mv "$keep" outputs/sample
du -sh outputs/sample
echo "sample run → outputs/sample (analyse it: python -m nbutils run notebooks/monotonicity/03_analyze.ipynb -p run_dir outputs/sample)"
