#!/usr/bin/env bash
# The vendor's path, end to end: install this build's `sdk` and `runtime` components to a fresh
# prefix, copy the installed template plugin (and then the C99 example), build it OUT OF TREE
# with find_package(verlpp) against that prefix only, and run the installed verlpp-plugin-check
# on the result. Fails at
# the first step that fails, naming it. Also fails if the SDK's CMake package mentions torch
# (consumers must not need LibTorch) or if configure found verlpp anywhere but the prefix.
# Usage: out_of_tree_plugin.sh <verlpp build dir> [DLPack include dir: given to the consumer as
# VERLPP_DLPACK_INCLUDE_DIR, as a vendor whose DLPack is not in a system folder would]
set -euo pipefail
build_dir=$(cd "$1" && pwd)
dlpack_dir=${2:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/verlpp-oot.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
step() { echo "== $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

step "install components sdk, runtime into $prefix"
for component in sdk runtime; do
  cmake --install "$build_dir" --prefix "$prefix" --component "$component" >"$work/install-$component.log" ||
    { cat "$work/install-$component.log"; fail "cmake --install --component $component"; }
done
config_dir=$prefix/lib/cmake/verlpp
for f in verlppConfig.cmake verlppConfigVersion.cmake verlppSdkTargets.cmake VerlppPlugin.cmake; do
  [ -f "$config_dir/$f" ] || fail "the install lacks $config_dir/$f"
done
[ -x "$prefix/bin/verlpp-plugin-check" ] || fail "the install lacks bin/verlpp-plugin-check"
[ -f "$prefix/include/verlpp/plugin_abi.h" ] || fail "the install lacks include/verlpp/plugin_abi.h"
[ -f "$prefix/include/verlpp/sdk/half_float.hpp" ] || fail "the install lacks include/verlpp/sdk/half_float.hpp"
[ -f "$prefix/share/verlpp/examples/c99_plugin/c99_plugin.c" ] || fail "the install lacks share/verlpp/examples/c99_plugin"
# docs/plugin-guide.md names bin/verlpp-bench: installed whenever the build made it.
if [ -x "$build_dir/bin/verlpp-bench" ] && [ ! -x "$prefix/bin/verlpp-bench" ]; then
  fail "the build has bin/verlpp-bench but the install lacks it"
fi
if grep -li torch "$config_dir"/verlppSdkTargets*.cmake; then fail "the SDK's exported targets mention torch (files above)"; fi
if grep -Eil "find_(package|dependency) *\( *Torch" "$config_dir"/*.cmake; then fail "the SDK's package looks for LibTorch (files above)"; fi

step "copy the installed template and build it out of tree"
cp -r "$prefix/share/verlpp/plugin_template" "$work/my_plugin"
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
dlpack=()
case "$dlpack_dir" in ""|/usr/include|/usr/local/include) ;; *) dlpack=(-DVERLPP_DLPACK_INCLUDE_DIR="$dlpack_dir") ;; esac
# Only the fresh prefix may provide verlpp: no package registry, no other prefix.
cmake -S "$work/my_plugin" -B "$work/build" "${generator[@]}" "${dlpack[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; fail "configure of the out-of-tree plugin"; }
grep -q "template plugin: verlpp [0-9.]* from $config_dir" "$work/configure.log" ||
  { cat "$work/configure.log"; fail "configure did not take verlpp from $config_dir"; }
cmake --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "build of the out-of-tree plugin"; }
plugin=$work/build/libverlpp-plugin-template.so
[ -f "$plugin" ] || fail "the build produced no $plugin"

step "run the installed verlpp-plugin-check on it"
# The installed runner must find the installed libverlpp by itself: LD_LIBRARY_PATH keeps only
# folders without a libverlpp (a GPU host keeps Debian's libraries, e.g. ICU's, under /opt/deps
# and needs those; a transitive dependency is not found through the installed RUNPATH).
kept=()
IFS=: read -r -a entries <<< "${LD_LIBRARY_PATH:-}"
for d in "${entries[@]}"; do
  [ -n "$d" ] && ! compgen -G "$d/libverlpp*.so*" >/dev/null && kept+=("$d")
done
library_path=$(IFS=:; echo "${kept[*]}")
env -u VERL_HARDWARE_PLUGIN -u VERLPP_PLUGIN_PATH LD_LIBRARY_PATH="$library_path" \
  "$prefix/bin/verlpp-plugin-check" "$plugin" || fail "verlpp-plugin-check $plugin"

step "build the installed C99 example out of tree and check it"
cp -r "$prefix/share/verlpp/examples/c99_plugin" "$work/c99_plugin"
cmake -S "$work/c99_plugin" -B "$work/c99_build" "${generator[@]}" "${dlpack[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$work/c99_configure.log" 2>&1 ||
  { cat "$work/c99_configure.log"; fail "configure of the C99 example"; }
cmake --build "$work/c99_build" >"$work/c99_build.log" 2>&1 || { cat "$work/c99_build.log"; fail "build of the C99 example"; }
c99=$work/c99_build/libverlpp-plugin-c99_example.so
env -u VERL_HARDWARE_PLUGIN -u VERLPP_PLUGIN_PATH LD_LIBRARY_PATH="$library_path" \
  "$prefix/bin/verlpp-plugin-check" --ranks '' "$c99" || fail "verlpp-plugin-check $c99"
echo "out-of-tree plugins: the template and the C99 example built against $prefix and passed verlpp-plugin-check"
