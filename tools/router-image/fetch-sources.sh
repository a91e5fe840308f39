#!/usr/bin/env bash
# Fetches the router image's sources for a machine without $QDR_ROUTER_SOURCES: the git tags
# qpid-dispatch 1.19.0, qpid-proton 0.37.0 and the qdr-image commit the published
# quay.io/interconnectedcloud/qdrouterd:1.19.0 was built from, each checked against its
# pinned commit id, laid out as $QDR_ROUTER_SOURCES is (the two tarballs made with
# `git archive`, qdr-image/ with its Dockerfile and scripts/). Prints the folder.
#
#   tools/router-image/fetch-sources.sh DIR
set -euo pipefail
dir="${1:?usage: fetch-sources.sh DIR}"
fail() { echo "router-image: $*" >&2; exit 1; }

# name  repository  ref  commit
pins=(
  "qpid-dispatch-1.19.0 https://github.com/apache/qpid-dispatch.git 1.19.0 0bfe00dacb58e197932510a062d1928b1f06f198"
  "qpid-proton-0.37.0 https://github.com/apache/qpid-proton.git 0.37.0 fee5e94afb83b92ffa60a6f815d5102a67915166"
  "qdr-image https://github.com/interconnectedcloud/qdr-image.git 353f5b5d13a4e81248965fcd69e0888a6da1d1f1 353f5b5d13a4e81248965fcd69e0888a6da1d1f1"
)

if [[ -f "$dir/.complete" ]]; then echo "$dir"; exit 0; fi
command -v git >/dev/null || fail "git is needed to fetch the router sources (or set QDR_ROUTER_SOURCES)"
rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
for pin in "${pins[@]}"; do
  read -r name url ref commit <<<"$pin"
  repo="$dir.tmp/$name.git"
  echo "router-image: fetching $name ($url $ref)" >&2
  git init -q --bare "$repo"
  git -C "$repo" fetch -q --depth 1 "$url" "$ref" \
    || fail "cannot fetch $url $ref: without network access, set QDR_ROUTER_SOURCES to a folder holding $name"
  got="$(git -C "$repo" rev-parse FETCH_HEAD^{commit})"
  [[ "$got" == "$commit" ]] || fail "$url $ref is commit $got, not the pinned $commit"
  if [[ "$name" == qdr-image ]]; then
    mkdir -p "$dir.tmp/qdr-image"
    git -C "$repo" archive FETCH_HEAD Dockerfile LICENSE scripts | tar -x -C "$dir.tmp/qdr-image"
  else
    git -C "$repo" archive --format=tar.gz --prefix="$name/" -o "$dir.tmp/$name.tar.gz" FETCH_HEAD
  fi
  rm -rf "$repo"
done
touch "$dir.tmp/.complete"
rm -rf "$dir" && mv "$dir.tmp" "$dir"
echo "$dir"
