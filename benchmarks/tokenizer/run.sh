#!/usr/bin/env bash
# Tokenizer throughput beside the JavaScript peer, measured in one run.
# Usage: benchmarks/tokenizer/run.sh [BUILD_DIR] [PASSES]   (after building verlpp-bench-tokenizer)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
project=$build/tokenizer_peer
bash "$src/tests/model/tokenizer_peer/run.sh" "$src" "$project" "" install-only
cp "$src/benchmarks/tokenizer/bench_peer.mjs" "$project/"
cd "$project"
node bench_peer.mjs "$build/bin/verlpp-bench-tokenizer" "$src/examples/tiny" "${2:-20}"
