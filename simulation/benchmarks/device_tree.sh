#!/usr/bin/env bash
# What a call of the lent GPU machine carries, and room for it (docs/performance.md#measuring-on-a-lent-gpu): a call
# carries the working tree (tracked files and untracked ones git does not ignore) and the carried .whl/, at most
# 64 MiB together. The tracked tree is larger than that, almost all of it the studies' results under docs/, which the
# device check never reads; this script moves those folders out of the checkout for the call and puts them back.
#
#   bash simulation/benchmarks/device_tree.sh size     # MiB that a call would carry now
#   bash simulation/benchmarks/device_tree.sh aside    # the large docs folders to $ASIDE (default /tmp/fedsuite-aside)
#   bash simulation/benchmarks/device_tree.sh back     # and back (`git checkout -- docs` also restores them)
set -eu
cd "$(dirname "$0")/../.."
ASIDE=${ASIDE:-/tmp/fedsuite-aside}
LIMIT_MIB=64
LARGE_KIB=1024  # a docs/ folder above this is set aside

size() {
    local tree whl
    tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null |
        awk '{s += $1} END {printf "%d", s / 1048576}')
    whl=$( [ -d .whl ] && du -sm .whl | cut -f1 || echo 0)
    echo "a call carries ${tree} MiB of working tree + ${whl} MiB of .whl/ = $((tree + whl)) MiB (at most ${LIMIT_MIB})"
    [ $((tree + whl)) -le "$LIMIT_MIB" ]
}

case "${1:-}" in
    size) size ;;
    aside)
        mkdir -p "$ASIDE/docs"
        for folder in docs/*/; do
            folder=${folder%/}
            [ "$(du -sk "$folder" | cut -f1)" -gt "$LARGE_KIB" ] && mv "$folder" "$ASIDE/docs/" && echo "aside: $folder"
        done
        size ;;
    back)
        [ -d "$ASIDE/docs" ] || { echo "device_tree.sh: nothing set aside in $ASIDE" >&2; exit 1; }
        for folder in "$ASIDE"/docs/*/; do
            name=$(basename "$folder")
            [ -e "docs/$name" ] && { echo "device_tree.sh: docs/$name exists; left $folder where it is" >&2; exit 1; }
            mv "$folder" "docs/$name" && echo "back: docs/$name"
        done
        rmdir "$ASIDE/docs" "$ASIDE" 2>/dev/null || true ;;
    *) echo "device_tree.sh: '${1:-}': allowed: size, aside, back" >&2; exit 2 ;;
esac
