# The body of a ShardPS batch job (deploy/slurm/ps_slurm writes the variables
# above it): servers as restartable job steps, the workers as one step, then
# the servers stopped. Exits with the workers' code.
set -uo pipefail
start=${SLURM_RESTART_COUNT:-0}
run=$job_dir/run-$start
mkdir -p "$run" "$job_dir/servers"
rm -f "$job_dir/servers/"* "$run/stopping"
echo "shardps: job $SLURM_JOB_ID, start $start, on $SLURM_JOB_NODELIST; logs in $run"

# --tls: a CA, a certificate per node and a token for this start; servers are
# named by their Slurm node names, which the certificates name.
server_tls="" worker_tls="" server_host='$(hostname)'
if [ "$tls" != none ]; then
  certs=$job_dir/certs
  if ! "$make_certs" --out="$certs" --hosts="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | paste -sd, -)" \
       > "$run/make_certs.log" 2>&1; then
    cat "$run/make_certs.log"; echo "shardps: make_certs failed"; exit 1
  fi
  worker_tls="--tls_ca=$certs/ca.pem --auth_token_file=$certs/token"
  server_tls="$worker_tls --tls_cert=$certs/\$SLURMD_NODENAME.pem --tls_key=$certs/\$SLURMD_NODENAME.key"
  if [ "$tls" = mutual ]; then
    server_tls+=" --tls_mutual"
    worker_tls+=" --tls_mutual --tls_cert=$certs/worker.pem --tls_key=$certs/worker.key"
  fi
  server_host='$SLURMD_NODENAME'
  echo "shardps: $tls with a job token (certificates in $certs)"
fi

# Server $1 as a job step, on port port_base + $1, started again when it ends
# abnormally (killed, its step cancelled), up to $restarts times. With
# --replicas=2 in the job flags a restarted server joins the running job
# (ps_server --join: its keys are copied from the servers that kept them)
# on the node it ran on, so that its address stays the one workers know.
serve() {
  local id=$1 port=$((port_base + $1)) again=0 code join="" node=()
  while :; do
    srun --ntasks=1 --nodes=1 "${node[@]}" --overlap --kill-on-bad-exit=0 --job-name="server-$id" \
      bash -c "echo $server_host:$port > $job_dir/servers/$id.new && mv $job_dir/servers/$id.new $job_dir/servers/$id &&
               echo \$SLURMD_NODENAME > $job_dir/servers/node-$id &&
               exec $server_bin --flagfile=$job_dir/job.flags --server_id=$id --port=$port $server_tls $join" \
      >> "$run/server-$id.log" 2>&1
    code=$?
    if [ "$code" = 0 ] || [ -e "$run/stopping" ]; then return 0; fi
    again=$((again + 1))
    if [ "$again" -gt "$restarts" ]; then
      echo "shardps: server $id ended with code $code, restarted $restarts times already: giving up"
      return "$code"
    fi
    echo "shardps: server $id ended with code $code; starting it again ($again of $restarts)"
    if grep -qE -- '^--replicas=([2-9]|[1-9][0-9])$' "$job_dir/job.flags"; then
      join="--join=$(for ((i = 0; i < servers; i++)); do cat "$job_dir/servers/$i"; done | paste -sd, -)"
      node=(--nodelist="$(cat "$job_dir/servers/node-$id")")
      echo "shardps: server $id joins the running job (--replicas): its keys are copied from the other servers"
    fi
  done
}

server_pids=()
for ((id = 0; id < servers; id++)); do
  serve "$id" &
  server_pids+=($!)
done
for ((waited = 0; $(ls "$job_dir/servers" | grep -c '^[0-9]*$') < servers; waited++)); do
  [ "$waited" -lt 600 ] || { echo "shardps: servers did not start in 60 s"; touch "$run/stopping"; exit 1; }
  sleep 0.1
done
addresses=$(for ((id = 0; id < servers; id++)); do cat "$job_dir/servers/$id"; done | paste -sd, -)
echo "shardps: servers at $addresses"

gpu_args=()
[ "$gpus" -gt 0 ] && gpu_args=(--gpus-per-task="$gpus")
if [ -n "${script:-}" ]; then  # a Python worker script: the job in its environment (python/shardps/env.py)
  worker_cmd="SHARDPS_SERVERS=$addresses SHARDPS_RANK=\$SLURM_PROCID SHARDPS_NUM_WORKERS=$workers \
    SHARDPS_FLAGFILE=$job_dir/job.flags SHARDPS_SUMMARY_JSON=$run/summary-\$SLURM_PROCID.json \
    SHARDPS_CLIENT_FLAGS='$worker_tls' SHARDPS_LIB=$shardps_lib PYTHONPATH=$python_dir PYTHONUNBUFFERED=1 \
    exec $python $script"
else
  worker_cmd="exec $worker_bin --flagfile=$job_dir/job.flags --servers=$addresses --rank=\$SLURM_PROCID $worker_tls \
    --summary_json=$run/summary-\$SLURM_PROCID.json"
fi
srun --ntasks="$workers" --overlap --kill-on-bad-exit=0 --job-name=workers "${gpu_args[@]}" \
  bash -c "$worker_cmd > $run/worker-\$SLURM_PROCID.log 2>&1"
workers_code=$?
echo "shardps: workers ended with code $workers_code; stopping the servers"

# SIGTERM to the server steps: each writes a final checkpoint and exits 0.
touch "$run/stopping"
for step in $(squeue --steps --job="$SLURM_JOB_ID" --noheader --format="%i %j" | awk '$2 ~ /^server-/ {print $1}'); do
  scancel --signal=TERM "$step"
done
servers_code=0
for pid in "${server_pids[@]}"; do wait "$pid" || servers_code=1; done
[ "$workers_code" = 0 ] || exit "$workers_code"
exit "$servers_code"
