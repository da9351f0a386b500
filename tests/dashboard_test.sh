#!/usr/bin/env bash
# The Grafana dashboard (deploy/grafana/shardps-dashboard.json) is valid JSON
# and every ShardPS metric its queries use is one the servers or workers
# export (server/server_metrics.cc, worker/worker_metrics.cc).
# Prints a Catch2-style summary line for tools/test.
set -uo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/shardps
dashboard=$runfiles/deploy/grafana/shardps-dashboard.json
source "$runfiles/tests/checks.sh"

python=${SHARDPS_PY_VENV:-/opt/shardps-tools/venv}/bin/python
[ -x "$python" ] || python=python3
"$python" -m json.tool "$dashboard" > /dev/null || fail "not valid JSON"
pass "valid JSON"

used=$(grep -o 'shardps_[a-z_]*' "$dashboard" | sed 's/_bucket$//' | sort -u)
[ -n "$used" ] || fail "the dashboard queries no ShardPS metric"
for metric in $used; do
  grep -q "\"$metric\"" "$runfiles/server/server_metrics.cc" "$runfiles/worker/worker_metrics.cc" \
    || fail "the dashboard uses $metric, which nothing exports"
done
pass "all $(echo "$used" | wc -l) metrics it uses are exported"
all_passed
