#!/usr/bin/env bash
# A C++ program's path to verlpp as a library, end to end: install this build's `sdk`, `runtime`
# and `devel` components to a fresh prefix; check that libverlpp exports no fmt symbol; build
# examples/cpp OUT OF TREE against that prefix alone (find_package(verlpp REQUIRED) and
# target_link_libraries(app verlpp::verlpp), nothing more) and run its GRPO steps on the tiny
# model, which must print finite losses, a non-zero gradient norm and the constant learning
# rate; build a program on verlpp::algo alone; and check the package's components: the ones
# that exist resolve, an unknown one is named with the list, a missing one says what to install.
# Fails at the first step that fails, naming it.
# Usage: installed_example.sh <verlpp build dir> <verlpp source dir>
set -euo pipefail
build_dir=$(cd "$1" && pwd)
source_dir=$(cd "$2" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/verlpp-lib.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
step() { echo "== $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
# Only the given prefix may provide verlpp: no package registry, no other prefix.
# A log as one line (CMake wraps a package's message over several).
flat() { tr '\n' ' ' <"$1" | tr -s ' '; }
configure() {  # configure <source> <build> <prefix> <log>
  cmake -S "$1" -B "$2" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$3" \
        -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$4" 2>&1
}

install_components() {  # install_components <prefix> <component>...
  local to=$1; shift
  for component in "$@"; do
    cmake --install "$build_dir" --prefix "$to" --component "$component" >"$work/install-$component.log" 2>&1 ||
      { cat "$work/install-$component.log"; fail "cmake --install --component $component"; }
  done
}

step "install components sdk, runtime, devel into $prefix"
install_components "$prefix" sdk runtime devel
config_dir=$prefix/lib/cmake/verlpp
for f in verlppConfig.cmake verlppHost.cmake verlppHostTargets.cmake verlppAlgoTargets.cmake; do
  [ -f "$config_dir/$f" ] || fail "the install lacks $config_dir/$f"
done
library=$prefix/lib/libverlpp.so
[ -f "$library" ] || fail "the install lacks $library"

step "libverlpp exports the verlpp namespace, no fmt"
# (Outputs are captured whole first: `grep -q` ending a pipe early fails it under pipefail.)
exported=$(nm -D --defined-only "$library" | c++filt)
exported_fmt=$(grep 'fmt::' <<<"$exported" || true)
[ -z "$exported_fmt" ] || { head -20 <<<"$exported_fmt"; fail "$library exports fmt symbols (above)"; }
grep -q 'verlpp::rollout::RolloutEngine::generate' <<<"$exported" ||
  fail "$library does not export verlpp::rollout::RolloutEngine::generate"

step "build examples/cpp against the install"
cp -r "$source_dir/examples/cpp" "$work/example"
if grep -vE '^\s*#' "$work/example/CMakeLists.txt" | grep -E 'find_package|target_link_libraries' |
   grep -vE 'find_package\(verlpp REQUIRED\)|target_link_libraries\(grpo_step PRIVATE verlpp::verlpp\)'; then
  fail "examples/cpp/CMakeLists.txt needs more than find_package(verlpp REQUIRED) and verlpp::verlpp (above)"
fi
configure "$work/example" "$work/example-build" "$prefix" "$work/configure.log" ||
  { cat "$work/configure.log"; fail "configure of examples/cpp"; }
grep -q "grpo example: verlpp [0-9.]* from $config_dir" "$work/configure.log" ||
  { cat "$work/configure.log"; fail "configure did not take verlpp from $config_dir"; }
cmake --build "$work/example-build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "build of examples/cpp"; }

step "run the GRPO steps on the tiny model"
# The program must find the installed libverlpp by itself: LD_LIBRARY_PATH keeps only folders
# without a libverlpp (a GPU host keeps Debian's libraries, e.g. ICU's, under /opt/deps).
kept=()
IFS=: read -r -a entries <<< "${LD_LIBRARY_PATH:-}"
for d in "${entries[@]}"; do
  [ -n "$d" ] && ! compgen -G "$d/libverlpp*.so*" >/dev/null && kept+=("$d")
done
library_path=$(IFS=:; echo "${kept[*]}")
env -u VERL_HARDWARE_PLUGIN -u VERLPP_PLUGIN_PATH LD_LIBRARY_PATH="$library_path" \
  "$work/example-build/grpo_step" "$source_dir/examples/tiny" >"$work/run.log" 2>&1 ||
  { cat "$work/run.log"; fail "grpo_step exited non-zero"; }
cat "$work/run.log"
loaded=$(env LD_LIBRARY_PATH="$library_path" ldd "$work/example-build/grpo_step")
grep -q "$library" <<<"$loaded" || { echo "$loaded"; fail "grpo_step does not load $library"; }
python3 - "$work/run.log" <<'PY' || fail "grpo_step's output is not two steps of finite losses (above)"
import math, re, sys
rows = [re.match(r"step (\d+): score (\S+) pg_loss (\S+) grad_norm (\S+) lr (\S+)$", l.strip())
        for l in open(sys.argv[1]) if l.startswith("step ")]
assert len(rows) == 2 and all(rows), rows
for m in rows:
    score, loss, norm, lr = (float(m.group(i)) for i in range(2, 6))
    assert all(math.isfinite(v) for v in (score, loss, norm, lr)), m.group(0)
    assert 0 <= score <= 1, m.group(0)
    assert norm > 0, "no gradient: " + m.group(0)
    assert lr == 1e-3, m.group(0)
PY

step "a program on verlpp::algo alone (header-only, no libverlpp)"
mkdir -p "$work/algo"
cat >"$work/algo/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.18)
project(algo_only LANGUAGES CXX)
find_package(verlpp REQUIRED COMPONENTS algo)
add_executable(algo_only main.cpp)
target_link_libraries(algo_only PRIVATE verlpp::algo)
CM
cat >"$work/algo/main.cpp" <<'CPP'
#include <verlpp/algo/advantages.hpp>
#include <ATen/ops/ones.h>
#include <ATen/ops/tensor.h>
#include <cstdio>
int main() {
  verlpp::algo::AdvantageInputs in;
  in.token_level_rewards = at::tensor(std::vector<float>{0, 1, 0, 0, 0, 3}).view({3, 2});
  in.response_mask = at::ones({3, 2});
  in.index = {"a", "a", "b"};
  const at::Tensor adv = verlpp::algo::compute_advantage("grpo", in).advantages;
  // Group "a" has scores 1 and 0: advantages of opposite sign and equal size.
  const float a0 = adv[0][0].item<float>(), a1 = adv[1][0].item<float>();
  const bool ok = a0 > 0 && a1 < 0 && a0 + a1 < 1e-5f && a0 + a1 > -1e-5f;
  std::printf("grpo advantages %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
CPP
configure "$work/algo" "$work/algo-build" "$prefix" "$work/algo-configure.log" ||
  { cat "$work/algo-configure.log"; fail "configure of the verlpp::algo program"; }
cmake --build "$work/algo-build" >"$work/algo-build.log" 2>&1 ||
  { cat "$work/algo-build.log"; fail "build of the verlpp::algo program"; }
"$work/algo-build/algo_only" || fail "the verlpp::algo program"
loaded=$(ldd "$work/algo-build/algo_only")
if grep -q libverlpp <<<"$loaded"; then fail "the verlpp::algo program links libverlpp"; fi

step "the package's components"
probe() {  # probe <name> <prefix> <find_package arguments>: configures a project that only finds verlpp
  mkdir -p "$work/probe-$1"
  printf 'cmake_minimum_required(VERSION 3.18)\nproject(probe LANGUAGES CXX)\nfind_package(verlpp %s)\n' "$3" \
    >"$work/probe-$1/CMakeLists.txt"
  printf 'foreach(t IN ITEMS verlpp::verlpp verlpp::algo verlpp::plugin_sdk verlpp::plugin_check verlpp::cli)\n  if(TARGET ${t})\n    message(STATUS "probe: target ${t}")\n  endif()\nendforeach()\nmessage(STATUS "probe: host found ${verlpp_host_FOUND}")\n' \
    >>"$work/probe-$1/CMakeLists.txt"
  configure "$work/probe-$1" "$work/probe-$1/build" "$2" "$work/probe-$1.log"
}
probe all "$prefix" "REQUIRED COMPONENTS sdk host algo runtime" || { cat "$work/probe-all.log"; fail "every component"; }
for t in verlpp::verlpp verlpp::algo verlpp::plugin_sdk verlpp::plugin_check verlpp::cli; do
  grep -q "probe: target $t\$" "$work/probe-all.log" || { cat "$work/probe-all.log"; fail "no target $t"; }
done
if probe unknown "$prefix" "REQUIRED COMPONENTS host gpu"; then fail "an unknown component was accepted"; fi
flat "$work/probe-unknown.log" | grep -q "verlpp has no component 'gpu' (its components: sdk" ||
  { cat "$work/probe-unknown.log"; fail "the unknown component is not named with the list"; }
sdk_only=$work/sdk-only
install_components "$sdk_only" sdk
if probe missing "$sdk_only" "REQUIRED COMPONENTS host"; then fail "host was found in an SDK-only install"; fi
flat "$work/probe-missing.log" | grep -q "component host: .*install verlpp's \`devel\`" ||
  { cat "$work/probe-missing.log"; fail "the missing host component does not say what to install"; }
probe optional "$sdk_only" "REQUIRED COMPONENTS sdk OPTIONAL_COMPONENTS host" ||
  { cat "$work/probe-optional.log"; fail "an optional missing component failed the package"; }
grep -q "probe: host found FALSE" "$work/probe-optional.log" ||
  { cat "$work/probe-optional.log"; fail "verlpp_host_FOUND is not FALSE in an SDK-only install"; }
echo "library path: examples/cpp built against $prefix and ran its GRPO steps; no fmt exported; components checked"
