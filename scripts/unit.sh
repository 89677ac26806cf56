#!/usr/bin/env bash
# The fast test tier (make unit): every package's tests with
# FENCEPROXY_TEST_TIER=unit, so that no database server is started or
# connected to, whatever is installed; each test that needs one is skipped,
# and the summary counts them by package. make test (scripts/test.sh, what
# CI runs) runs them all against real servers. Arguments go to go test
# (e.g. -race, -count=1, -run X).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
export FENCEPROXY_TEST_TIER=unit
unset FENCEPROXY_REQUIRE_SERVER FENCEPROXY_TEST_DSN FENCEPROXY_TEST_TIDB_DSN
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/testsummary" ./internal/testsummary
start=$(date +%s)
status=0
go test -json "$@" ./... | "$tmp/testsummary" || status=$?
echo "unit tier: $(($(date +%s) - start)) s"
exit "$status"
