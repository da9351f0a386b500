#!/usr/bin/env bash
# bench/scaling --server_hosts: with --netns, `own` runs the servers on hosts
# of their own (after the workers'), while the N = 1 baseline keeps its server
# beside its worker; `shared` (the default) puts server i beside worker i.
# Without --netns, or with another value, it is refused before anything runs.
# Needs root (network namespaces); says SKIPPED otherwise.
set -uo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/shardps
source "$runfiles/tests/checks.sh"
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/server_hosts.XXXXXX")
trap 'rm -rf "$work"' EXIT
scaling=$runfiles/bench/scaling

"$scaling" --server_hosts=own --workers=1 > "$work/no_netns.txt" 2>&1 && fail "--server_hosts=own ran without --netns"
grep -q "server_hosts=own is for --netns" "$work/no_netns.txt" || fail "unclear refusal: $(cat "$work/no_netns.txt")"
"$scaling" --netns --server_hosts=apart --workers=1 > "$work/bad.txt" 2>&1 && fail "--server_hosts=apart was taken"
grep -q "server_hosts is shared or own" "$work/bad.txt" || fail "unclear refusal: $(cat "$work/bad.txt")"
pass "--server_hosts=own without --netns, and a value other than shared or own, are refused before any set-up"

if [ "$(id -u)" != 0 ] || ! ip netns list > /dev/null 2>&1; then
  echo "SKIPPED (not root): the placement checks need network namespaces"
  all_passed
  exit 0
fi

# hosts RUN: the hosts (last octet) of RUN's servers, in server-id order.
hosts() { sed 's/^10\.77\.0\.\([0-9]*\):[0-9]*$/\1/' "$1/servers.txt" | paste -sd' '; }
for placement in own shared; do
  SHARDPS_BIN=$runfiles "$scaling" --netns --rate=200mbit --compute_ms=200 --steps=2 --workers=1,2 --modes=sync \
    --server_hosts=$placement --out="$work/$placement" > "$work/$placement.txt" 2>&1 \
    || fail "bench/scaling --server_hosts=$placement: $(tail -3 "$work/$placement.txt")"
done
grep -q "^netns_cluster: 4 hosts" "$work/own.txt" || fail "own: want 2 worker hosts and 2 server hosts: $(head -1 "$work/own.txt")"
grep -q "servers on hosts of their own" "$work/own.txt" || fail "own: the run does not say where its servers are"
[ "$(hosts "$work/own/sync-n2")" = "3 4" ] || fail "own, N = 2: servers on hosts '$(hosts "$work/own/sync-n2")', want 3 4"
[ "$(hosts "$work/own/sync-n1")" = "1" ] || fail "own, N = 1: the baseline's server on host '$(hosts "$work/own/sync-n1")', want 1"
grep -q "^netns_cluster: 2 hosts" "$work/shared.txt" || fail "shared: want 2 hosts: $(head -1 "$work/shared.txt")"
[ "$(hosts "$work/shared/sync-n2")" = "1 2" ] || fail "shared, N = 2: servers on hosts '$(hosts "$work/shared/sync-n2")', want 1 2"
pass "own: N = 2's servers on hosts 3 and 4 of 4, N = 1's beside its worker; shared: server i beside worker i"
all_passed
