#!/usr/bin/env bash
# Set up, then run the whole test suite offline (unit tests, statistics, papermill smoke runs with the real model).
# Two pytest-xdist workers by default, each pinned to its own core (PYTEST_WORKERS=0 runs everything in one process);
# whole files go to one worker, so a module's shared fixtures (a real-model sweep) run once.
set -euo pipefail
cd "$(dirname "$0")/.."
export WITH_GEMMA=1  # the suite checks the second embedded model too (tests/engine/test_gemma.py)
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/python -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadfile "$@"
