#!/usr/bin/env bash
# Resolve a go.mod/go.sum merge conflict: keep ours, raise every module the
# other side requires to its version where that is newer, then tidy.
# Usage: hack/merge-gomod.sh BRANCH
set -euo pipefail
branch=$1
git checkout --ours go.mod go.sum
mods=()
while read -r mod ver; do
  ours=$(awk -v m="$mod" '$1==m{print $2} $1=="require"&&$2==m{print $3}' go.mod | head -1)
  if [ -z "$ours" ] || [ "$(printf '%s\n%s\n' "$ours" "$ver" | sort -V | tail -1)" != "$ours" ]; then
    mods+=("$mod@$ver")
  fi
done < <(git show "$branch:go.mod" | awk '/^require \(/{r=1;next} r&&/^\)/{r=0} r&&NF>=2{print $1, $2} /^require [^(]/{print $2, $3}')
if [ ${#mods[@]} -gt 0 ]; then go get "${mods[@]}"; fi
go mod tidy
git add go.mod go.sum
