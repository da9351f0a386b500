"""ShardPS for Python: any model's training loop as a worker of a ShardPS job.

  import shardps
  job = shardps.init_from_env()              # servers, rank, flags from the launcher
  client = job.connect([("w", (784, 10)), ("b", (10,))])
  step = client.register()

shardps.torch turns a PyTorch nn.Module's loop into a worker. Plain Python
over libshardps.so (ctypes): no compiler needed, any Python 3.
"""
from shardps._lib import RejoinError, ShardpsError
from shardps.client import Call, Client, Table
from shardps.env import Job, init_from_env

__all__ = ["Call", "Client", "Table", "Job", "RejoinError", "ShardpsError", "init_from_env"]
__version__ = "1.0"
