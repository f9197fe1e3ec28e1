#!/usr/bin/env bash
# Set up .venv and run Shipyard's main job on its embedded defaults (state under $SHIPYARD_HOME).
set -euo pipefail
cd "$(dirname "$0")/.."
SHIPYARD_EXTRAS=${SHIPYARD_EXTRAS:-dev} bash scripts/setup.sh
exec .venv/bin/shipyard demo "$@"
