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
if [ "$(id -u)" = 0 ]; then
  "$scaling" --netns --server_hosts=own --workers=1,128 > "$work/too_many.txt" 2>&1 && fail "a cluster of 256 hosts was taken"
  grep -q "would need 256 hosts; it holds 254" "$work/too_many.txt" || fail "unclear refusal: $(cat "$work/too_many.txt")"
fi
pass "--server_hosts=own without --netns, another value than shared or own, and more hosts than the cluster holds are refused before any set-up"

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

# Fewer workers than the largest N, and a fixed server count: the servers
# follow the largest N's workers whatever N is; N = 1 keeps server i on host i.
SHARDPS_BIN=$runfiles "$scaling" --netns --rate=200mbit --compute_ms=200 --steps=2 --workers=1,2,3 --servers=2 --modes=sync \
  --server_hosts=own --out="$work/fixed" > "$work/fixed.txt" 2>&1 || fail "bench/scaling --servers=2: $(tail -3 "$work/fixed.txt")"
grep -q "^netns_cluster: 5 hosts" "$work/fixed.txt" || fail "--servers=2, N up to 3: want 5 hosts: $(head -1 "$work/fixed.txt")"
for n in 2 3; do
  [ "$(hosts "$work/fixed/sync-n$n")" = "4 5" ] || fail "--servers=2, N = $n: servers on hosts '$(hosts "$work/fixed/sync-n$n")', want 4 5"
done
[ "$(hosts "$work/fixed/sync-n1")" = "1 2" ] || fail "--servers=2, N = 1: servers on hosts '$(hosts "$work/fixed/sync-n1")', want 1 2"
pass "--servers=2 with N = 1, 2, 3: N = 2 and 3 put the servers on hosts 4 and 5 of 5, N = 1 on hosts 1 and 2"
all_passed
