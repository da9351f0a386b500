#!/usr/bin/env bash
# The relocatable bundle runs on a bare machine: a chroot that holds only
# glibc, /bin/sh and the bundle (with CUDA's runtime libraries bundled, and no
# NVIDIA driver) runs a real job: a ps_server and a ps_worker on the CPU,
# 20 steps on synthetic data. Needs root for chroot; says SKIPPED otherwise.
# Prints a Catch2-style summary line for tools/test.
set -uo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/shardps
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/bundle.XXXXXX")
trap 'rm -rf "$work"' EXIT
source "$runfiles/tests/checks.sh"

root=$work/root
bundle=$root/shardps
"$runfiles/deploy/bundle_files" "$bundle" bundle "$runfiles/server/ps_server" "$runfiles/worker/ps_worker" \
  || fail "bundle_files"
cp "$runfiles/deploy/ps_launch" "$runfiles/deploy/listening_port" "$runfiles/deploy/job_recipe" "$bundle/bin/"
"$runfiles/deploy/check_bundle" "$bundle" || fail "check_bundle"
pass "every library the binaries load is in the bundle or glibc's"

if [ "$(id -u)" != 0 ]; then
  echo "SKIPPED (not root): bundle_test: chroot needs root"
  exit 0
fi
# The bare machine: glibc's libraries, the loader and /bin/sh, nothing else.
mkdir -p "$root/lib/x86_64-linux-gnu" "$root/lib64" "$root/bin" "$root/tmp" "$root/dev"
for lib in libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libresolv.so.2; do
  cp -L "/lib/x86_64-linux-gnu/$lib" "$root/lib/x86_64-linux-gnu/"
done
cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
cp -L /bin/sh "$root/bin/sh"
touch "$root/dev/null" && mount --bind /dev/null "$root/dev/null" || fail "bind /dev/null"
trap 'umount "$root/dev/null" 2>/dev/null; rm -rf "$work"' EXIT

chroot "$root" /shardps/bin/ps_server --version > /dev/null || fail "ps_server does not start in the chroot"
chroot "$root" /shardps/bin/ps_worker --version > /dev/null || fail "ps_worker does not start in the chroot"
pass "both binaries start with only glibc beside the bundle"

# A real job inside the chroot, on the CPU (there is no driver in it).
# Only shell builtins are available in there.
cat > "$root/tmp/job.sh" <<'JOB'
/shardps/bin/ps_server --num_servers=1 --num_workers=1 --server_id=0 --port=0 > /tmp/server.out 2> /tmp/server.log &
server=$!
i=0
port=""
while [ $i -lt 100000 ] && [ -z "$port" ]; do
  read -r word address rest < /tmp/server.out 2>/dev/null
  [ "$word" = LISTENING ] && port=${address#port=}
  i=$((i + 1))
done
/shardps/bin/ps_worker --servers=127.0.0.1:$port --num_workers=1 --synthetic=1280 --epochs=1 \
  --max_steps_per_epoch=20 --device=auto --log_every=10 > /tmp/worker.log 2>&1
code=$?
kill -TERM $server
wait $server
echo "worker $code server $?"
JOB
result=$(chroot "$root" /bin/sh /tmp/job.sh) || fail "job script"
grep -q "no usable GPU" "$root/tmp/worker.log" || { cat "$root/tmp/worker.log"; fail "worker did not fall back to the CPU"; }
[ "$result" = "worker 0 server 0" ] || { cat "$root/tmp/worker.log" "$root/tmp/server.log"; fail "job: $result"; }
grep -q "done: 20 steps" "$root/tmp/worker.log" || fail "worker did not train 20 steps"
pass "a server and a worker from the bundle train 20 steps in the chroot"
all_passed
