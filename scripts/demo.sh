#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, runs the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
./build/hyperpool --version
# The seed's benchmark across a simulated WAN of RTT 125 ms: direct vs pooled
# vs cached, with a scratch PostgreSQL 15 (about a minute; results in ./demo-results).
./build/hyperpool demo
