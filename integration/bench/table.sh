#!/usr/bin/env bash
# The benchmark tables of docs/benchmarks.md in one command: every figure a
# ratio to haproxy (an L4 relay) measured in the same round, interleaved
# round-robin.
#
#   1. OLTP point_select, read_only, write_only and connect (a connection's
#      whole life per event: connect, auth, SELECT 1, quit) through haproxy,
#      fenceproxy (default threads), fenceproxy with GOMAXPROCS=1 and with
#      GOMAXPROCS = every CPU (the runtime default), and the server directly
#      (sysbench.sh; one protected table the workloads do not touch, so
#      every statement goes through the rewriter's fast path);
#   2. fenced writes on protected tables (fenced.sh);
#   3. CONNS connections open at once (conns/): the resident memory per
#      connection, idle and all querying, and their throughput, for haproxy
#      (its own instance: the shared config caps maxconn at 4,096),
#      fenceproxy, fenceproxy GOMAXPROCS=1 and the server directly. The
#      server's max_connections is raised for it (SET GLOBAL) and restored.
#
#   integration/bench/table.sh [--rounds N] [--time S] [--conns N] [--docs]
#
# Prints the Markdown tables and leaves them, with every log, in
# $BENCH_WORK/table-<time>/. --docs also writes them, with the run's
# conditions (versions, cores, rounds; no date or revision: those are in
# conditions.txt), into docs/benchmarks.md between its table.sh markers.
# Env as for sysbench.sh (BACKEND, SHARED,
# BENCH_WORK, RELAY_LISTEN, FP_LISTEN); ONE_PROC_LISTEN (127.0.0.1:6034);
# CONNS_LISTEN (127.0.0.1:6036, the proxy of step 3); CONNS_RELAY_LISTEN
# (127.0.0.1:13307, step 3's haproxy); BEFORE_BIN (empty; a fenceproxy
# binary of another revision, a fenceproxy-before row in step 3;
# sysbench.sh in step 1 reads it too); SKIP (a list of steps to leave
# out: oltp fenced conns).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ROUNDS=5 TIME=6 CONNS=5000 DOCS=""
while (($#)); do
  case $1 in
    --docs) DOCS=$ROOT/docs/benchmarks.md; shift ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --time) TIME=$2; shift 2 ;;
    --conns) CONNS=$2; shift 2 ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
export BENCH_WORK=${BENCH_WORK:-/tmp/fenceproxy-bench}
export ONE_PROC_LISTEN=${ONE_PROC_LISTEN:-127.0.0.1:6034}
export ALL_PROCS_LISTEN=${ALL_PROCS_LISTEN:-127.0.0.1:6037}
BACKEND=${BACKEND:-127.0.0.1:3306}
SKIP=${SKIP:-}
OUT=$BENCH_WORK/table-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
skip() { [[ " $SKIP " == *" $1 "* ]]; }

server_version=$(mariadb -uroot -N -e 'SELECT VERSION()')
go_version=$(go version | cut -d' ' -f3)
haproxy_version=$(haproxy -v | head -n1 | cut -d' ' -f1-3)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
{
  echo "fenceproxy $(cd "$ROOT" && git rev-parse --short HEAD), $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores,"
  echo "  $go_version, $server_version, $haproxy_version,"
  echo "  $ROUNDS rounds x ${TIME}s, 16 threads; load average before: $load_before"
} | tee "$OUT/conditions.txt"

summaries=()
if ! skip oltp; then
  FP_CONFIG_EXTRA=$'tables:\n  - name: app.invoices' "$HERE/sysbench.sh" --rounds "$ROUNDS" --time "$TIME" \
    --tests "oltp_point_select oltp_read_only oltp_write_only connect" --out "$OUT/oltp" ||
    echo "table.sh: some OLTP runs failed (see $OUT/oltp)" >&2
  summaries+=("$OUT/oltp/summary.tsv")
fi
if ! skip fenced; then
  "$HERE/fenced.sh" --rounds "$ROUNDS" --time "$TIME" --out "$OUT/fenced" ||
    echo "table.sh: some fenced-write runs failed, or writes were rejected (see $OUT/fenced)" >&2
  summaries+=("$OUT/fenced/summary.tsv")
fi

conns_args=()
if ! skip conns; then
  (cd "$ROOT" && go build -o "$BENCH_WORK/fenceproxy" ./cmd/fenceproxy && go build -o "$BENCH_WORK/conns" ./integration/bench/conns)
  port=${BACKEND##*:}
  server_pid=$(ss -ltnpH "sport = :$port" | grep -o 'pid=[0-9]*' | head -n1 | cut -d= -f2)
  # The server is shared: raise its limit only as far as the run needs, and
  # put it back however the run ends.
  old_max=$(mariadb -uroot -N -e 'SELECT @@GLOBAL.max_connections')
  pids=()
  restore() {
    ((${#pids[@]})) && { kill "${pids[@]}" 2>/dev/null || true; wait "${pids[@]}" 2>/dev/null || true; }
    mariadb -uroot -e "SET GLOBAL max_connections = $old_max" || echo "table.sh: could not restore max_connections=$old_max" >&2
  }
  trap restore EXIT
  if ((old_max < CONNS + 200)); then mariadb -uroot -e "SET GLOBAL max_connections = $((CONNS + 200))"; fi
  echo "== $CONNS connections at once: file descriptor limit $(ulimit -n), server max_connections $old_max -> $(mariadb -uroot -N -e 'SELECT @@GLOBAL.max_connections')"
  : >"$OUT/conns.tsv"
  run_conns() {  # label addr pid
    "$BENCH_WORK/conns" -label "$1" -addr "$2" -pid "$3" -n "$CONNS" -time "${TIME}s" | tee -a "$OUT/conns.tsv" ||
      echo "table.sh: the $CONNS-connection run through $1 failed" >&2
  }
  # haproxy as in step 1 (L4, nbthread 2, the shared timeouts), with room
  # for CONNS connections: two sockets each, and a margin.
  relay=${CONNS_RELAY_LISTEN:-127.0.0.1:13307}
  cat >"$OUT/haproxy-conns.cfg" <<CFG
global
    maxconn $((CONNS + 200))
    ulimit-n $((2 * (CONNS + 200) + 100))
    nbthread 2

defaults
    mode tcp
    maxconn $((CONNS + 200))
    timeout connect 5s
    timeout client 1h
    timeout server 1h
    timeout client-fin 5s
    timeout server-fin 5s

frontend mysql_in
    bind $relay
    default_backend mysql_out

backend mysql_out
    server db $BACKEND
CFG
  haproxy -q -c -f "$OUT/haproxy-conns.cfg"
  wait_listen() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null && return; sleep 0.05; done; }
  # -db: in the foreground, one process: its pid is the one to measure.
  haproxy -db -f "$OUT/haproxy-conns.cfg" 2>"$OUT/haproxy-conns.log" &
  pid=$!; pids=("$pid")
  wait_listen "$relay"
  run_conns haproxy "$relay" "$pid"
  kill "$pid"; wait "$pid" 2>/dev/null || true; pids=()

  variants=(fenceproxy fenceproxy-1p)
  if [[ -n ${BEFORE_BIN:-} ]]; then variants+=(fenceproxy-before); fi
  for variant in "${variants[@]}"; do
    listen=${CONNS_LISTEN:-127.0.0.1:6036}
    cat >"$OUT/$variant.yaml" <<YAML
listen: $listen
admin: ""
log_level: warn
backend:
  address: $BACKEND
tables:
  - name: app.invoices
YAML
    bin=$BENCH_WORK/fenceproxy
    if [[ $variant == fenceproxy-before ]]; then bin=$BEFORE_BIN; fi
    if [[ $variant == fenceproxy-1p ]]; then export GOMAXPROCS=1; fi
    "$bin" serve --config "$OUT/$variant.yaml" 2>"$OUT/$variant.log" &
    pid=$!; pids=("$pid")
    unset GOMAXPROCS
    wait_listen "$listen"
    run_conns "$variant" "$listen" "$pid"
    kill "$pid"; wait "$pid" 2>/dev/null || true; pids=()
  done
  run_conns direct "$BACKEND" "$server_pid"
  conns_args=(--conns "$OUT/conns.tsv")
fi

echo
docs_args=()
if [[ -n $DOCS ]]; then
  docs_args=(--docs "$DOCS" --conditions "server $server_version, Go ${go_version#go}, $haproxy_version, $(nproc) cores; 16 threads, $ROUNDS rounds x $TIME s; load average before the run ${load_before%% *}.")
fi
python3 "$HERE/table.py" "${summaries[@]}" "${conns_args[@]}" "${docs_args[@]}" | tee "$OUT/table.md"
echo "(conditions and logs: $OUT)"
