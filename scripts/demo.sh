#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, runs the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
./build/hyperpool --version
./build/hyperpool selfcheck
