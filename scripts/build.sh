#!/usr/bin/env bash
# Installs what is missing (Debian 12, as root), then configures and builds verlpp into build/.
# Used by both README commands and by .ci/run. BUILD_DIR and BUILD_TYPE may be overridden.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake ninja-build ccache pkg-config
          libtorch-dev libfmt-dev nlohmann-json3-dev catch2 libboost-dev libdlpack-dev
          libgloo-dev libcli11-dev libicu-dev
          # the parquet reader's codecs (SNAPPY, ZSTD, GZIP)
          libsnappy-dev libzstd-dev zlib1g-dev
          # yaml-cpp: YAML config files (verlpp train CONFIG.yaml).
          libyaml-cpp-dev
          # protobuf: the tests read TensorBoard event files with the protobuf library (a minimal
          # event.proto compiled by protoc).
          libprotobuf-dev protobuf-compiler
          # clang-format 14: the format check (tests/format/format_check.sh) runs in the test suite.
          clang-format
          # Debian's LibTorch calls whichever libblas.so.3 is selected; without OpenBLAS that is the
          # reference BLAS, which made training ~5x slower (measured on the main job).
          libopenblas0-pthread
          # hipcc (HIP 5.2 with clang 15, libamdhip64) to compile the rocm plugin; no AMD GPU is
          # needed to build it. About 626 MiB installed, 26 s to install here (docs/building.md).
          hipcc)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "build.sh: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# ccache keys on relative paths under the checkout, so a fresh clone elsewhere (CI) reuses the
# objects an earlier build on this machine compiled.
export CCACHE_BASEDIR="$PWD"

BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-Release}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "$JOBS"
