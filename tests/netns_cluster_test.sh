#!/usr/bin/env bash
# deploy/netns/netns_cluster: two emulated hosts get their addresses only
# inside their namespaces and know each other's link-layer addresses (as
# the switch knows their ports), a real ps_server in host 1 serves a push_pull
# client in host 0 across the shaped link, a host's outgoing queue honors
# socket priority (pfifo_fast) where the switch's is a plain FIFO, --sysctl
# reaches every host, and `down` leaves nothing behind.
# Needs root (network namespaces); says SKIPPED otherwise.
set -uo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/shardps
cluster=$runfiles/deploy/netns/netns_cluster
prefix=spstest$$
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/netns.XXXXXX")
source "$runfiles/tests/checks.sh"
on_fail() { "$cluster" down --prefix="$prefix"; }

if [ "$(id -u)" != 0 ] || ! ip netns list > /dev/null 2>&1; then
  echo "SKIPPED (not root): netns_cluster_test: network namespaces need root"
  exit 0
fi
trap '"$cluster" down --prefix="$prefix"; rm -rf "$work"' EXIT

"$runfiles/bench/scaling" --host_sysctl=net.ipv4.tcp_rmem=4096 --workers=1 > "$work/no_netns.txt" 2>&1 \
  && fail "bench/scaling took --host_sysctl without --netns"
grep -q "host_sysctl is for --netns" "$work/no_netns.txt" || fail "no clear error for --host_sysctl without --netns: $(cat "$work/no_netns.txt")"
pass "bench/scaling refuses --host_sysctl without --netns (before setting anything up)"

"$cluster" up 2 --prefix="$prefix" --rate=200mbit --sysctl="net.ipv4.tcp_rmem=4096 32768 65536" > "$work/up.txt" || fail "up"
[ "$(ip netns list | grep -c "^$prefix-")" = 3 ] || fail "want 2 host namespaces and a switch"
# Output is read whole before grep: with pipefail, `ip ... | grep -q` fails
# at random when grep exits on the first match and ip gets SIGPIPE.
root_addrs=$(ip -o addr)
grep -q "10\.77\." <<<"$root_addrs" && fail "an emulated address leaked outside the namespaces"
host1_addrs=$("$cluster" --prefix="$prefix" exec 1 ip -o addr show dev eth0)
grep -q "10.77.0.2/24" <<<"$host1_addrs" || fail "host 1 has no 10.77.0.2: $host1_addrs"
pass "two hosts, addresses only inside their namespaces"

host1_mac=$("$cluster" --prefix="$prefix" exec 1 cat /sys/class/net/eth0/address)
neighbours=$("$cluster" --prefix="$prefix" exec 0 ip neigh show dev eth0)
grep -q "^10.77.0.2 lladdr $host1_mac PERMANENT" <<<"$neighbours" || fail "host 0 does not know host 1's address ($host1_mac): $neighbours"
fdb=$(ip netns exec "$prefix-sw" bridge fdb show)
grep -q "^$host1_mac dev h1 master br0 static" <<<"$fdb" || fail "the switch does not know host 1's port: $fdb"
pass "every host knows the others' link-layer addresses and the switch their ports (no ARP flood at start)"

host_queue=$("$cluster" --prefix="$prefix" exec 0 tc qdisc show dev eth0)
grep -q "pfifo_fast 10: parent 1:10 bands 3" <<<"$host_queue" || fail "host 0's outgoing queue is not pfifo_fast: $host_queue"
switch_queue=$(ip netns exec "$prefix-sw" tc qdisc show dev h0)
grep -q "pfifo 10: parent 1:10" <<<"$switch_queue" || fail "the switch's port is not a FIFO: $switch_queue"
"$cluster" up 2 --prefix="${prefix}x" --host_queue=fq > "$work/bad.txt" 2>&1 && fail "--host_queue=fq was taken"
grep -q "want pfifo_fast or pfifo" "$work/bad.txt" || fail "no clear error for --host_queue=fq: $(cat "$work/bad.txt")"
pass "each host's queue is pfifo_fast, each switch port a FIFO; another queue is refused"

# One /24 holds 254 hosts: a larger count, none, or not a number is refused
# with exit 2 before anything is set up.
for hosts in 255 0 two; do
  rc=0
  "$cluster" up "$hosts" --prefix="${prefix}z" > "$work/bad_hosts.txt" 2>&1 || rc=$?
  [ "$rc" = 2 ] || fail "up $hosts exited $rc, not 2"
  grep -q "from 1 to 254 (one /24), not '$hosts'" "$work/bad_hosts.txt" \
    || fail "no clear error for up $hosts: $(cat "$work/bad_hosts.txt")"
done
[ "$(ip netns list | grep -c "^${prefix}z-")" = 0 ] || fail "a refused host count left namespaces behind"
pass "up refuses 255 hosts, 0 and a count that is not a number (one /24 holds 254), and sets nothing up"

for i in 0 1; do
  rmem=$("$cluster" --prefix="$prefix" exec $i cat /proc/sys/net/ipv4/tcp_rmem)
  [ "$(echo $rmem)" = "4096 32768 65536" ] || fail "host $i's tcp_rmem is '$rmem', not what --sysctl set"
done
"$cluster" up 2 --prefix="${prefix}y" --sysctl=net.ipv4.no_such_setting=1 > "$work/bad_sysctl.txt" 2>&1 && fail "a sysctl that does not exist was taken"
grep -q "sysctl=net.ipv4.no_such_setting=1 cannot be set" "$work/bad_sysctl.txt" || fail "no clear error for a bad --sysctl: $(cat "$work/bad_sysctl.txt")"
[ "$(ip netns list | grep -c "^${prefix}y-")" = 0 ] || fail "a refused set-up left namespaces behind"
pass "--sysctl sets a kernel setting in every host; one that cannot be set stops the set-up and leaves nothing"

# Two flows from host 0 to host 1, one marked bulk (TOS 0x08, which Linux
# maps to priority 2, TC_PRIO_BULK, as ps_server's --socket_priority does).
# The bulk flow runs 8 s; a normal flow runs 2 s inside it and should take
# the shaped link. Rates are compared with the bulk flow's own rate while
# alone, in the same run, so neither a late start nor a slow machine decides.
if command -v iperf3 > /dev/null; then
  for p in 5301 5302; do
    "$cluster" --prefix="$prefix" exec 1 iperf3 -s -1 -p $p -B 10.77.0.2 > /dev/null 2>&1 &
  done
  for _ in $(seq 100); do
    listening=$("$cluster" --prefix="$prefix" exec 1 ss -Hltn)
    grep -q ":5301 " <<<"$listening" && grep -q ":5302 " <<<"$listening" && break
    sleep 0.05
  done
  "$cluster" --prefix="$prefix" exec 0 iperf3 -c 10.77.0.2 -p 5301 -t 8 -i 0.5 -S 0x08 -J > "$work/bulk.json" 2>&1 &
  bulk=$!
  for _ in $(seq 100); do
    flows=$("$cluster" --prefix="$prefix" exec 0 ss -Htn state established "( dport = :5301 )")
    [ "$(wc -l <<<"$flows")" -ge 2 ] && break  # iperf3's control and data connections
    sleep 0.05
  done
  "$cluster" --prefix="$prefix" exec 0 iperf3 -c 10.77.0.2 -p 5302 -t 2 -J > "$work/normal.json" 2>&1 || fail "iperf3: $(tail -3 "$work/normal.json")"
  wait $bulk || fail "iperf3 (bulk): $(tail -3 "$work/bulk.json")"
  # Prints: the bulk flow's best and worst half-second rates, the normal flow's mean rate (Mbit/s).
  rates=$(/usr/bin/python3 - "$work/bulk.json" "$work/normal.json" <<'PY'
import json, sys
bulk, normal = (json.load(open(f)) for f in sys.argv[1:])
steps = [i["sum"]["bits_per_second"] / 1e6 for i in bulk["intervals"] if i["sum"]["seconds"] > 0.4]
print(f'{max(steps):.0f} {min(steps):.0f} {normal["end"]["sum_sent"]["bits_per_second"] / 1e6:.0f}')
PY
) || fail "could not read iperf3's reports"
  read -r alone held normal <<<"$rates"
  [ "$((normal * 10))" -ge "$((alone * 7))" ] || fail "the normal flow got $normal Mbit/s beside the bulk flow, which alone got $alone"
  [ "$((held * 10))" -le "$((alone * 3))" ] || fail "the bulk flow was not held back: at worst $held Mbit/s against $alone alone"
  pass "a bulk-priority flow yields the host's link (bulk alone $alone Mbit/s, beside a normal flow $held; the normal flow $normal)"
else
  echo "SKIPPED: priority check needs iperf3 (tools/setup installs it)"
fi

"$cluster" --prefix="$prefix" exec 1 "$runfiles/server/ps_server" --mode=async --port=0 --bind_address=10.77.0.2 \
  --log_level=warn > "$work/server.out" 2>&1 &
server=$!
port=$("$runfiles/deploy/listening_port" "$work/server.out" "$server") || fail "server did not start: $(cat "$work/server.out")"
"$cluster" --prefix="$prefix" exec 0 "$runfiles/bench/push_pull" --servers="10.77.0.2:$port" --sizes_mb=4 --repeats=3 --warmup=1 \
  --tcp_baseline_mb=0 --socket_baseline=false > "$work/client.txt" 2>&1 || fail "push_pull across hosts: $(cat "$work/client.txt")"
kill -TERM "$server"; wait "$server"
# 8 MB per round over a 200 Mbit/s link takes at least 320 ms: the link is shaped.
ms=$(awk '$1 == "size_MB" {for (i = 1; i <= NF; i++) if ($i == "ms/round") col = i} $1 == "4" && col {print $col}' "$work/client.txt")
[ -n "$ms" ] && awk -v ms="$ms" 'BEGIN {exit !(ms >= 300)}' || fail "a round took $ms ms; the 200 Mbit/s link is not shaped"
pass "a server in host 1 serves a client in host 0 over the shaped link ($ms ms per 8 MB round)"

# Each host's TCP counters are its own; `tcp H` sums hosts 0..H-1's
# retransmission timeouts, segments sent again and segments sent, as the
# kernel's own nstat reads them in each namespace (read before and after,
# so a late segment cannot make the check fail).
nstat_sum() {
  for ((i = 0; i < $1; i++)); do
    ip netns exec "$prefix-h$i" nstat -asz TcpExtTCPTimeouts TcpRetransSegs TcpOutSegs
  done | awk '$1 == "TcpExtTCPTimeouts" {t += $2} $1 == "TcpRetransSegs" {r += $2} $1 == "TcpOutSegs" {o += $2}
              END {printf "%.0f %.0f %.0f\n", t, r, o}'
}
for h in 1 2; do
  read -r -a before <<<"$(nstat_sum $h)"
  read -r -a got <<<"$("$cluster" --prefix="$prefix" tcp $h)"
  read -r -a after <<<"$(nstat_sum $h)"
  [ "${#got[@]}" = 3 ] || fail "tcp $h printed '${got[*]}', not three counts"
  for k in 0 1 2; do
    [[ ${got[$k]} =~ ^[0-9]+$ ]] && [ "${got[$k]}" -ge "${before[$k]}" ] && [ "${got[$k]}" -le "${after[$k]}" ] \
      || fail "tcp $h printed '${got[*]}'; nstat summed '${before[*]}' before it and '${after[*]}' after"
  done
  [ "$h" = 1 ] && sent0=${got[2]}
done
[ "$sent0" -gt 5000 ] && [ "$((got[2] - sent0))" -gt 5000 ] || fail "segments sent: host 0 $sent0, both ${got[2]}: the rounds' 16 MB each way are missing"
"$cluster" --prefix="$prefix" tcp 3 > "$work/tcp3.txt" 2>&1 && fail "tcp 3 with 2 hosts printed $(cat "$work/tcp3.txt")"
grep -q "no host 2" "$work/tcp3.txt" || fail "no clear error for a host that is not there: $(cat "$work/tcp3.txt")"
[ ! -s "$work/tcp3.txt" ] || ! grep -q "^[0-9]" "$work/tcp3.txt" || fail "tcp 3 printed counts beside its error: $(cat "$work/tcp3.txt")"
"$cluster" --prefix="$prefix" tcp 0 > "$work/tcp0.txt" 2>&1 && fail "tcp 0 printed $(cat "$work/tcp0.txt")"
pass "tcp sums each host's counters as nstat reads them (host 0 sent $sent0 segments, host 1 $((got[2] - sent0)); ${got[1]} again, ${got[0]} timeouts), and refuses a missing host or none"

"$cluster" down --prefix="$prefix"
[ "$(ip netns list | grep -c "^$prefix-")" = 0 ] || fail "namespaces left after down"
pass "down removes every namespace"
all_passed
