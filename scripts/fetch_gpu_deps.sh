#!/usr/bin/env bash
# Downloads (apt-get download: nothing installed) every Debian package that a build of verlpp on
# a GPU host without apt needs beside the host's own LibTorch and CUDA, into DIR (default
# .offline-deps, ignored by git), plus DIR/offline-deps.sh, which unpacks them there:
#   bash scripts/fetch_gpu_deps.sh                     # here, once (run `apt-get update` first)
#   bash .offline-deps/offline-deps.sh unpack .offline-deps /opt/deps    # there (run_gpu_perf.sh,
#                                                      # gpu_check.sh do it)
# The list is the build's: fmt, nlohmann-json, Catch2, Boost (headers), dlpack, CLI11, ICU (the
# tokenizer's normalisation), snappy, zstd and zlib (the parquet reader's codecs), yaml-cpp (YAML
# configs, MLflow's meta.yaml), protobuf with protoc (the tests' TensorBoard event reader) and
# gloo with the libraries it links. A build there that misses
# one fails at configure time ("Failed to find all ICU components", ...).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.offline-deps}
PKGS=(libfmt-dev libfmt9 nlohmann-json3-dev catch2 libboost1.74-dev libdlpack-dev libcli11-dev libicu-dev libicu72
      libsnappy-dev libsnappy1v5 libzstd-dev libzstd1 zlib1g-dev libyaml-cpp-dev libyaml-cpp0.7
      libprotobuf-dev libprotobuf32 libprotobuf-lite32 libprotoc32 protobuf-compiler
      libgloo-dev libgloo0 libibverbs1 libhiredis0.14 libnl-3-200 libnl-route-3-200)
mkdir -p "$DIR"
# apt-get download runs as the _apt user where it can; a root-owned folder only costs a warning.
(cd "$DIR" && apt-get download -qq "${PKGS[@]}")
cat > "$DIR/offline-deps.sh" <<'UNPACK'
#!/usr/bin/env bash
# offline-deps.sh unpack DIR PREFIX: every .deb in DIR unpacked under PREFIX (no dpkg database,
# no maintainer scripts); prints PREFIX/usr, the CMAKE_PREFIX_PATH entry.
set -euo pipefail
[ "${1:-}" = unpack ] && [ -n "${2:-}" ] && [ -n "${3:-}" ] || { echo "usage: $0 unpack DIR PREFIX" >&2; exit 2; }
mkdir -p "$3"
for f in "$2"/*.deb; do dpkg -x "$f" "$3"; done
echo "$3/usr"
UNPACK
chmod +x "$DIR/offline-deps.sh"
echo "fetch_gpu_deps.sh: $(ls "$DIR"/*.deb | wc -l) packages in $DIR ($(du -sh "$DIR" | cut -f1))"
