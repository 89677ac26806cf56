#!/usr/bin/env bash
# Builds the tidb-server the integration tests run (embedded unistore store,
# no PD or TiKV) into a cache directory outside the repository, and prints its
# path on stdout. A cached binary is reused, so only the first run on a
# machine pays for the build (about 10 minutes on 2 cores, 3.6 GB of Go
# caches).
#
# `go install github.com/pingcap/tidb/cmd/tidb-server@...` cannot be used:
# TiDB's go.mod has replace directives (its parser is a nested module at
# ./pkg/parser), which `go install pkg@version` refuses. So the two modules
# are fetched with `go mod download` (module proxy only), the parser is put
# where the replace directive expects it, and the tree is built in place.
#
# Environment: TIDB_SERVER_CACHE overrides the cache directory.
set -euo pipefail

# All in a function: bash reads a script as it runs, so a function keeps a
# checkout that changes during the long build from changing what runs.
main() {
  # The commit both modules are pseudo-versions of; its server reports
  # 8.0.11-TiDB-v8.4.0-this-is-a-placeholder.
  tidb_mod=github.com/pingcap/tidb
  tidb_ver=v1.1.0-beta.0.20241125141335-ec8b81b98edc
  parser_mod=github.com/pingcap/tidb/pkg/parser
  parser_ver=v0.0.0-20241125141335-ec8b81b98edc

  cache=${TIDB_SERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fenceproxy/tidb-server-$tidb_ver}
  bin=$cache/tidb-server

  if [[ -x $bin ]]; then
    echo "$bin"
    exit 0
  fi

  mkdir -p "$cache"
  # Two test runs on one machine must not build into the same tree at once.
  exec 9>"$cache/.lock"
  flock 9
  if [[ -x $bin ]]; then
    echo "$bin"
    exit 0
  fi

  start=$(date +%s)
  # TiDB builds with cgo: a fresh Debian machine may lack a C compiler.
  if ! command -v gcc >/dev/null; then
    echo "tidb-server.sh: no gcc; installing it with apt-get" >&2
    sudo=""; [[ $(id -u) == 0 ]] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq gcc libc6-dev >/dev/null
  fi
  export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=1

  # `go mod download mod@ver` needs no main module, but it does need a
  # directory without a go.mod above it, or it resolves against that module.
  scratch=$(mktemp -d)
  trap 'chmod -R u+w "$scratch" 2>/dev/null; rm -rf "$scratch"' EXIT
  trap 'exit 1' INT TERM
  cd "$scratch"
  moddir() { GO111MODULE=on go mod download -json "$1@$2" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'; }
  tidb_dir=$(moddir "$tidb_mod" "$tidb_ver")
  parser_dir=$(moddir "$parser_mod" "$parser_ver")
  if [[ -z $tidb_dir || -z $parser_dir ]]; then
    echo "tidb-server.sh: go mod download did not report module directories" >&2
    exit 1
  fi

  # The module cache is read-only: copy, then make the copy writable.
  src=$scratch/tidb
  cp -r "$tidb_dir" "$src"
  chmod -R u+w "$src"
  rm -rf "$src/pkg/parser"
  cp -r "$parser_dir" "$src/pkg/parser"
  chmod -R u+w "$src/pkg/parser"

  echo "tidb-server.sh: building tidb-server $tidb_ver (first run on this machine; about 10 minutes)" >&2
  # -trimpath: the build cache then does not depend on the scratch
  # directory's random name, so a rebuild reuses it.
  (cd "$src" && go build -trimpath -o "$cache/tidb-server.tmp" ./cmd/tidb-server)
  mv "$cache/tidb-server.tmp" "$bin"
  echo "tidb-server.sh: built $bin in $(($(date +%s) - start)) s" >&2
  echo "$bin"
}
main "$@"
