#!/usr/bin/env bash
# Set up .venv and run lint, format check, type checks and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check src tests benchmarks
.venv/bin/ruff format --check src tests benchmarks
.venv/bin/mypy
.venv/bin/pytest "$@"
