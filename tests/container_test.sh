#!/usr/bin/env bash
# The container image (deploy/container/build_image) built offline and run
# with podman: debootstrap from apt's mirror, the bundle from this build, then
# the pods of deploy/k8s/render's manifests as containers: a ps_server (TLS and
# a job token, checkpoints on a host volume) and a ps_worker training on the
# image's Fashion-MNIST; a worker without the token is refused; the server
# stops on SIGTERM with a final checkpoint. Images and containers live in a private podman store under the
# test's temp dir, removed at the end. Prints a Catch2-style summary line.
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

# The pods of deploy/k8s/render's manifests, as podman containers: the
# StatefulSet's and the Indexed Job's commands and args (downward-API values
# filled in as Kubernetes would), the ConfigMap at /etc/shardps/job.flags, the
# Secret's files at /etc/shardps/tls, the claim at /checkpoints, and the
# server's DNS name mapped to this host.
python=${SHARDPS_PY_VENV:-/opt/shardps-tools/venv}/bin/python
render=$runfiles/deploy/k8s/render
port=$((20000 + RANDOM % 20000))
"$runfiles/deploy/make_certs" --out="$work/certs" --hosts="$("$render" --print_hosts)" > /dev/null || fail "make_certs"
"$render" --servers=1 --workers=1 --gpus_per_worker=0 --image=$image --port=$port --health_port=$((port + 1)) \
  --metrics_port=$((port + 2)) --epochs=1 --max_steps_per_epoch=60 --log_every=0 > "$work/job.yaml" || fail "render"
"$python" "$runfiles/tests/k8s_pod_command.py" "$work/job.yaml" flags > "$work/job.flags" || fail "job.flags"
mapfile -t server_argv < <("$python" "$runfiles/tests/k8s_pod_command.py" "$work/job.yaml" StatefulSet \
  SERVER_ID=0 POD_NAME=shardps-server-0)
mapfile -t worker_argv < <("$python" "$runfiles/tests/k8s_pod_command.py" "$work/job.yaml" Job RANK=0)
[ "${#server_argv[@]}" -gt 3 ] && [ "${#worker_argv[@]}" -gt 3 ] || fail "no pod commands in the manifests"
mkdir -p "$work/checkpoints"
mounts=(-v "$work/job.flags:/etc/shardps/job.flags:ro" -v "$work/certs:/etc/shardps/tls:ro")
podman run -d --name shardps-server --network=host "${mounts[@]}" -v "$work/checkpoints:/checkpoints" $image \
  "${server_argv[@]}" > /dev/null || fail "the server container does not start"
listening=""
for _ in $(seq 100); do
  podman logs shardps-server 2>/dev/null | grep -q "^LISTENING port=$port " && listening=1 && break
  sleep 0.1
done
[ -n "$listening" ] || { podman logs shardps-server; fail "the server container is not listening on $port"; }
pass "the StatefulSet's server command runs in the image (port $port, TLS, job token)"

worker=(podman run --rm --network=host --add-host=shardps-server-0.shardps-server:127.0.0.1 -v "$work/certs:/etc/shardps/tls:ro")
# Pods have a network of their own; on the host's, the worker's metrics port moves off the server's.
worker_argv+=(--metrics_port=$((port + 3)))
grep -v auth_token_file "$work/job.flags" > "$work/no-token.flags"
"${worker[@]}" -v "$work/no-token.flags:/etc/shardps/job.flags:ro" $image "${worker_argv[@]}" --server_timeout=3s \
  > "$work/refused.log" 2>&1 &&
  fail "a worker without the token was served"
grep -q "job token" "$work/refused.log" || { cat "$work/refused.log"; fail "no clear refusal"; }
pass "a worker container without the job token is refused"
"${worker[@]}" -v "$work/job.flags:/etc/shardps/job.flags:ro" $image "${worker_argv[@]}" > "$work/worker.log" 2>&1 || { cat "$work/worker.log"; fail "the worker container failed"; }
accuracy=$(sed -n 's/.*final test accuracy \([0-9.]*\).*/\1/p' "$work/worker.log")
echo "worker: $(tail -1 "$work/worker.log")"
awk -v a="$accuracy" 'BEGIN { exit !(a > 0.5) }' || fail "test accuracy '$accuracy' after 60 steps is not above 0.5"
pass "the Indexed Job's worker command trains on the image's Fashion-MNIST over TLS (test accuracy $accuracy)"

podman stop -t 30 shardps-server > /dev/null || fail "podman stop"
code=$(podman inspect --format '{{.State.ExitCode}}' shardps-server)
[ "$code" = 0 ] || { podman logs shardps-server | tail; fail "the server exited $code on SIGTERM"; }
ls -R "$work/checkpoints" | grep -q . || fail "no checkpoint on the host volume"
pass "SIGTERM stops the server container with code 0 and its checkpoints on the host volume"
all_passed
