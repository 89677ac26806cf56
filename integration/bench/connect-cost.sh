#!/usr/bin/env bash
# What one connection (connect, auth, SELECT 1, quit: sysbench with
# ../shared/bench/lua/connect_select.lua) costs through fenceproxy and through
# haproxy (L4 relay): CPU time of the relay process and of the server per
# connection (from /proc/PID/stat, interleaved rounds), and system calls of
# the relay per connection (strace -c -f). Both are counts, not speeds, so
# they hold on a busy machine better than throughput ratios do.
#
#   integration/bench/connect-cost.sh [--rounds N] [--events N] [--strace-events N]
#
# Env: BACKEND (127.0.0.1:3306), SHARED, BENCH_WORK (/tmp/fenceproxy-bench),
# FP_LISTEN (127.0.0.1:6033), RELAY_LISTEN (127.0.0.1:13306), BEFORE_BIN (a
# fenceproxy binary of another revision, measured alongside on BEFORE_LISTEN,
# 127.0.0.1:6035).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SHARED=${SHARED:-$ROOT/../shared}
export BENCH_WORK=${BENCH_WORK:-/tmp/fenceproxy-bench}
BACKEND=${BACKEND:-127.0.0.1:3306}
FP_LISTEN=${FP_LISTEN:-127.0.0.1:6033}
BEFORE_LISTEN=${BEFORE_LISTEN:-127.0.0.1:6035}
export RELAY_LISTEN=${RELAY_LISTEN:-127.0.0.1:13306} RELAY_BACKEND=$BACKEND
ROUNDS=3 EVENTS=3000 STRACE_EVENTS=1000
while (($#)); do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --events) EVENTS=$2; shift 2 ;;
    --strace-events) STRACE_EVENTS=$2; shift 2 ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
mkdir -p "$BENCH_WORK"
(cd "$ROOT" && go build -o "$BENCH_WORK/fenceproxy" ./cmd/fenceproxy)
conf() {  # conf LISTEN FILE
  printf 'listen: %s\nadmin: ""\nlog_level: warn\nbackend:\n  address: %s\n' "$1" "$BACKEND" >"$2"
}
conf "$FP_LISTEN" "$BENCH_WORK/cost.yaml"
conf "$BEFORE_LISTEN" "$BENCH_WORK/cost-before.yaml"
port=${BACKEND##*:}
server_pid=$(ss -ltnpH "sport = :$port" | grep -o 'pid=[0-9]*' | head -n1 | cut -d= -f2)
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null && return; sleep 0.05; done; }
drive() {  # drive ADDR EVENTS THREADS: prints connections per second
  sysbench "$SHARED/bench/lua/connect_select.lua" --db-driver=mysql --mysql-host="${1%:*}" --mysql-port="${1##*:}" \
    --mysql-user=app --mysql-password=apppw --mysql-db=sbtest --threads="$3" --events="$2" --time=0 run |
    awk '/transactions:/ {gsub(/\(/, "", $3); print $3}'
}

pids=()
cleanup() {
  ((${#pids[@]})) && { kill "${pids[@]}" 2>/dev/null || true; wait "${pids[@]}" 2>/dev/null || true; }
  bash "$SHARED/bench/haproxy-relay.sh" stop >/dev/null || true
}
trap cleanup EXIT
"$BENCH_WORK/fenceproxy" serve --config "$BENCH_WORK/cost.yaml" 2>"$BENCH_WORK/cost.log" &
pids+=($!); targets=("fenceproxy=$FP_LISTEN=$!")
if [[ -n ${BEFORE_BIN:-} ]]; then
  "$BEFORE_BIN" serve --config "$BENCH_WORK/cost-before.yaml" 2>"$BENCH_WORK/cost-before.log" &
  pids+=($!); targets+=("fenceproxy-before=$BEFORE_LISTEN=$!")
fi
bash "$SHARED/bench/haproxy-relay.sh" start >/dev/null
targets=("haproxy=$RELAY_LISTEN=$(head -n1 "$BENCH_WORK/haproxy.pid")" "${targets[@]}")
wait_port "$FP_LISTEN"; [[ -n ${BEFORE_BIN:-} ]] && wait_port "$BEFORE_LISTEN"

echo "== CPU per connection: $ROUNDS rounds x $EVENTS connections per target, 4 threads (load average $(cut -d' ' -f1-3 /proc/loadavg))"
for ((r = 1; r <= ROUNDS; r++)); do
  for t in "${targets[@]}"; do
    IFS== read -r name addr pid <<<"$t"
    a=$(ticks "$pid") m=$(ticks "$server_pid")
    cps=$(drive "$addr" "$EVENTS" 4)
    b=$(ticks "$pid") m2=$(ticks "$server_pid")
    awk -v r="$r" -v n="$name" -v N="$EVENTS" -v a="$a" -v b="$b" -v m="$m" -v m2="$m2" -v hz="$hz" -v cps="$cps" \
      'BEGIN {printf "  round %d %-18s relay %6.1f us  server %6.1f us  (%s connections/s)\n", r, n, (b-a)/hz/N*1e6, (m2-m)/hz/N*1e6, cps}'
  done
done
kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true; pids=()
bash "$SHARED/bench/haproxy-relay.sh" stop >/dev/null

if ! command -v strace >/dev/null; then echo "(strace not installed: no system call counts)"; exit 0; fi
echo "== system calls per connection (strace -c -f, $STRACE_EVENTS connections, 1 thread)"
count() {  # count NAME ADDR CMD...
  local name=$1 addr=$2; shift 2
  strace -f -c -o "$BENCH_WORK/strace.$name.txt" "$@" &
  local spid=$!
  wait_port "$addr"
  drive "$addr" "$STRACE_EVENTS" 1 >/dev/null
  kill -TERM "$(pgrep -P "$spid")"; wait "$spid" 2>/dev/null || true
  printf '  %-18s %s\n' "$name" "$(awk -v n="$STRACE_EVENTS" 'NR > 2 && $4 ~ /^[0-9]+$/ && $NF != "total" {s += $4; c[$NF] = $4}
    END {printf "%.1f in all:\n", s/n; for (k in c) if (c[k]/n >= 0.5) printf "%.1f %s\n", c[k]/n, k}' \
    "$BENCH_WORK/strace.$name.txt" | sort -k1,1nr | paste -sd' ')"
}
count fenceproxy "$FP_LISTEN" "$BENCH_WORK/fenceproxy" serve --config "$BENCH_WORK/cost.yaml"
[[ -n ${BEFORE_BIN:-} ]] && count fenceproxy-before "$BEFORE_LISTEN" "$BEFORE_BIN" serve --config "$BENCH_WORK/cost-before.yaml"
count haproxy "$RELAY_LISTEN" haproxy -f "$SHARED/bench/haproxy/haproxy.cfg"
