#!/usr/bin/env bash
# Flag files and the job flags (common/job_flags.h). The list of job flags is
# the union of the programs' own flags (their --helpfull), the client
# library's options and the Python library's job.flag() names, no more and no
# fewer. A C++ worker stops on a name in its flag file (or a file that one
# names) that no ShardPS program takes, naming the file and the flag it nearly
# is, before doing anything else; another program's flag it ignores. A
# server, whose file may hold a script's flags, takes both and warns about
# the near miss only. Prints a Catch2-style summary line.
set -uo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/shardps
source "$runfiles/tests/checks.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The names a binary's --helpfull lists from ShardPS's own sources (not absl's).
own_flags() {
  "$1" --helpfull 2>&1 | awk '/^  Flags from /{own = ($3 !~ /^(\.\/)?absl\//)} own && /^    --[a-z0-9_]+ /{sub(/^ *--/, "", $1); print $1}'
}
for b in server/ps_server worker/ps_worker bench/emulated_worker tools/shardps_admin; do
  own_flags "$runfiles/$b" > "$work/$(basename $b).txt"
  [ -s "$work/$(basename $b).txt" ] || fail "$b --helpfull listed no flags"
done
grep -RhoE '\.flag\("[a-z0-9_]+"' "$runfiles/python/shardps" | sed 's/.flag("//; s/"$//' > "$work/python.txt"
[ -s "$work/python.txt" ] || fail "no job.flag() names in python/shardps"
sed -n '/kNames\[\] = {/,/};/p' "$runfiles/client/client_config.cc" | grep -oE '"[a-z0-9_]+"' | tr -d '"' > "$work/client.txt"
[ -s "$work/client.txt" ] || fail "no option names in client/client_config.cc"
sort -u "$work"/*.txt > "$work/programs.list"
sed -n '/job flags begin/,/job flags end/p' "$runfiles/common/job_flags.cc" | grep -oE '"[a-z0-9_]+"' | tr -d '"' > "$work/listed"
sort -c "$work/listed" 2> /dev/null || fail "common/job_flags.cc: the list is not sorted"
sort -u "$work/listed" > "$work/listed.sorted"
missing=$(comm -23 "$work/programs.list" "$work/listed.sorted" | tr '\n' ' ')
extra=$(comm -13 "$work/programs.list" "$work/listed.sorted" | tr '\n' ' ')
[ -z "$missing" ] || fail "common/job_flags.cc lacks flags the programs take: $missing"
[ -z "$extra" ] || fail "common/job_flags.cc lists flags no program takes: $extra"
pass "the job flag list is the programs' $(wc -l < "$work/listed") flags"

printf -- '--mode=sync\n--epoch=3\n--optimizer=adam\n' > "$work/typo.flags"
"$runfiles/worker/ps_worker" --flagfile="$work/typo.flags" --servers=127.0.0.1:1 --rank=0 --server_timeout=1s > "$work/worker.out" 2>&1
code=$?
[ "$code" = 1 ] || fail "ps_worker with --epoch in its flag file: exit $code, want 1: $(head -3 "$work/worker.out")"
grep -qF -- "ps_worker: --epoch in $work/typo.flags is not a flag of any ShardPS program (did you mean --epochs?)" \
  "$work/worker.out" || fail "ps_worker did not name the typo, its file and --epochs: $(head -3 "$work/worker.out")"
[ "$(wc -l < "$work/worker.out")" = 1 ] || fail "ps_worker did more than refuse: $(cat "$work/worker.out")"
pass "ps_worker refuses --epoch in its flag file, suggesting --epochs"
printf -- '--partition_bytes=64\n--ephocs=3\n' > "$work/inner.flags"
printf -- '--mode=sync\n--flagfile=%s\n' "$work/inner.flags" > "$work/outer.flags"
"$runfiles/worker/ps_worker" --flagfile="$work/outer.flags" --servers=127.0.0.1:1 --rank=0 --server_timeout=1s \
  > "$work/nested.out" 2>&1
code=$?
[ "$code" = 1 ] || fail "ps_worker with --ephocs in a nested flag file: exit $code: $(head -3 "$work/nested.out")"
grep -qF -- "--ephocs in $work/inner.flags is not a flag of any ShardPS program (did you mean --epochs?)" \
  "$work/nested.out" || fail "ps_worker did not name the nested file's typo: $(head -3 "$work/nested.out")"
pass "ps_worker refuses a typo in a flag file its flag file names"

printf -- '--mode=sync\n--optimizer=adam\n--row_lr=0.1\n--nonesterov\n' > "$work/others.flags"
"$runfiles/worker/ps_worker" --flagfile="$work/others.flags" --helpfull > "$work/others.out" 2>&1
grep -q "is not a flag" "$work/others.out" && fail "ps_worker refused another program's flag: $(head -3 "$work/others.out")"
grep -q "Flags from worker/ps_worker_main.cc" "$work/others.out" || fail "ps_worker did not go on to parse: $(head -3 "$work/others.out")"
pass "ps_worker takes the servers' and the Python library's flags in its file"

printf -- '--mode=sync\n--epoch=3\n--data=train.tsv\n' > "$work/script.flags"
"$runfiles/server/ps_server" --flagfile="$work/script.flags" --helpfull > "$work/server.out" 2>&1
grep -qF -- "ps_server: warning: ignoring --epoch in $work/script.flags: no ShardPS program takes it (did you mean --epochs?)" \
  "$work/server.out" || fail "ps_server did not warn about --epoch: $(head -3 "$work/server.out")"
grep -q -- "ignoring --data" "$work/server.out" && fail "ps_server warned about a script's --data"
grep -q "Flags from server/ps_server_main.cc" "$work/server.out" || fail "ps_server stopped on a foreign flag"
pass "ps_server warns about --epoch, takes a script's --data and goes on"
printf -- '--data=train.tsv\n--dim=16\n' > "$work/script_own.flags"
printf -- '--mode=sync\n--flagfile=%s\n' "$work/script_own.flags" > "$work/with_nested.flags"
"$runfiles/server/ps_server" --flagfile="$work/with_nested.flags" --helpfull > "$work/server_nested.out" 2>&1
grep -q "Flags from server/ps_server_main.cc" "$work/server_nested.out" \
  || fail "ps_server stopped on a script's flags in a nested file: $(head -3 "$work/server_nested.out")"
pass "ps_server takes a script's flags from a flag file its flag file names"
all_passed
