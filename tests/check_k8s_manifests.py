"""check_k8s_manifests.py FILE S N [--secret] [--apart]: checks that the manifests of a
ShardPS job with S servers and N workers (deploy/k8s/render) fit together:
the workers' --servers are the StatefulSet's stable DNS names on the port the
servers listen on, ranks come from the Indexed Job's completion index, server
ids from the pod index, the probes and scrape annotations name the ports the
processes open, (with --secret) the Secret holds every file the flags name, and
(with --apart) no server pod may share a node with a worker or another server:
each pod's required anti-affinity selects those pods by their template labels,
and job.flags sets the workers' first-weights lane (true unless the user said
otherwise).
Without --apart, no pod has an affinity rule and job.flags leaves the lane out.
Prints one line per failed check and exits 1 if any failed."""
import re
import sys

import yaml

path, servers, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with_secret = "--secret" in sys.argv
apart = "--apart" in sys.argv
docs = [d for d in yaml.safe_load_all(open(path)) if d]
by_kind = {d["kind"]: d for d in docs}
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def flag(args, name):
    values = [a.split("=", 1)[1] for a in args if a.startswith("--%s=" % name)]
    return values[-1] if values else None


service, sts, job = by_kind["Service"], by_kind["StatefulSet"], by_kind["Job"]
config, claim = by_kind["ConfigMap"], by_kind["PersistentVolumeClaim"]
server = sts["spec"]["template"]["spec"]["containers"][0]
worker = job["spec"]["template"]["spec"]["containers"][0]
port = int(flag(server["args"], "port"))

check(service["spec"]["clusterIP"] == "None", "the server Service is not headless")
check(sts["spec"]["serviceName"] == service["metadata"]["name"], "StatefulSet serviceName is not the Service")
check(sts["spec"]["replicas"] == servers, "StatefulSet replicas %s != %d" % (sts["spec"]["replicas"], servers))
selector = sts["spec"]["selector"]["matchLabels"]
check(all(sts["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in selector.items()),
      "StatefulSet pods do not match its selector")
check(all(service["spec"]["selector"].get(k) == v for k, v in selector.items()) and
      set(service["spec"]["selector"]) <= set(sts["spec"]["template"]["metadata"]["labels"]),
      "the Service does not select the server pods")
check(service["spec"]["ports"][0]["port"] == port, "Service port != ps_server --port")

expected = ["%s-%d.%s:%d" % (sts["metadata"]["name"], i, service["metadata"]["name"], port) for i in range(servers)]
given = flag(worker["args"], "servers").split(",")
check(given == expected, "workers' --servers %s != the StatefulSet's DNS names %s" % (given, expected))

env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in server.get("env", [])}
id_var = re.fullmatch(r"\$\((\w+)\)", flag(server["args"], "server_id") or "")
check(id_var and env.get(id_var.group(1)) == "metadata.labels['apps.kubernetes.io/pod-index']",
      "--server_id is not the StatefulSet pod index")
worker_env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in worker.get("env", [])}
rank_var = re.fullmatch(r"\$\((\w+)\)", flag(worker["args"], "rank") or "")
check(rank_var and worker_env.get(rank_var.group(1)) ==
      "metadata.annotations['batch.kubernetes.io/job-completion-index']", "--rank is not the completion index")
spec = job["spec"]
check(spec["completionMode"] == "Indexed" and spec["completions"] == workers and spec["parallelism"] == workers,
      "the worker Job is not Indexed with %d completions" % workers)

health = int(flag(server["args"], "health_port"))
for probe in ("readinessProbe", "livenessProbe"):
    check(server[probe]["grpc"]["port"] == health, "%s does not probe --health_port" % probe)
for kind, container in (("server", server), ("worker", worker)):
    annotations = (sts if kind == "server" else job)["spec"]["template"]["metadata"]["annotations"]
    check(annotations["prometheus.io/scrape"] == "true" and
          annotations["prometheus.io/port"] == flag(container["args"], "metrics_port"),
          "%s scrape annotations do not name --metrics_port" % kind)

flags = config["data"]["job.flags"].split("\n")
check("--num_servers=%d" % servers in flags and "--num_workers=%d" % workers in flags,
      "job.flags does not name %d servers and %d workers" % (servers, workers))
mounts = {m["name"]: m["mountPath"] for m in server["volumeMounts"]}
volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
check(volumes["checkpoints"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"] and
      flag(flags, "checkpoint_dir") == mounts["checkpoints"], "checkpoints are not on the PersistentVolumeClaim")
gpus = flag(worker["args"], "device") == "cuda"
check(("nvidia.com/gpu" in worker.get("resources", {}).get("limits", {})) == gpus,
      "--device=cuda and the nvidia.com/gpu request disagree")

def avoided(pod_spec):
    """The pod templates (server, worker) whose pods this pod may not share a node with."""
    terms = pod_spec.get("affinity", {}).get("podAntiAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", [])
    out = set()
    for term in terms:
        if term.get("topologyKey") != "kubernetes.io/hostname":
            continue
        match = term.get("labelSelector", {}).get("matchLabels")
        check(match is not None, "an anti-affinity term selects pods otherwise than by matchLabels")
        for kind, owner in (("server", sts), ("worker", job)):
            labels = owner["spec"]["template"]["metadata"]["labels"]
            if match and all(labels.get(k) == v for k, v in match.items()):
                out.add(kind)
    return out


server_avoids, worker_avoids = avoided(sts["spec"]["template"]["spec"]), avoided(job["spec"]["template"]["spec"])
lane = flag(flags, "first_weights_lane")
if apart:
    check(server_avoids == {"server", "worker"}, "a server pod may share a node with %s"
          % sorted({"server", "worker"} - server_avoids))
    check(worker_avoids == {"server"}, "workers avoid %s, want servers alone" % sorted(worker_avoids))
    check(lane is not None or "--nofirst_weights_lane" in flags,
          "job.flags leaves out --first_weights_lane with the servers apart")
else:
    check(all("affinity" not in t["spec"]["template"]["spec"] for t in (sts, job)),
          "pods have an affinity rule without --server_placement=apart")
    check(lane is None, "job.flags has --first_weights_lane=%s with the servers shared, want none" % lane)

if with_secret:
    secret = by_kind["Secret"]
    tls_dir = mounts["tls"]
    names = set(secret["data"])
    wanted = {"ca.pem", "token"}
    for i in range(servers):
        pod = "%s-%d" % (sts["metadata"]["name"], i)
        for f in ("tls_cert", "tls_key"):
            wanted.add(flag(server["args"], f).replace("$(POD_NAME)", pod)[len(tls_dir) + 1:])
    for f in ("tls_cert", "tls_key"):
        if flag(worker["args"], f):
            wanted.add(flag(worker["args"], f)[len(tls_dir) + 1:])
    check(wanted <= names, "the Secret lacks %s" % sorted(wanted - names))
    check(volumes["tls"]["secret"]["secretName"] == secret["metadata"]["name"], "pods do not mount the Secret")

for f in failures:
    print("FAILED:", f)
sys.exit(1 if failures else 0)
