#!/usr/bin/env bash
# The format check: every C, C++ and CUDA file git tracks must be as clang-format (Debian 12's,
# version 14, with the repository's .clang-format) writes it. Prints each file that differs and
# the command that fixes them all. Usage: format_check.sh SOURCE_DIR [--fix]
set -euo pipefail
src=${1:?usage: format_check.sh SOURCE_DIR [--fix]}
cd "$src"
tool=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$tool" ]; then
  echo "format_check: clang-format is not installed (apt-get install clang-format; scripts/build.sh does)" >&2
  exit 1
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- '*.c' '*.h' '*.cc' '*.cpp' '*.hpp' '*.cu' '*.cuh')
else
  mapfile -t files < <(find . -path ./build -prune -o -type f \( -name '*.c' -o -name '*.h' -o -name '*.cpp' \
                         -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' \) -print | sed 's|^\./||')
fi
if [ "${2:-}" = "--fix" ]; then
  "$tool" -i "${files[@]}"
  echo "format_check: formatted ${#files[@]} files"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$tool" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  printf 'format_check: not formatted: %s\n' "${bad[@]}" >&2
  echo "format_check: ${#bad[@]} of ${#files[@]} files differ; fix with: bash tests/format/format_check.sh . --fix" >&2
  exit 1
fi
echo "format_check: ${#files[@]} files formatted"
