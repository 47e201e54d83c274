#!/usr/bin/env bash
# Regenerate the sample runs that ship with the repository under outputs/samples/<study>/, so that every study's
# analysis notebook runs with no model (`-p run_dir outputs/samples/<study>`): a small dataset of each study and its
# scores by the embedded default model, on the CPU in float32 so that every machine gives the same numbers. Only the
# dataset, the score file and their sidecars are kept (and the folder's README.md); the analysis makes the rest.
#
#   bash scripts/make_sample.sh                  # every study: monotonicity negation personas custom
#   bash scripts/make_sample.sh negation custom  # only these
#   bash scripts/make_sample.sh control          # the positive control with twin prompts: params/control_twins.yaml's dataset, both models
#   bash scripts/make_sample.sh robustness       # the control's design over every prompt variant, both models
#   SCORE_THREADS=1 bash scripts/make_sample.sh  # score with one CPU thread (a shared host: the scores are the same)
#
# Each sample replaces outputs/samples/<study>/ as a whole (it says so). It is made in a folder of its own and moved in
# place: the samples are read-only to every writer of the suite (nbutils refuses to write into outputs/samples/).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's nbutils, in the kernels too
PY=.venv/bin/python
MODEL=smollm2-135m-instruct
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# sample → its dataset parameters, the model parameter files (comma-separated), the dataset file the run holds and
# the study that generates it
dataset_of() {
    case "$1" in
        monotonicity) echo "params/monotonicity/datasets/demo.yaml params/models/$MODEL.yaml prompts" ;;
        control) echo "params/monotonicity/datasets/control_twins.yaml params/models/$MODEL.yaml,params/models/smollm2-135m-upward-control.yaml prompts monotonicity" ;;
        robustness) echo "params/monotonicity/datasets/robustness_control.yaml params/models/$MODEL.yaml,params/models/smollm2-135m-upward-control.yaml prompts monotonicity" ;;
        negation) echo "params/negation/datasets/ci.yaml params/negation/models/smollm2.yaml stimuli" ;;
        personas) echo "params/personas/datasets/ci.yaml params/models/$MODEL.yaml personas" ;;
        custom) echo "params/custom/datasets/example_yesno.yaml params/models/$MODEL.yaml items" ;;
        *) echo "make_sample.sh: study must be one of monotonicity negation personas custom control robustness, got '$1'" >&2
           return 1 ;;
    esac
}

make_one() {
    local study=$1 data models name kind model
    read -r data models name kind < <(dataset_of "$study")
    kind=${kind:-$study}
    local run="$work/$study/run" keep="$work/$study/sample" dest="outputs/samples/$study"
    local generate
    generate=$("$PY" -c "from nbutils import studies; print(studies.get('$kind').notebooks['generate'])")
    "$PY" -m nbutils run "$generate" "$work/$study/01.ipynb" -f "$data" -p run_dir "$run"
    for model in ${models//,/ }; do
        "$PY" -m nbutils run notebooks/score.ipynb "$work/$study/score.ipynb" -f "$model" \
            -p run_dir "$run" -p device cpu -p dtype float32 ${SCORE_THREADS:+-p threads "$SCORE_THREADS"}
    done
    mkdir -p "$keep/scores"
    cp "$run/$name.parquet" "$run/$name.json" "$keep/"
    cp "$run"/scores/*.parquet "$run"/scores/*.json "$keep/scores/"
    cp "$dest/README.md" "$keep/" 2>/dev/null || true
    [ -d "$dest" ] && echo "replacing $dest/ (its dataset, scores and anything an analysis wrote there)"
    rm -rf "$dest"
    mkdir -p outputs/samples
    mv "$keep" "$dest"
    du -sh "$dest"
}

for study in "${@:-monotonicity negation personas custom}"; do
    for s in $study; do make_one "$s"; done
done
echo "samples → outputs/samples/ (analyse one: python -m nbutils run notebooks/<study>/03_analyze.ipynb -p run_dir outputs/samples/<study>)"
