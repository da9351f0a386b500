"""A worker's place in a job, from the environment a launcher sets
(deploy/ps_launch --script, the Slurm and Kubernetes launchers), as torchrun
does for PyTorch's own:

  SHARDPS_SERVERS      host:port of every server, in server-id order
  SHARDPS_RANK         this worker's rank
  SHARDPS_NUM_WORKERS  workers in the job
  SHARDPS_FLAGFILE     the job's flag file (mode, staleness, partition,
                       TLS, token, ... and every process's other flags)
  SHARDPS_SUMMARY_JSON where the worker may write its summary (optional)
  SHARDPS_CLIENT_FLAGS this worker's own client flags, e.g. its TLS
                       certificate and key for mutual TLS, as shell words
                       (a path with spaces quoted; optional)
"""
import os
import shlex

from shardps.client import Client
from shardps._lib import ShardpsError


class Job:
    """Where a worker stands in its job: servers, rank, world size and the
    job's flags. `connect(layout)` makes the worker's Client."""

    def __init__(self, servers, rank, num_workers, flagfile=None, summary_json=None, client_flags=""):
        self.servers, self.rank, self.num_workers = servers, int(rank), int(num_workers)
        self.flagfile, self.summary_json, self.client_flags = flagfile, summary_json, client_flags
        self.flags = _read_flags(flagfile) if flagfile else {}

    def flag(self, name, kind=str, default=None):
        """A flag of the job's flag file (the last one given wins), as `kind`."""
        if name not in self.flags:
            return default
        value = self.flags[name]
        if kind is bool:
            return value in ("true", "1", "")
        return kind(value)

    def config(self):
        """The client options: the flag file first, then this worker's own."""
        words = ["--flagfile=%s" % self.flagfile] if self.flagfile else []
        words += ["--servers=%s" % self.servers, "--rank=%d" % self.rank, "--num_workers=%d" % self.num_workers]
        return " ".join(_quoted(w) for w in words + shlex.split(self.client_flags))

    def connect(self, layout, tables=()):
        return Client(self.config(), layout, tables)


def _quoted(word):
    """A word of the client's options (client/client_config.h): spaces kept in double quotes."""
    if '"' in word:
        raise ShardpsError("client option %s holds a double quote, which the client's options cannot carry" % word)
    return '"%s"' % word if any(c.isspace() for c in word) else word


def _read_flags(path):
    """A flag file as absl reads one: a flag a line, leading spaces dropped, the rest kept."""
    flags = {}
    try:
        with open(path) as f:
            for line in f:
                word = line.rstrip("\n").lstrip()
                if word.startswith("-"):  # --name=value or -name=value
                    name, _, value = word[2 if word.startswith("--") else 1:].partition("=")
                    flags[name] = value
    except OSError as e:
        raise ShardpsError("cannot read the job's flag file %s: %s" % (path, e.strerror))
    return flags


def init_from_env():
    """The Job a launcher put this process in; ShardpsError naming what is missing."""
    env = os.environ
    missing = [k for k in ("SHARDPS_SERVERS", "SHARDPS_RANK", "SHARDPS_NUM_WORKERS") if not env.get(k)]
    if missing:
        raise ShardpsError("not launched as a ShardPS worker: %s not set (use deploy/ps_launch --script=...)"
                           % ", ".join(missing))
    return Job(env["SHARDPS_SERVERS"], env["SHARDPS_RANK"], env["SHARDPS_NUM_WORKERS"],
               env.get("SHARDPS_FLAGFILE") or None, env.get("SHARDPS_SUMMARY_JSON") or None,
               env.get("SHARDPS_CLIENT_FLAGS", ""))
