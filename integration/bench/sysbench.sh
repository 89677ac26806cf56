#!/usr/bin/env bash
# Interleaved sysbench comparison: haproxy (L4 relay, the baseline), fenceproxy
# and the server directly, measured in the same run with the shared scripts in
# ../shared/bench (run, not copied). Ratios are to haproxy, taken per round.
#
#   integration/bench/sysbench.sh [sysbench-compare.sh options...]
#   e.g. integration/bench/sysbench.sh --time 10 --rounds 5
#
# Env: BACKEND (127.0.0.1:3306, a MariaDB/MySQL where root can log in over the
# socket without a password to create the benchmark user app/apppw),
# SHARED (../shared relative to the repo), BENCH_WORK (/tmp/fenceproxy-bench),
# FP_LISTEN (127.0.0.1:6033), FP_CONFIG_EXTRA (YAML appended to the proxy's
# config, e.g. protected tables), ONE_PROC_LISTEN (empty; e.g. 127.0.0.1:6034:
# also measure a second fenceproxy there, run with GOMAXPROCS=1),
# ALL_PROCS_LISTEN (empty; e.g. 127.0.0.1:6037: one more with GOMAXPROCS set
# to every CPU, the runtime's own default, which limits.threads' auto
# halves where the backend is on this host), BEFORE_BIN
# (empty; a fenceproxy binary of another revision, measured in the same run
# as fenceproxy-before on BEFORE_LISTEN, 127.0.0.1:6035), RELAY_LISTEN
# (127.0.0.1:13306, where haproxy listens).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SHARED=${SHARED:-$ROOT/../shared}
export BENCH_WORK=${BENCH_WORK:-/tmp/fenceproxy-bench}
BACKEND=${BACKEND:-127.0.0.1:3306}
FP_LISTEN=${FP_LISTEN:-127.0.0.1:6033}
mkdir -p "$BENCH_WORK"

bash "$SHARED/bench/setup.sh" >/dev/null
mariadb -uroot -e "CREATE USER IF NOT EXISTS 'app'@'%' IDENTIFIED BY 'apppw'; GRANT ALL ON *.* TO 'app'@'%';
  CREATE USER IF NOT EXISTS 'app'@'localhost' IDENTIFIED BY 'apppw'; GRANT ALL ON *.* TO 'app'@'localhost';"

(cd "$ROOT" && go build -o "$BENCH_WORK/fenceproxy" ./cmd/fenceproxy)
cat >"$BENCH_WORK/fenceproxy.yaml" <<YAML
listen: $FP_LISTEN
admin: ""
log_level: warn
backend:
  address: $BACKEND
${FP_CONFIG_EXTRA:-}
YAML
"$BENCH_WORK/fenceproxy" check-config "$BENCH_WORK/fenceproxy.yaml" >/dev/null
"$BENCH_WORK/fenceproxy" serve --config "$BENCH_WORK/fenceproxy.yaml" 2>"$BENCH_WORK/fenceproxy.log" &
FP_PIDS=$!
export RELAY_LISTEN=${RELAY_LISTEN:-127.0.0.1:13306}
targets=(haproxy="$RELAY_LISTEN" fenceproxy="$FP_LISTEN")
# extra NAME LISTEN [VAR=VALUE...] BINARY: one more proxy, with fenceproxy's
# config on another port, measured as target fenceproxy-NAME.
extra() {
  local name=$1 listen=$2; shift 2
  sed "s/^listen: .*/listen: $listen/" "$BENCH_WORK/fenceproxy.yaml" >"$BENCH_WORK/fenceproxy-$name.yaml"
  env "$@" serve --config "$BENCH_WORK/fenceproxy-$name.yaml" 2>"$BENCH_WORK/fenceproxy-$name.log" &
  FP_PIDS="$FP_PIDS $!"
  targets+=(fenceproxy-"$name"="$listen")
}
rm -f "$BENCH_WORK"/fenceproxy-{1p,allcpus,before}.log
[[ -z ${ONE_PROC_LISTEN:-} ]] || extra 1p "$ONE_PROC_LISTEN" GOMAXPROCS=1 "$BENCH_WORK/fenceproxy"
[[ -z ${ALL_PROCS_LISTEN:-} ]] || extra allcpus "$ALL_PROCS_LISTEN" GOMAXPROCS="$(nproc)" "$BENCH_WORK/fenceproxy"
if [[ -n ${BEFORE_BIN:-} ]]; then
  BEFORE_LISTEN=${BEFORE_LISTEN:-127.0.0.1:6035}
  extra before "$BEFORE_LISTEN" "$BEFORE_BIN"
fi
cleanup() {
  kill $FP_PIDS 2>/dev/null || true
  wait $FP_PIDS 2>/dev/null || true
  RELAY_BACKEND=$BACKEND bash "$SHARED/bench/haproxy-relay.sh" stop >/dev/null || true
}
trap cleanup EXIT
for addr in "$FP_LISTEN" ${ONE_PROC_LISTEN:-} ${ALL_PROCS_LISTEN:-} ${BEFORE_LISTEN:-}; do
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null && break; sleep 0.05; done
done
RELAY_BACKEND=$BACKEND bash "$SHARED/bench/haproxy-relay.sh" start

echo "== fenceproxy $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, $(go version | cut -d' ' -f3)"
bash "$SHARED/bench/sysbench-compare.sh" "$@" "${targets[@]}" direct="$BACKEND"
