#!/usr/bin/env bash
# deploy/k8s/render's manifests, validated offline against the Kubernetes 1.30
# schemas (kubernetes-validate --strict, from tools/setup's venv) and checked
# to fit together (tests/check_k8s_manifests.py): for the checked-in example
# (S=2, N=4, which must be what render prints now), for S=3, N=8 with mutual
# TLS and its Secret from deploy/make_certs, and for a CPU job without TLS.
# A job running a Python script as its workers validates too, as does one
# whose servers each take a node of their own (--server_placement=apart).
# A manifest with an unknown field must fail validation, and render refuses
# bad arguments. Prints a Catch2-style summary line for tools/test.
set -uo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/shardps
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/k8s.XXXXXX")
trap 'rm -rf "$work"' EXIT
source "$runfiles/tests/checks.sh"
venv=${SHARDPS_PY_VENV:-/opt/shardps-tools/venv}
[ -x "$venv/bin/kubernetes-validate" ] || fail "no kubernetes-validate in $venv: run tools/setup"
render=$runfiles/deploy/k8s/render
validate() { "$venv/bin/kubernetes-validate" -k 1.30.0 --strict "$@"; }
fits() { "$venv/bin/python" "$runfiles/tests/check_k8s_manifests.py" "$@"; }

example=$runfiles/deploy/k8s/example-s2-n4.yaml
"$render" --servers=2 --workers=4 > "$work/s2-n4.yaml" || fail "render S=2 N=4"
diff -u "$example" "$work/s2-n4.yaml" || fail "deploy/k8s/example-s2-n4.yaml is stale: run deploy/k8s/render --servers=2 --workers=4 --out=deploy/k8s/example-s2-n4.yaml"
pass "the checked-in example is what render prints for S=2, N=4"
validate "$example" > "$work/validate.log" 2>&1 || { cat "$work/validate.log"; fail "the example does not validate"; }
[ "$(grep -c passed "$work/validate.log")" = 5 ] || { cat "$work/validate.log"; fail "not 5 objects validated"; }
fits "$example" 2 4 || fail "the example's parts do not fit"
pass "the example validates against Kubernetes 1.30 and its parts fit"

hosts=$("$render" --servers=3 --print_hosts)
[ "$hosts" = "shardps-server-0.shardps-server,shardps-server-1.shardps-server,shardps-server-2.shardps-server" ] ||
  fail "--print_hosts printed '$hosts'"
"$runfiles/deploy/make_certs" --out="$work/certs" --hosts="$hosts" > /dev/null || fail "make_certs"
"$render" --servers=3 --workers=8 --security=mutual --certs="$work/certs" --namespace=ml --storage_class=shared \
  --mode=async --batch_size=32 > "$work/s3-n8.yaml" || fail "render S=3 N=8 mutual"
validate "$work/s3-n8.yaml" > "$work/validate.log" 2>&1 || { cat "$work/validate.log"; fail "S=3 N=8 does not validate"; }
[ "$(grep -c passed "$work/validate.log")" = 6 ] || { cat "$work/validate.log"; fail "not 6 objects validated"; }
fits "$work/s3-n8.yaml" 3 8 --secret || fail "S=3 N=8 parts do not fit"
grep -q -- "--tls_mutual" "$work/s3-n8.yaml" && grep -q -- "--mode=async" "$work/s3-n8.yaml" ||
  fail "job flags missing from the ConfigMap"
pass "S=3, N=8, mutual TLS with its Secret: validates, and the Secret holds every file the flags name"

"$render" --servers=3 --workers=2 --replicas=2 > "$work/replicated.yaml" || fail "render --replicas=2"
grep -q -- "--join=shardps-server-0.shardps-server:7000,shardps-server-1.shardps-server:7000,shardps-server-2.shardps-server:7000" \
  "$work/replicated.yaml" || { grep -n -- "--join\|args" "$work/replicated.yaml"; fail "no --join for the replicated servers"; }
! grep -q -- "--join" "$example" || fail "an unreplicated job's servers got --join"
validate "$work/replicated.yaml" > "$work/validate-replicated.log" 2>&1 || { cat "$work/validate-replicated.log"; fail "the replicated job does not validate"; }
pass "with --replicas=2 every server pod is given --join with every server's address"

"$render" --servers=1 --workers=2 --security=none --gpus_per_worker=0 > "$work/cpu.yaml" || fail "render CPU"
validate "$work/cpu.yaml" > "$work/validate.log" 2>&1 || { cat "$work/validate.log"; fail "CPU job does not validate"; }
fits "$work/cpu.yaml" 1 2 || fail "CPU job parts do not fit"
! grep -q "nvidia.com/gpu\|shardps-tls" "$work/cpu.yaml" || fail "CPU job without TLS asks for a GPU or a Secret"
pass "a CPU job without TLS validates and asks for neither GPUs nor a Secret"

"$render" --servers=2 --workers=3 --security=mutual --gpus_per_worker=0 --script=/opt/shardps/python/examples/fashion_mnist.py \
  --model=cnn > "$work/script.yaml" || fail "render --script"
validate "$work/script.yaml" > "$work/validate.log" 2>&1 || { cat "$work/validate.log"; fail "a script job does not validate"; }
grep -q -- "- /opt/shardps/python/examples/fashion_mnist.py" "$work/script.yaml" &&
  grep -q "value: shardps-server-0.shardps-server:7000,shardps-server-1.shardps-server:7000" "$work/script.yaml" &&
  grep -q "value: \$(RANK)" "$work/script.yaml" &&
  grep -q 'value: "--tls_cert=/etc/shardps/tls/worker.pem --tls_key=/etc/shardps/tls/worker.key"' "$work/script.yaml" ||
  { sed -n '/kind: Job/,$p' "$work/script.yaml"; fail "the script job's workers lack the script or their SHARDPS_* environment"; }
! grep -q "/opt/shardps/bin/ps_worker" "$work/script.yaml" || fail "a script job still runs ps_worker"
pass "a job whose workers run a Python script (--script) validates and gives each its SHARDPS_* environment"

"$render" --servers=4 --workers=4 --server_placement=apart > "$work/apart.yaml" || fail "render --server_placement=apart"
validate "$work/apart.yaml" > "$work/validate.log" 2>&1 || { cat "$work/validate.log"; fail "the apart job does not validate"; }
[ "$(grep -c passed "$work/validate.log")" = 5 ] || { cat "$work/validate.log"; fail "not 5 objects validated"; }
fits "$work/apart.yaml" 4 4 --apart || fail "--server_placement=apart: the anti-affinity does not keep servers apart"
fits "$example" 2 4 --apart > "$work/fits.log" && fail "the example (shared placement) passed as apart"
grep -q "may share a node" "$work/fits.log" || fail "the check does not say what may share a node: $(cat "$work/fits.log")"
pass "--server_placement=apart validates, and keeps each server off nodes with a worker or another server"

"$render" --servers=2 --workers=2 --server_placement=apart --first_weights_lane=false > "$work/apart_no_lane.yaml" ||
  fail "render --server_placement=apart --first_weights_lane=false"
[ "$(grep -c -- "^ *--first_weights_lane" "$work/apart_no_lane.yaml")" = 1 ] && grep -q -- "^ *--first_weights_lane=false" "$work/apart_no_lane.yaml" ||
  fail "a job flag --first_weights_lane=false did not replace the apart placement's lane: $(grep -- --first_weights_lane "$work/apart_no_lane.yaml")"
fits "$work/apart_no_lane.yaml" 2 2 --apart || fail "the apart job with the lane turned off does not fit"
"$render" --servers=2 --workers=2 --server_placement=apart --nofirst_weights_lane > "$work/apart_nolane.yaml" ||
  fail "render --server_placement=apart --nofirst_weights_lane"
! grep -q -- "^ *--first_weights_lane" "$work/apart_nolane.yaml" ||
  fail "--nofirst_weights_lane did not keep the apart placement's lane out"
grep -q "^ *--first_weights_lane=true" "$work/apart.yaml" || fail "the apart job's flags lack --first_weights_lane=true"
pass "--server_placement=apart asks for the first-weights lane unless a job flag says otherwise"

sed 's/completionMode: Indexed/completionMod: Indexed/' "$example" > "$work/broken.yaml"
validate "$work/broken.yaml" > "$work/validate.log" 2>&1 && fail "an unknown field passed validation"
grep -q "completionMod" "$work/validate.log" || { cat "$work/validate.log"; fail "the error does not name the field"; }
sed 's/replicas: 2/replicas: two/' "$example" > "$work/broken.yaml"
validate "$work/broken.yaml" > /dev/null 2>&1 && fail "a wrongly typed field passed validation"
sed 's/shardps-server-1.shardps-server:7000/shardps-server-1.other:7000/' "$example" > "$work/mismatch.yaml"
fits "$work/mismatch.yaml" 2 4 > "$work/fits.log" && fail "mismatched --servers passed the fit check"
grep -q "DNS names" "$work/fits.log" || fail "the fit check does not say which names differ"
pass "an unknown field, a wrong type and mismatched server names are caught"

expect_refusal() {
  local want=$1; shift
  "$render" "$@" > /dev/null 2> "$work/err" && fail "render $* was accepted"
  grep -q -- "$want" "$work/err" || fail "render $*: '$(cat "$work/err")' does not say '$want'"
}
expect_refusal "at least 1" --servers=0 --workers=2
expect_refusal "whole number" --servers=two
expect_refusal "tls, mutual or none" --security=plain
expect_refusal "set by the manifests" --rank=3
expect_refusal "make_certs" --servers=2 --certs="$work/none"
expect_refusal "shared or apart" --server_placement=far
pass "render refuses bad arguments with a clear error"
all_passed
