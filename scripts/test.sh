#!/usr/bin/env bash
# The project's test command (README, .ci/run): the alert rules through
# promtool, vet, then every test with the race detector against a real
# server. The integration harness starts its own disposable mariadbd/mysqld
# (or uses FENCEPROXY_TEST_DSN), a 3-node MariaDB Galera cluster and a
# tidb-server (or uses FENCEPROXY_TEST_TIDB_DSN); this script only makes sure
# the binaries and promtool exist, installing Debian's mariadb-server,
# galera-4, rsync, iproute2 (ss, used by the rsync state transfer),
# mariadb-plugin-connect, mariadb-plugin-spider, prometheus, haproxy,
# python3-sqlalchemy, python3-pymysql, a JDK and libmariadb-java when they
# are missing and building tidb-server (scripts/tidb-server.sh) into its
# cache, and makes a missing server a failure instead of a skip, and runs
# every tier (FENCEPROXY_TEST_TIER=all: the tests in unit packages that
# need a server too; make unit runs the fast tier alone). The randomized
# Galera race runs for FENCEPROXY_GALERA_RACE per fence shape (30s here, a
# few seconds by default).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:/usr/sbin"

have_server() {
  [[ -n ${FENCEPROXY_TEST_DSN:-} ]] && return 0
  for b in mariadbd mysqld; do command -v "$b" >/dev/null && return 0; done
  [[ -x /usr/sbin/mariadbd || -x /usr/sbin/mysqld ]]
}
have_galera() {
  local lib found=""
  for lib in /usr/lib/galera/libgalera_smm.so /usr/lib/galera-4/libgalera_smm.so /usr/lib64/galera-4/libgalera_smm.so /usr/lib64/galera/libgalera_smm.so; do
    [[ -e $lib ]] && found=1
  done
  [[ -n $found ]] && command -v rsync >/dev/null && { command -v ss >/dev/null || command -v lsof >/dev/null; }
}
if ! have_server || ! command -v mariadb >/dev/null || ! have_galera; then
  echo "test.sh: MariaDB server/client, Galera or rsync missing; installing mariadb-server galera-4 rsync iproute2 with apt-get" >&2
  sudo=""; [[ $(id -u) == 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq mariadb-server mariadb-client galera-4 rsync iproute2 >/dev/null
fi

# CONNECT and SPIDER (integration/forwarding_test.go): the disposable
# servers load them with INSTALL SONAME from Debian's plugin packages
# (FederatedX ships with the server). Measured: 21 s for both and their 5
# dependencies (package lists fresh, load average 12), about 0.9 MB.
plugin_dir=/usr/lib/mysql/plugin
if [[ -z ${FENCEPROXY_TEST_DSN:-} ]] && { [[ ! -e $plugin_dir/ha_connect.so ]] || [[ ! -e $plugin_dir/ha_spider.so ]]; }; then
  echo "test.sh: CONNECT or SPIDER plugin missing; installing mariadb-plugin-connect mariadb-plugin-spider with apt-get" >&2
  sudo=""; [[ $(id -u) == 0 ]] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends mariadb-plugin-connect mariadb-plugin-spider >/dev/null ||
    { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends mariadb-plugin-connect mariadb-plugin-spider >/dev/null; }
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

# haproxy (Debian's package) is the load balancer the PROXY protocol tests
# put in front of the proxy (send-proxy, send-proxy-v2); they start their
# own on loopback, and fail without it under FENCEPROXY_REQUIRE_SERVER. The
# package's service is not wanted, as prometheus's above.
if ! command -v haproxy >/dev/null && [[ ! -x /usr/sbin/haproxy ]]; then
  echo "test.sh: haproxy not found; installing haproxy with apt-get" >&2
  sudo=""; [[ $(id -u) == 0 ]] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends haproxy >/dev/null ||
    { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends haproxy >/dev/null; }
  if [[ -d /run/systemd/system ]]; then $sudo systemctl disable --now haproxy >/dev/null 2>&1 || true; fi
fi

# The statement-fence client examples (integration/stmtfence_python_test.go,
# stmtfence_java_test.go) run with Debian's SQLAlchemy and PyMySQL under
# /usr/bin/python3 (a pyenv python3 on PATH has neither), and with javac and
# MariaDB Connector/J; they fail without them under FENCEPROXY_REQUIRE_SERVER.
# Installed here rather than by the tests, as the other packages: a test
# running apt-get would need root and dpkg's lock while other test binaries
# run. Measured (package lists fresh, load average 4): 5.7 s for
# python3-sqlalchemy, python3-pymysql and python3-greenlet, 1.7 s for
# libmariadb-java, 3.0 s for all four again after removing them; about
# 1.8 MB of downloads. A JDK was already installed on the measuring machine;
# default-jdk-headless downloads about 118 MB (1.7 s there), its unpacking
# was not measured.
client_pkgs=()
/usr/bin/python3 -c 'import sqlalchemy, pymysql' 2>/dev/null || client_pkgs+=(python3-sqlalchemy python3-pymysql)
command -v javac >/dev/null || client_pkgs+=(default-jdk-headless)
[[ -r /usr/share/java/mariadb-java-client.jar ]] || client_pkgs+=(libmariadb-java)
if ((${#client_pkgs[@]})); then
  echo "test.sh: installing ${client_pkgs[*]} with apt-get (statement-fence client examples)" >&2
  sudo=""; [[ $(id -u) == 0 ]] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${client_pkgs[@]}" >/dev/null ||
    { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${client_pkgs[@]}" >/dev/null; }
fi

# The TiDB tests run against a tidb-server built from source and cached
# outside the repository; the first run on a machine builds it.
if [[ -z ${FENCEPROXY_TEST_TIDB_DSN:-} ]]; then
  tidb_start=$(date +%s)
  FENCEPROXY_TIDB_SERVER=$(scripts/tidb-server.sh)
  export FENCEPROXY_TIDB_SERVER
  echo "test.sh: tidb-server ready in $(($(date +%s) - tidb_start)) s: $FENCEPROXY_TIDB_SERVER" >&2
fi

export FENCEPROXY_REQUIRE_SERVER=1
export FENCEPROXY_TEST_TIER=all
export FENCEPROXY_GALERA_RACE=${FENCEPROXY_GALERA_RACE:-30s}
go vet ./...
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [[ -n $unformatted ]]; then echo "gofmt needed:"; echo "$unformatted"; exit 1; fi
go test -race -count=1 -timeout 30m "$@" ./...
