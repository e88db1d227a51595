#!/usr/bin/env bash
# Every relative link in README.md and docs/*.md names a file that exists, and its #anchor a
# heading of that file (GitHub's rule: lower case, punctuation dropped, spaces as '-').
# Usage: doc_links_check.sh SOURCE_DIR
set -uo pipefail
root=${1:?usage: doc_links_check.sh SOURCE_DIR}
cd "$root" || exit 2

slugs_of() {  # the anchors GitHub makes of a markdown file's headings
  grep -E '^#{1,6} ' "$1" | sed -E 's/^#+ +//' | tr '[:upper:]' '[:lower:]' |
    sed -E 's/[^a-z0-9 _-]//g; s/ /-/g'
}

bad=0
for doc in README.md docs/*.md; do
  dir=$(dirname "$doc")
  # ](target) pairs; external links and bare anchors of the same page are checked too.
  while IFS= read -r target; do
    case "$target" in http://* | https://* | mailto:*) continue ;; esac
    file=${target%%#*}
    anchor=""
    [[ "$target" == *#* ]] && anchor=${target#*#}
    if [ -z "$file" ]; then path=$doc; else path="$dir/$file"; fi
    if [ ! -e "$path" ]; then
      echo "$doc: link to '$target': $path does not exist"
      bad=1
      continue
    fi
    if [ -n "$anchor" ] && [ -f "$path" ] && [[ "$path" == *.md ]]; then
      if ! slugs_of "$path" | grep -qxF -- "$anchor"; then
        echo "$doc: link to '$target': no heading of $path makes the anchor '#$anchor'"
        bad=1
      fi
    fi
  done < <(grep -oE '\]\([^) ]+\)' "$doc" | sed -E 's/^\]\(//; s/\)$//')
done
[ $bad -eq 0 ] && echo "doc links: all relative links of README.md and docs/*.md resolve"
exit $bad
