#!/usr/bin/env bash
# Installs everything teengine needs to build and test, from Debian 12 packages. Idempotent, non-interactive;
# run as root (or with sudo available). CUDA is optional: with nvcc on PATH the build enables it (-Dcuda=auto).
set -euo pipefail
packages=(
  g++ meson ninja-build pkg-config         # toolchain and build
  libyaml-cpp-dev                          # model specs (linked statically)
  libgtest-dev googletest                  # tests
  nlohmann-json3-dev                       # safetensors headers, --json output
  libcli11-dev                             # the teengine command line
  libopenblas-dev                          # the baseline of the CPU GEMM benchmark (tools/bench)
  libgloo-dev                              # CPU collectives between processes (parallel.comm: gloo)
  libcpp-httplib-dev                       # HTTP/1.1 for the example server (examples/serve) and its load generator
  clang libclang-rt-14-dev                 # libFuzzer targets and sanitizer builds
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
