#!/usr/bin/env bash
# Fresh machine → dependencies, release build, and the default model (on the GPU when present, else the CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/build/setup.sh build  # configures once; notes a build/ made without header tracking
ninja -C build
build/tools/teengine/teengine info
exec build/tools/teengine/teengine run models/tiny.yaml "$@"
