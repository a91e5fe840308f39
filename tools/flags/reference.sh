#!/usr/bin/env bash
# Prints docs/flags.md: every flag and environment variable of qdr-controller and
# qdr-webhook, as each program's own argument parser declares them (`--flags-reference`,
# qdr_startup::flags_reference), under a fixed introduction.
#
#   tools/flags/reference.sh BIN_DIR > docs/flags.md     (BIN_DIR holds both binaries)
#
# `make flags-reference` builds the binaries and writes the page; tests/tests/docs.rs runs
# this script and fails when the committed page differs.
set -euo pipefail
bin="${1:?usage: tools/flags/reference.sh BIN_DIR}"
cat <<'TEXT'
# Flags and environment variables

Every option of the two programs, generated from their argument parsers
(`make flags-reference`; `make test` fails when this page is stale). Each flag can be given
as its environment variable instead; a flag on the command line wins. Both programs also read
`RUST_LOG` (a `tracing` filter such as `info` or `qdr_controller=debug`; default `info`).
The Helm chart and `deploy/` set these through the containers' arguments and environment.

## qdr-controller

TEXT
"$bin/qdr-controller" --flags-reference
printf '\n## qdr-webhook\n\n'
"$bin/qdr-webhook" --flags-reference
