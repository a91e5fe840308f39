#!/usr/bin/env bash
# Runs the test executables cargo built from the named sources, as `cargo test` would (in the
# package's directory), one after another, and records each one's time and result.
#
#   tools/test/run.sh EXECUTABLES RESULTS SOURCE...
#
# EXECUTABLES is the JSON that `cargo test --no-run --message-format=json` printed (the
# compiler-artifact messages give each test executable and the source it was built from).
# SOURCE is a path from the repository root (`controller/tests/ha.rs`), or `unit` for every
# unit-test executable (the tests inside each crate's lib and binaries). One line
# `<seconds> <ok|FAILED> <source>` per source is appended to RESULTS, which is what says
# whether it passed: this script exits 0 after a failing test, so the tests queued after it
# in make's lanes still run (`make test` then fails on the results). Each source's output
# is also written to test-logs/<source with / as _>.log beside RESULTS.
set -euo pipefail
# A test that runs make or cargo itself must not see the make -j that runs this script.
unset MAKEFLAGS MFLAGS MAKELEVEL
json="$1" results="$2"; shift 2
root="$(pwd)"
logs="$(dirname "$results")/test-logs"
mkdir -p "$logs"
for src in "$@"; do
  if [[ "$src" == unit ]]; then
    filter='.target.kind[0] == "lib" or .target.kind[0] == "bin"'
  else
    filter='.target.src_path == $root + "/" + $src'
  fi
  # executable, then the package's directory (its id is path+file:///<dir>#<name>@<version>).
  mapfile -t exes < <(jq -r --arg root "$root" --arg src "$src" "
    select(.reason == \"compiler-artifact\" and .profile.test and .executable != null)
    | select($filter)
    | .executable + \" \" + (.package_id | sub(\"^path\\\\+file://\"; \"\") | sub(\"#.*\"; \"\"))" "$json" | sort -u)
  if (( ${#exes[@]} == 0 )); then
    echo "tools/test/run.sh: no test executable was built from $src" >&2
    echo "0 FAILED $src" >> "$results"; continue
  fi
  t=$(date +%s) result=ok
  # Each source's output is also kept in LOGS (beside RESULTS), for `make test` to show the
  # failures' panics again at its end, where a CI summary that keeps only the tail sees them.
  log="$logs/${src//\//_}.log"
  : > "$log"
  for line in "${exes[@]}"; do
    exe="${line%% *}" dir="${line#* }"
    echo "== $src: ${exe#"$root"/}"
    set +e
    (cd "$dir" && "$exe") 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    set -e
    (( rc == 0 )) || result=FAILED
  done
  echo "$(( $(date +%s) - t )) $result $src" >> "$results"
  echo "== $src: $result in $(( $(date +%s) - t ))s"
done
