#!/usr/bin/env bash
# deploy/slurm/ps_slurm on a real one-node Slurm (slurmctld, slurmd and munge
# from Debian, a slurm.conf under the test's temp dir): a job of 2 servers and
# 2 workers (oversubscribed on 2 cores), with mutual TLS and a job token,
# trains to its accuracy with exit code 0; one with a server's job step cancelled mid-run recovers in its
# allocation; one requeued mid-run resumes from its checkpoints; a Python
# script runs as the workers (--script); the scaling
# harness runs its sweep as Slurm jobs; a failing one ends non-zero. Then
# the daemons are stopped and nothing is left behind.
# Needs root. Prints a Catch2-style summary line for tools/test.
set -uo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/shardps
# Under /tmp, not Bazel's long TEST_TMPDIR: slurmd's spool holds Unix sockets,
# whose paths may not exceed 108 bytes.
work=$(mktemp -d /tmp/shardps-slurm.XXXXXX)
source "$runfiles/tests/checks.sh"
[ "$(id -u)" = 0 ] || fail "needs root to run slurmctld and slurmd"
for b in slurmctld slurmd sbatch munged; do command -v "$b" > /dev/null || fail "no $b: run tools/setup"; done

# Counts ps_slurm takes are checked before anything is written or submitted.
for bad in --restart_servers= --restart_servers=3x --gpus_per_worker=abc --port_base=0 --port_base=65535 --workers=0; do
  "$runfiles/deploy/slurm/ps_slurm" --servers=2 --job_dir=/nonexistent/job "$bad" > /dev/null 2> "$TEST_TMPDIR/bad.err" \
    && fail "ps_slurm $bad was taken"
  grep -q "ps_slurm: --" "$TEST_TMPDIR/bad.err" || fail "no clear error for ps_slurm $bad: $(cat "$TEST_TMPDIR/bad.err")"
done
[ ! -e /nonexistent/job ] || fail "a refused ps_slurm wrote its job directory"
pass "ps_slurm refuses an empty or non-numeric count and a port base with no room, naming the flag"
for bad in "/nonexistent/a job" '/nonexistent/job;touch /tmp/x' '/nonexistent/$(job)' /nonexistent/a,b; do
  "$runfiles/deploy/slurm/ps_slurm" --servers=2 --bin="$runfiles" --job_dir="$bad" > /dev/null 2> "$TEST_TMPDIR/bad.err" \
    && fail "ps_slurm --job_dir='$bad' was taken"
  grep -qF "ps_slurm: the path '$bad' holds a space, a comma, a colon or a shell character" "$TEST_TMPDIR/bad.err" \
    || fail "no clear error for ps_slurm --job_dir='$bad': $(cat "$TEST_TMPDIR/bad.err")"
done
[ ! -e /nonexistent ] || fail "a refused ps_slurm wrote its job directory"
pass "ps_slurm refuses a job directory with a space, a comma or a shell character, naming it"
# A job directory whose checkpoints hold an earlier job's is refused unless --resume asks to go on from them.
old=$TEST_TMPDIR/old_job
mkdir -p "$old/checkpoints/server-0" "$TEST_TMPDIR/other_ckpt" && touch "$old/checkpoints/server-0/step-10"
"$runfiles/deploy/slurm/ps_slurm" --servers=1 --bin="$runfiles" --job_dir="$old" > /dev/null 2> "$TEST_TMPDIR/bad.err" \
  && fail "ps_slurm took a job directory holding an earlier job's checkpoints"
grep -qF "ps_slurm: $old/checkpoints is not empty: an earlier job's checkpoints?" "$TEST_TMPDIR/bad.err" \
  || fail "no clear error for an earlier job's checkpoints: $(cat "$TEST_TMPDIR/bad.err")"
[ ! -e "$old/job.flags" ] || fail "a refused ps_slurm wrote job.flags"
printf '  --checkpoint_dir=%s' "$TEST_TMPDIR/other_ckpt" > "$TEST_TMPDIR/other.flags"  # indented, no last newline
"$runfiles/deploy/slurm/ps_slurm" --servers=1 --bin="$runfiles" --job_dir="$old" --flagfile="$TEST_TMPDIR/other.flags" \
  > /dev/null || fail "ps_slurm refused a job directory whose job checkpoints elsewhere, to an empty directory"
[ "$(grep -c -- "--checkpoint_dir=" "$old/job.flags")" = 1 ] ||
  fail "a --checkpoint_dir from --flagfile did not replace the default: $(grep -- --checkpoint_dir "$old/job.flags")"
"$runfiles/deploy/slurm/ps_slurm" --servers=1 --bin="$runfiles" --job_dir="$old" --resume > /dev/null \
  || fail "ps_slurm --resume refused the earlier job's checkpoints"
grep -qx -- "--checkpoint_dir=$old/checkpoints" "$old/job.flags" || fail "--resume's job does not use the old checkpoints"
pass "ps_slurm refuses an earlier job's checkpoints unless --resume asks to go on from them"

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# server_ports N: a base port whose N ports from it are free, below the
# kernel's ephemeral range (as ps_slurm's default 7000 is). A base from that
# range can be taken, between a job's first run and its requeued one, by any
# process's ephemeral port: srun's own listeners took a server's port once.
server_ports() {
  python3 - "$1" <<'PY'
import random, socket, sys
n = int(sys.argv[1])
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(1000):
    base = random.randrange(10000, low - n)
    socks = []
    try:
        for p in range(base, base + n):
            s = socket.socket()
            s.bind(("0.0.0.0", p))
            socks.append(s)
    except OSError:
        continue
    finally:
        for s in socks:
            s.close()
    print(base)
    sys.exit(0)
sys.exit("no free server ports below the ephemeral range")
PY
}
conf=$work/slurm.conf
export SLURM_CONF=$conf
started_munge=0
daemons=()
stop_all() {
  scancel --quiet --full "$(squeue --noheader --format=%i | paste -sd, -)" 2>/dev/null
  # The daemons run in the foreground as this script's children, so that
  # waiting reaps them (this sandbox's PID 1 reaps no orphans).
  for pid in "${daemons[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${daemons[@]}"; do wait "$pid" 2>/dev/null; done
  daemons=()
  [ "$started_munge" = 1 ] && pkill -x munged
}
trap 'stop_all; [ -n "${KEEP_WORK:-}" ] || rm -rf "$work"' EXIT

mkdir -p "$work/state" "$work/spool" "$work/log" "$work/shared"
host=$(hostname -s)
cat > "$conf" <<CONF
ClusterName=shardps-test
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
SlurmdParameters=config_overrides
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
NodeName=$host CPUs=8 State=UNKNOWN
PartitionName=shardps Nodes=ALL Default=YES OverSubscribe=FORCE:4 MaxTime=INFINITE State=UP
CONF
if ! pgrep -x munged > /dev/null; then
  install -d -o munge -g munge -m 0755 /run/munge
  runuser -u munge -- /usr/sbin/munged || fail "munged did not start"
  started_munge=1
fi
slurmctld -D -c -i -f "$conf" > "$work/log/slurmctld.out" 2>&1 &
daemons+=($!)
slurmd -D -c -f "$conf" > "$work/log/slurmd.out" 2>&1 &
daemons+=($!)
for _ in $(seq 1 100); do [ "$(sinfo --noheader --format=%T 2>/dev/null)" = idle ] && break; sleep 0.1; done
[ "$(sinfo --noheader --format=%T)" = idle ] || { cat "$work/log/"*; fail "the node is not idle"; }
pass "slurmctld and slurmd up on $host, the node idle"

# submit NAME [job flags...]: submits a 2-server, 2-worker job; prints its id.
submit() {
  local name=$1
  shift
  "$runfiles/deploy/slurm/ps_slurm" --servers=2 --workers=2 --job_dir="$work/shared/$name" --gpus_per_worker=0 \
    --bin="$runfiles" --port_base="$(server_ports 2)" --epochs=2 --log_every=100 --checkpoint_every=100 "$@" --submit \
    -- --overcommit | tail -1
}
# state ID: the job's state (COMPLETED, FAILED, RUNNING...).
state() { scontrol show job "$1" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
# finish ID: waits (up to 3 minutes) for the job to end; prints its exit code.
finish() {
  for _ in $(seq 1 1800); do
    case $(state "$1") in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL) break ;; esac
    sleep 0.1
  done
  case $(state "$1") in
    COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL) scontrol show job "$1" | sed -n 's/.*ExitCode=\([0-9:]*\).*/\1/p' ;;
    *) echo "still $(state "$1") after 3 minutes: $(scontrol show job "$1" | grep -o 'Reason=[^ ]*')" ;;
  esac
}
accuracy() { sed -n 's/.*"final_test_accuracy": \([-0-9.e]*\).*/\1/p' "$1"; }
# step_named ID NAME: the id of the job's step called NAME, once it runs.
step_named() {
  for _ in $(seq 1 300); do
    step=$(squeue --steps --job="$1" --noheader --format="%i %j" | awk -v n="$2" '$2 == n {print $1}')
    [ -n "$step" ] && { echo "$step"; return 0; }
    sleep 0.1
  done
  return 1
}
# wait_step LOG N: until the worker log shows step N of an epoch.
wait_step() { for _ in $(seq 1 600); do grep -q "step $2/" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }

id=$(submit secured --tls=mutual) || fail "sbatch"
code=$(finish "$id")
[ "$code" = 0:0 ] || { cat "$work/shared/secured/slurm-$id.out" "$work/shared/secured/run-0/"*.log; fail "job $id ended $code"; }
acc=$(accuracy "$work/shared/secured/run-0/summary-0.json")
awk -v a="$acc" 'BEGIN { exit !(a >= 0.84) }' || { cat "$work/shared/secured/slurm-$id.out" "$work/shared/secured/run-0/"*.log | tail -40; fail "test accuracy $acc < 0.84 after 2 epochs"; }
grep -q "mutual TLS, job token required" "$work/shared/secured/run-0/server-0.log" ||
  { cat "$work/shared/secured/run-0/server-0.log"; fail "the servers did not serve mutual TLS with a token"; }
pass "a 2-server, 2-worker job with mutual TLS and a job token ends 0:0 with test accuracy $acc"

id=$(submit cancel) || fail "sbatch"
wait_step "$work/shared/cancel/run-0/worker-0.log" 300 || fail "job $id did not reach step 300"
step=$(step_named "$id" server-1) || fail "no server-1 step"
scancel "$step"
code=$(finish "$id")
out=$(cat "$work/shared/cancel/slurm-$id.out")
[ "$code" = 0:0 ] || { echo "$out"; fail "job $id ended $code after its server step was cancelled"; }
echo "$out" | grep -q "server 1 ended with code .*; starting it again (1 of 3)" || { echo "$out"; fail "no restart"; }
grep -q "rejoined the job at step" "$work/shared/cancel/run-0/worker-0.log" || fail "the workers did not rejoin"
pass "a server step cancelled mid-run is started again; the job rewinds and ends 0:0"

id=$(submit replicated --replicas=2) || fail "sbatch"
wait_step "$work/shared/replicated/run-0/worker-0.log" 300 || fail "job $id did not reach step 300"
step=$(step_named "$id" server-1) || fail "no server-1 step"
scancel "$step"
code=$(finish "$id")
out=$(cat "$work/shared/replicated/slurm-$id.out")
[ "$code" = 0:0 ] || { echo "$out"; cat "$work/shared/replicated/run-0/"*.log | tail -60; fail "job $id ended $code after its server step was cancelled"; }
echo "$out" | grep -q "server 1 joins the running job" || { echo "$out"; fail "the restarted server was not told to join"; }
grep -q "has a copy of every key it holds" "$work/shared/replicated/run-0/server-1.log" ||
  { tail -30 "$work/shared/replicated/run-0/server-1.log"; fail "server 1 did not become live again"; }
! grep -q "rejoined the job at step" "$work/shared/replicated/run-0/worker-0.log" || fail "the workers rewound"
pass "with --replicas=2 a server step cancelled mid-run joins the running job again; no rewind, and it ends 0:0"

id=$(submit requeue) || fail "sbatch"
wait_step "$work/shared/requeue/run-0/worker-0.log" 300 || fail "job $id did not reach step 300"
scontrol requeue "$id" || fail "requeue"
# Slurm holds a requeued job back for two minutes; let it start sooner, once
# it is pending again and slurmd has forgotten its first run (for a few
# seconds after a kill it refuses the job: "already killed").
sleep 5
for _ in $(seq 1 600); do
  [ -d "$work/shared/requeue/run-1" ] && break
  [ "$(state "$id")" = PENDING ] && scontrol update JobId="$id" StartTime=now
  sleep 0.5
done
code=$(finish "$id")
if [ "$code" != 0:0 ]; then
  cat "$work/shared/requeue/slurm-$id.out"
  scontrol show job "$id"
  grep -E "JobId=$id |job_id=$id|JobId=$id$" "$work/log/slurmctld.log" | tail -20
  grep -E "$id" "$work/log/slurmd.log" | tail -20
  tail -n 15 "$work/shared/requeue/run-"*/*.log
  fail "requeued job $id ended $code"
fi
grep -q "joined the job at step [1-9]" "$work/shared/requeue/run-1/worker-0.log" \
  || { cat "$work/shared/requeue/run-1/worker-0.log"; fail "the requeued job did not resume from a checkpoint"; }
pass "a requeued job resumes from its checkpoints ($(grep -o 'joined the job at step [0-9]*' "$work/shared/requeue/run-1/worker-0.log")) and ends 0:0"

# The scaling harness's Slurm launcher: one batch job per N, the table from
# the workers' summaries.
SHARDPS_BIN=$runfiles "$runfiles/bench/scaling" --launcher=slurm --workers=1,2 --modes=sync --steps=5 \
  --compute_ms=20 --out="$work/shared/scaling" -- --overcommit > "$work/scaling.out" 2>&1 \
  || { cat "$work/scaling.out"; fail "bench/scaling --launcher=slurm"; }
rows=$(awk -F, 'NR > 1 && $5 > 0 && $6 > 0' "$work/shared/scaling/scaling.csv" | wc -l)
[ "$rows" = 2 ] || { cat "$work/scaling.out" "$work/shared/scaling/scaling.csv"; fail "$rows of 2 scaling rows"; }
pass "bench/scaling --launcher=slurm measures N=1 and N=2 as Slurm jobs ($(awk -F, 'NR == 3 {print "efficiency " $6}' "$work/shared/scaling/scaling.csv") at N=2)"

# A Python script as the workers (ps_slurm --script), over mutual TLS: the
# worker's certificate reaches it through SHARDPS_CLIENT_FLAGS.
id=$(submit script --tls=mutual --script="$runfiles/python/examples/fashion_mnist.py" --python=/usr/bin/python3 \
  --model=mlp --epochs=1 --max_steps_per_epoch=60 --log_every=20) || fail "sbatch"
code=$(finish "$id")
[ "$code" = 0:0 ] || { cat "$work/shared/script/slurm-$id.out" "$work/shared/script/run-0/"*.log | tail -40; fail "script job $id ended $code"; }
for r in 0 1; do
  grep -q '"steps": 60' "$work/shared/script/run-0/summary-$r.json" \
    || { cat "$work/shared/script/run-0/worker-$r.log"; fail "script worker $r did not run 60 steps"; }
done
pass "a Python script runs as the 2 workers of a Slurm job over mutual TLS (accuracy $(accuracy "$work/shared/script/run-0/summary-0.json") after 60 steps)"

id=$(submit failing --model=nope) || fail "sbatch"
code=$(finish "$id")
[ "$code" != 0:0 ] || fail "a job whose workers fail ended 0:0"
pass "a job whose workers fail ends $code: exit codes propagate"

stop_all
trap 'rm -rf "$work"' EXIT
for _ in $(seq 1 100); do pgrep -x slurmstepd > /dev/null || break; sleep 0.1; done
pgrep -af "$conf" && fail "Slurm processes left behind"
pgrep -ax slurmstepd && fail "slurmstepd left behind"
ps -eo stat,comm | awk '$1 ~ /^Z/ && $2 ~ /slurm/ {found = 1} END {exit !found}' && fail "Slurm zombies left behind"
pass "the daemons stopped; nothing left behind"
all_passed
