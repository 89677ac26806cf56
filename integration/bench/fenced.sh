#!/usr/bin/env bash
# Fenced writes, end to end: fenced_write.lua's transactions (oltp_write_only's
# UPDATE index, UPDATE non-index, DELETE + INSERT) on the four sbtest tables,
# protected, through fenceproxy (plain statements; the proxy adds the fence),
# against the same writes with the fence written by hand into the SQL, through
# haproxy and directly. Ratios are to haproxy, per round. Then guard.sh: the
# cost of guard triggers on fenced UPDATE and INSERT, ratio in the same run.
#
#   integration/bench/fenced.sh [sysbench-compare.sh options...]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BACKEND=${BACKEND:-127.0.0.1:3306}
export FP_CONFIG_EXTRA="fencing:
  lease_table: sbtest.fenced_job_leases
tables:
  - name: sbtest.sbtest1
  - name: sbtest.sbtest2
  - name: sbtest.sbtest3
  - name: sbtest.sbtest4"
mariadb -uroot -e "CREATE DATABASE IF NOT EXISTS sbtest"
sysbench "$HERE/fenced_write.lua" --db-driver=mysql --mysql-host="${BACKEND%:*}" --mysql-port="${BACKEND##*:}" \
  --mysql-user=root --mysql-db=sbtest prepare >/dev/null
mariadb -uroot -e "DELETE FROM sbtest.fenced_job_leases WHERE lease_name LIKE 'sb:%'"
"$HERE/sysbench.sh" --tests "$HERE/fenced_write.lua" "$@"
# Every write through the proxy ran under a lease of its own: none may have
# been rejected, or the numbers measure rejections instead of writes.
rejected=$(cat "${BENCH_WORK:-/tmp/fenceproxy-bench}"/fenceproxy{,-1p,-allcpus,-before}.log 2>/dev/null | grep -c "fenced write rejected" || true)
echo "writes rejected by the fence during the run: $rejected"
[[ $rejected == 0 ]] || { echo "fenced.sh: writes were rejected: the benchmark is not measuring fenced writes" >&2; exit 1; }
# The same writes' cost with guard triggers (fencing.database_guard:
# triggers): fenced UPDATE and INSERT through fenceproxy on a table without
# and one with them, in one interleaved run (guard.sh). GUARD=0 skips it;
# GUARD_ARGS are its options (--threads, --time, --rounds).
if [[ ${GUARD:-1} != 0 ]]; then
  # shellcheck disable=SC2086
  BACKEND=$BACKEND "$HERE/guard.sh" ${GUARD_ARGS:-}
fi
