#!/usr/bin/env bash
# The operator tools on a real job: 2 ps_server processes and a ps_worker
# (with a job token), then shardps_admin status | checkpoint | stop on both
# servers, and shardps_ckpt list | merge | reshard, whose model Python's
# safetensors package loads and checks against the shards
# (tests/check_merged_model.py);
# then deploy/ps_launch --tls=mutual.
# Prints a Catch2-style summary line for tools/test.
set -uo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/shardps
bin=$runfiles
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/tools.XXXXXX")
pids=()
trap 'for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$work"' EXIT
source "$runfiles/tests/checks.sh"
python=${SHARDPS_PY_VENV:-/opt/shardps-tools/venv}/bin/python
[ -x "$python" ] || fail "no Python venv with safetensors at $python: run tools/setup"

echo "tools-test-token" > "$work/token"
cat > "$work/job.flags" <<FLAGS
--num_servers=2
--num_workers=1
--mode=sync
--model=mlp
--epochs=2
--max_steps_per_epoch=30
--log_every=0
--lr=0.04
--momentum=0.9
--partition_bytes=65536
--checkpoint_dir=$work/checkpoints
--checkpoint_every=20
--auth_token_file=$work/token
FLAGS
addresses=()
for s in 0 1; do
  "$bin/server/ps_server" --flagfile="$work/job.flags" --server_id=$s --port=0 > "$work/server-$s.out" 2> "$work/server-$s.log" &
  pids+=($!)
done
for s in 0 1; do
  port=$("$runfiles/deploy/listening_port" "$work/server-$s.out" "${pids[$s]}") || fail "server $s did not start"
  addresses+=("127.0.0.1:$port")
done
servers=$(IFS=,; echo "${addresses[*]}")
"$bin/worker/ps_worker" --flagfile="$work/job.flags" --servers="$servers" --rank=0 --metrics_port=0 --health_port=0 \
  > "$work/worker.log" 2>&1 || { cat "$work/worker.log"; fail "the worker failed"; }
grep -q "metrics on port [1-9]" "$work/worker.log" || { cat "$work/worker.log"; fail "the worker served no metrics"; }
grep -q "health port [1-9]" "$work/worker.log" || { cat "$work/worker.log"; fail "the worker served no health port"; }
pass "a job of 2 servers and a worker (serving /metrics and gRPC health) trained 60 steps with a job token"

admin="$bin/tools/shardps_admin --servers=$servers"
out=$($admin status --flagfile="$work/job.flags") || { echo "$out"; fail "status"; }
echo "$out"
[ "$(echo "$out" | grep -c $'\tSYNC\t60..60\t')" = 2 ] || fail "status does not show both servers at step 60"
echo "$out" | grep -q $'^1\t127.0.0.1:' || fail "status does not name server 1"
pass "status: both servers, their mode, step and incarnation"

if $admin status > "$work/no-token.txt"; then fail "status without the token succeeded"; fi
grep -q "does not carry the job token" "$work/no-token.txt" || { cat "$work/no-token.txt"; fail "no UNAUTHENTICATED"; }
pass "status without the job token is refused"

out=$($admin checkpoint --flagfile="$work/job.flags") || { echo "$out"; fail "checkpoint"; }
[ "$(echo "$out" | grep -c "wrote .*step-60.safetensors")" = 2 ] || { echo "$out"; fail "no checkpoint of step 60"; }
pass "checkpoint: both servers wrote step 60"

out=$("$bin/tools/shardps_ckpt" list --dir="$work/checkpoints") || fail "list"
echo "$out" | grep -q "steps every server holds: \[40, 60\]" || { echo "$out"; fail "list: $out"; }
"$bin/tools/shardps_ckpt" merge --dir="$work/checkpoints" --out="$work/model.safetensors" || fail "merge"
"$python" "$runfiles/tests/check_merged_model.py" "$work/model.safetensors" "$work/checkpoints" 60 \
  "1.dense/w=784x256,1.dense/b=256,3.dense/w=256x128,3.dense/b=128,5.dense/w=128x10,5.dense/b=10" || fail "the merged model"
pass "merge: one safetensors file of the whole model that Python's safetensors loads, equal to the shards"

if "$bin/tools/shardps_ckpt" merge --dir="$work/checkpoints" --step=20 --out="$work/x.safetensors" 2> "$work/merge.err"; then
  fail "merge of a step no longer kept succeeded"
fi
grep -q "every one has \[40, 60\]" "$work/merge.err" || { cat "$work/merge.err"; fail "merge error"; }
pass "merge of a step not kept names the steps there are"

"$bin/tools/shardps_ckpt" reshard --dir="$work/checkpoints" --servers=3 --out="$work/resharded" > /dev/null || fail "reshard"
for s in 0 1 2; do
  [ -f "$work/resharded/shard-$s-of-3-step-60.safetensors" ] || fail "reshard: no shard $s of 3"
done
"$bin/tools/shardps_ckpt" merge --dir="$work/resharded" --out="$work/model3.safetensors" > /dev/null || fail "merge of 3"
"$python" "$runfiles/tests/check_merged_model.py" "$work/model3.safetensors" "$work/checkpoints" 60 \
  "1.dense/w=784x256,1.dense/b=256,3.dense/w=256x128,3.dense/b=128,5.dense/w=128x10,5.dense/b=10" ||
  fail "the resharded checkpoint's model differs from the 2 servers'"
pass "reshard: step 60 for 3 servers, whose merged model is the 2 servers'"

$admin stop --flagfile="$work/job.flags" > /dev/null || fail "stop"
for s in 0 1; do
  wait "${pids[$s]}"
  code=$?
  [ "$code" = 0 ] || fail "server $s exited $code after stop"
  grep -q "stop requested" "$work/server-$s.log" || fail "server $s log does not say why it stopped"
done
pids=()
pass "stop: both servers exit 0"

# The local launcher with mutual TLS and a job token from make_certs.
SHARDPS_BIN=$bin "$runfiles/deploy/ps_launch" --tls=mutual --servers=2 --workers=2 --out="$work/launch" \
  --epochs=1 --max_steps_per_epoch=20 --log_every=0 > "$work/launch.out" 2>&1 || { cat "$work/launch.out"; fail "ps_launch --tls=mutual"; }
for s in 0 1; do
  grep -q "mutual TLS, job token required" "$work/launch/server-$s.log" || fail "server $s of ps_launch --tls=mutual"
done
grep -q "done: 20 steps" "$work/launch/worker-1.log" || fail "worker 1 of ps_launch --tls=mutual"
"$runfiles/deploy/ps_launch" --tls=yes > "$work/launch.err" 2>&1 && fail "ps_launch --tls=yes was accepted"
grep -q "none, tls or mutual" "$work/launch.err" || fail "ps_launch --tls=yes: $(cat "$work/launch.err")"
pass "ps_launch --tls=mutual: both servers require client certificates and the token; the workers train"

# A flag file ps_launch cannot read stops it (it ran the default job and
# exited 0); so do counts it cannot take.
rc=0; SHARDPS_BIN=$bin "$runfiles/deploy/ps_launch" --flagfile="$work/no-such.flags" --out="$work/nf" > "$work/nf.err" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "ps_launch with an unreadable --flagfile exited $rc, not 2"
grep -q "cannot read --flagfile=$work/no-such.flags" "$work/nf.err" || fail "ps_launch --flagfile: $(cat "$work/nf.err")"
for bad in --servers=0 --workers=x; do
  "$runfiles/deploy/ps_launch" "$bad" > "$work/nf.err" 2>&1 && fail "ps_launch $bad was taken"
  grep -q "must be a count of at least 1" "$work/nf.err" || fail "ps_launch $bad: $(cat "$work/nf.err")"
done
# A flag file whose last line has no newline keeps it a line of its own, and
# a run into a used --out prints no summary of the last run's.
printf -- '--max_steps_per_epoch=10' > "$work/no-newline.flags"
echo '{"accuracy": 0.123}' > "$work/launch/summary-7.json"
SHARDPS_BIN=$bin "$runfiles/deploy/ps_launch" --servers=1 --workers=1 --out="$work/launch" --flagfile="$work/no-newline.flags" \
  --epochs=1 --log_every=0 > "$work/again.out" 2>&1 || { cat "$work/again.out"; fail "ps_launch with a flag file lacking its last newline"; }
grep -qx -- --max_steps_per_epoch=10 "$work/launch/job.flags" || fail "the flag file's last line: $(cat "$work/launch/job.flags")"
grep -qx -- --num_servers=1 "$work/launch/job.flags" || fail "--num_servers merged into the flag file's last line"
[ ! -e "$work/launch/summary-7.json" ] || fail "the last run's summary was left in --out"
grep -q "done: 10 steps" "$work/launch/worker-0.log" || fail "the job did not take --max_steps_per_epoch from the flag file"
pass "ps_launch: an unreadable flag file or a bad count exits 2 naming it; a last line without newline stays a flag; no stale summary"
# A misspelt job flag stops the job: the worker names it, ps_launch says the
# worker failed, and no server is left running.
rc=0; SHARDPS_BIN=$bin "$runfiles/deploy/ps_launch" --servers=1 --workers=1 --out="$work/typo" --epoch=3 \
  > "$work/typo.out" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "ps_launch --epoch=3 exited $rc, not 1: $(tail -3 "$work/typo.out")"
grep -q "ps_worker: --epoch in $work/typo/job.flags is not a flag of any ShardPS program (did you mean --epochs?)" \
  "$work/typo.out" || fail "ps_launch --epoch=3 did not show the worker's refusal: $(tail -3 "$work/typo.out")"
grep -q "worker 0 failed" "$work/typo.out" || fail "ps_launch --epoch=3 did not say the worker failed"
server_pid=$(cat "$work/typo/server-0.pid") || fail "ps_launch --epoch=3 started no server"
! kill -0 "$server_pid" 2> /dev/null || fail "the server of the refused job still runs"
pass "ps_launch --epoch=3: the worker refuses the misspelt flag, naming --epochs; the job ends 1 with no server left"
all_passed
