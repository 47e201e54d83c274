#!/usr/bin/env bash
# Set up, then run the whole test suite offline (unit tests, statistics, papermill smoke runs with the real model).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/python -m pytest "$@"
