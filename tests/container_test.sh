#!/usr/bin/env bash
# The container image (deploy/container/build_image) built offline and run
# with podman: debootstrap from apt's mirror, the bundle from this build, then
# the pods of deploy/k8s/render's manifests for 2 servers and 2 workers as
# containers on podman's bridge network: the servers serve TLS with a job
# token, the workers train on the image's Fashion-MNIST, a worker without the
# token is refused, and the servers stop on SIGTERM with their final
# checkpoints on a shared volume. Images and containers live in a private
# podman store under the test's temp dir, removed at the end. Prints a
# Catch2-style summary line.
set -uo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/shardps
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/container.XXXXXX")
source "$runfiles/tests/checks.sh"
[ "$(id -u)" = 0 ] || fail "needs root (debootstrap, podman's root store)"
for tool in podman debootstrap runc; do command -v $tool > /dev/null || fail "$tool is missing: run tools/setup"; done

export CONTAINERS_CONF=$runfiles/deploy/container/containers.conf
export CONTAINERS_STORAGE_CONF=$work/storage.conf
cat > "$CONTAINERS_STORAGE_CONF" <<CONF
[storage]
driver = "overlay"
graphroot = "$work/store"
runroot = "$work/run"
CONF
image=shardps-test:bookworm
cleanup() {
  podman rm -f -a > /dev/null 2>&1
  podman rmi -f -a > /dev/null 2>&1
  umount "$work/store/overlay" 2> /dev/null  # podman's private mount of its store
  rm -rf "$work"
}
trap cleanup EXIT

"$runfiles/deploy/bundle_files" "$work/bundle" bundle "$runfiles/server/ps_server" "$runfiles/worker/ps_worker" \
  > /dev/null || fail "bundle_files"
start=$SECONDS
TMPDIR=$work "$runfiles/deploy/container/build_image" --name=$image --bundle="$work/bundle" > "$work/build.log" 2>&1 ||
  { cat "$work/build.log"; fail "build_image"; }
cat "$work/build.log"
echo "built in $((SECONDS - start)) s"
podman run --rm $image sh -c 'test -x /opt/shardps/bin/ps_server && test -x /opt/shardps/bin/ps_worker &&
  ls /usr/share/datasets/fashion-mnist | grep -c gz && . /etc/os-release && echo "$VERSION_CODENAME" &&
  ls /var/lib/apt/lists | wc -l' > "$work/contents" 2>&1 || { cat "$work/contents"; fail "the image does not run"; }
[ "$(cat "$work/contents" | tr '\n' ' ')" = "4 bookworm 0 " ] || { cat "$work/contents"; fail "image contents"; }
pass "a bookworm image with the bundle at /opt/shardps, Fashion-MNIST, no apt lists"

# The pods of deploy/k8s/render's manifests for S=2, N=2, as podman
# containers, each in a network namespace of its own on podman's bridge: the
# StatefulSet's and the Indexed Job's commands and args (downward-API values
# filled in as Kubernetes would: pod index, pod name, completion index), the
# ConfigMap at /etc/shardps/job.flags, the Secret's files at /etc/shardps/tls,
# the claim at /checkpoints, and the headless Service's DNS names mapped to
# the server containers' addresses.
python=${SHARDPS_PY_VENV:-/opt/shardps-tools/venv}/bin/python
render=$runfiles/deploy/k8s/render
pod_command() { "$python" "$runfiles/tests/k8s_pod_command.py" "$work/job.yaml" "$@"; }
"$runfiles/deploy/make_certs" --out="$work/certs" --hosts="$("$render" --servers=2 --print_hosts)" > /dev/null ||
  fail "make_certs"
"$render" --servers=2 --workers=2 --gpus_per_worker=0 --image=$image --epochs=1 --max_steps_per_epoch=60 \
  --log_every=0 > "$work/job.yaml" || fail "render"
pod_command flags > "$work/job.flags" || fail "job.flags"
mkdir -p "$work/checkpoints"
tls=(-v "$work/certs:/etc/shardps/tls:ro")
hosts=()
for s in 0 1; do
  mapfile -t argv < <(pod_command StatefulSet SERVER_ID=$s POD_NAME=shardps-server-$s)
  [ "${#argv[@]}" -gt 3 ] || fail "no server command in the manifests"
  podman run -d --name shardps-server-$s --hostname shardps-server-$s "${tls[@]}" \
    -v "$work/job.flags:/etc/shardps/job.flags:ro" -v "$work/checkpoints:/checkpoints" $image "${argv[@]}" \
    > /dev/null || fail "server container $s does not start"
done
for s in 0 1; do
  # podman collects stdout and stderr apart: wait for the port line and the log line both.
  listening=""
  for _ in $(seq 100); do
    podman logs shardps-server-$s > "$work/server-$s.log" 2>&1
    grep -q "^LISTENING port=7000 metrics_port=9100 health_port=7100" "$work/server-$s.log" &&
      grep -q "server $s serving sync mode .*; TLS, job token required" "$work/server-$s.log" && listening=1 && break
    sleep 0.1
  done
  [ -n "$listening" ] || { cat "$work/server-$s.log"; fail "server container $s does not serve TLS with the token on 7000 as server $s"; }
  hosts+=(--add-host="shardps-server-$s.shardps-server:$(podman inspect -f '{{.NetworkSettings.IPAddress}}' shardps-server-$s)")
done
pass "the StatefulSet's two server pods run from the image (ids from the pod index, own certificates, TLS, token)"

worker() {  # worker RANK FLAGS_FILE [extra flags...]: runs rank RANK's pod in the foreground
  local rank=$1 flags=$2
  shift 2
  mapfile -t argv < <(pod_command Job RANK="$rank")
  podman run --rm --name shardps-worker-$rank "${hosts[@]}" "${tls[@]}" -v "$flags:/etc/shardps/job.flags:ro" \
    $image "${argv[@]}" "$@"
}
grep -v auth_token_file "$work/job.flags" > "$work/no-token.flags"
worker 0 "$work/no-token.flags" --server_timeout=3s > "$work/refused.log" 2>&1 && fail "a worker without the token was served"
grep -q "job token" "$work/refused.log" || { cat "$work/refused.log"; fail "no clear refusal"; }
pass "a worker pod without the job token is refused"
worker 0 "$work/job.flags" > "$work/worker-0.log" 2>&1 &
rank0=$!
worker 1 "$work/job.flags" > "$work/worker-1.log" 2>&1 || { cat "$work/worker-1.log"; fail "worker pod 1 failed"; }
wait $rank0 || { cat "$work/worker-0.log"; fail "worker pod 0 failed"; }
accuracy=$(sed -n 's/.*final test accuracy \([0-9.]*\).*/\1/p' "$work/worker-0.log")
echo "worker 0: $(tail -1 "$work/worker-0.log")"
awk -v a="$accuracy" 'BEGIN { exit !(a > 0.5) }' || fail "test accuracy '$accuracy' after 60 steps is not above 0.5"
grep -q "done: 60 steps" "$work/worker-1.log" || { cat "$work/worker-1.log"; fail "worker 1 did not train 60 steps"; }
pass "the Indexed Job's two worker pods train on the image's Fashion-MNIST over TLS (test accuracy $accuracy)"

for s in 0 1; do
  podman stop -t 30 shardps-server-$s > /dev/null || fail "podman stop"
  code=$(podman inspect --format '{{.State.ExitCode}}' shardps-server-$s)
  [ "$code" = 0 ] || { podman logs shardps-server-$s | tail; fail "server $s exited $code on SIGTERM"; }
  ls "$work/checkpoints" | grep -q "^shard-$s-of-2-step-60" || { ls -R "$work/checkpoints"; fail "no step-60 shard $s"; }
done
pass "SIGTERM stops both server pods with code 0, their step-60 shards on the shared volume"
all_passed
