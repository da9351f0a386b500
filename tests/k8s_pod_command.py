"""k8s_pod_command.py FILE KIND [NAME=VALUE ...]: what Kubernetes would run in
the first container of the pods of KIND (StatefulSet or Job) in the manifests
FILE: its command and args, one per line, with $(NAME) expanded as the
kubelet does from the container's env. Each env var taken from a fieldRef is
given as NAME=VALUE (what the downward API would supply); one left out is an
error. `k8s_pod_command.py FILE flags` prints the ConfigMap's job.flags."""
import re
import sys

import yaml

path, kind, given = sys.argv[1], sys.argv[2], dict(a.split("=", 1) for a in sys.argv[3:])
docs = [d for d in yaml.safe_load_all(open(path)) if d]
if kind == "flags":
    sys.stdout.write(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["job.flags"])
    sys.exit(0)
container = next(d for d in docs if d["kind"] == kind)["spec"]["template"]["spec"]["containers"][0]
env = {}
for var in container.get("env", []):
    if "value" in var:
        env[var["name"]] = var["value"]
    elif var["name"] in given:
        env[var["name"]] = given[var["name"]]
    else:
        sys.exit("no value given for %s (%s)" % (var["name"], var["valueFrom"]))


def expand(arg):
    return re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)] if m.group(1) in env else m.group(0), arg)


for arg in container.get("command", []) + container.get("args", []):
    print(expand(arg))
