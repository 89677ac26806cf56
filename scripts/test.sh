#!/usr/bin/env bash
# The project's test command (README, .ci/run): the alert rules through
# promtool, vet, then every test with the race detector against a real
# server. The integration harness starts its own disposable mariadbd/mysqld
# (or uses FENCEPROXY_TEST_DSN); this script only makes sure a server binary
# and promtool exist, installing Debian's mariadb-server and prometheus when
# they are missing, and makes a missing server a failure instead of a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:/usr/sbin"

have_server() {
  [[ -n ${FENCEPROXY_TEST_DSN:-} ]] && return 0
  for b in mariadbd mysqld; do command -v "$b" >/dev/null && return 0; done
  [[ -x /usr/sbin/mariadbd || -x /usr/sbin/mysqld ]]
}
if ! have_server || ! command -v mariadb >/dev/null; then
  echo "test.sh: no MariaDB/MySQL server or client found; installing mariadb-server with apt-get" >&2
  sudo=""; [[ $(id -u) == 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq mariadb-server mariadb-client >/dev/null
fi

# promtool (Debian's prometheus package) checks and unit-tests the alert
# rules. The package's service is not wanted: policy-rc.d or no init keeps it
# stopped in containers; elsewhere it is stopped and disabled.
if ! command -v promtool >/dev/null; then
  echo "test.sh: promtool not found; installing prometheus with apt-get" >&2
  sudo=""; [[ $(id -u) == 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  if [[ -d /run/systemd/system ]]; then $sudo systemctl disable --now prometheus >/dev/null 2>&1 || true; fi
fi
promtool check rules configs/alerts.yml
promtool test rules configs/alerts_test.yml

export FENCEPROXY_REQUIRE_SERVER=1
go vet ./...
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [[ -n $unformatted ]]; then echo "gofmt needed:"; echo "$unformatted"; exit 1; fi
go test -race -count=1 -timeout 30m "$@" ./...
