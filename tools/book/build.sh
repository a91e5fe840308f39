#!/usr/bin/env bash
# Builds the book (docs/, an mdBook) into OUT (default target/book):
#   1. mdBook itself, pinned (MDBOOK_VERSION), installed once with `cargo install --locked`
#      into a cache outside the repo (~/.cache/qdr-operator/mdbook-<version>; about 2 minutes
#      cold on 2 cores), reused after;
#   2. docs/ copied into OUT.src (nothing is written inside the checkout), each
#      docs/diagrams/*.dot drawn again to the SVG beside it by Graphviz's `dot` (Debian's
#      graphviz); the SVGs are also committed, so the pages show their pictures where
#      Markdown is read without the book (`make docs` copies them back; a test compares);
#   3. `mdbook build` of that copy into OUT.
# Fails, naming what is missing, when cargo or dot is absent.
#
#   tools/book/build.sh [OUT]        build, print OUT
#   tools/book/build.sh --mdbook     install mdBook if needed, print its path
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
MDBOOK_VERSION=0.5.4
cache="${XDG_CACHE_HOME:-$HOME/.cache}/qdr-operator/mdbook-$MDBOOK_VERSION"
mdbook="$cache/bin/mdbook"
mkdir -p "$(dirname "$cache")"
# One install at a time (`make docs` beside the docs test): a second caller waits, then finds it.
exec 9>"$cache.lock"
flock 9
if [[ ! -x "$mdbook" ]]; then
  command -v cargo >/dev/null || { echo "book: cargo is required to install mdBook $MDBOOK_VERSION" >&2; exit 1; }
  # The `search` feature only: no `serve`/`watch` web server is built.
  cargo install --quiet --locked mdbook --version "$MDBOOK_VERSION" --no-default-features \
    --features search --root "$cache.tmp" >&2
  mkdir -p "$cache/bin" && mv "$cache.tmp/bin/mdbook" "$mdbook" && rm -rf "$cache.tmp"
fi
flock -u 9
if [[ "${1:-}" == "--mdbook" ]]; then echo "$mdbook"; exit 0; fi

command -v dot >/dev/null || { echo "book: Graphviz's dot is required for the pictures (apt-get install graphviz)" >&2; exit 1; }
out="$(realpath -m "${1:-$root/target/book}")"
src="$out.src"
rm -rf "$src" "$out"
mkdir -p "$(dirname "$out")"
cp -r "$root/docs" "$src"
for d in "$src"/diagrams/*.dot; do
  dot -Tsvg "$d" -o "${d%.dot}.svg"
done
"$mdbook" build "$src" --dest-dir "$out" >&2
echo "$out"
