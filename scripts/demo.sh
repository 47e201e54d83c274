#!/usr/bin/env bash
# Set up, then run the demo sweep (generate → score → analyze) on the embedded default model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
.venv/bin/python -m nbutils sweep params/demo.yaml "$@"
echo "results: in the run_dir above (report.html, summary.json, tables/, figures/, notebooks/)"
