// The job flag names (common/job_flags.h): which names a flag file may hold
// for other ShardPS programs, and which typo a foreign name is nearest to.
#include "common/job_flags.h"

#include <catch2/catch.hpp>

namespace shardps {
namespace {

TEST_CASE("job flags: every program's own flags are job flags, a typo is not", "[flags]") {
  for (const char* name : {"epochs", "lr", "mode", "servers", "row_lr", "compute_ms", "timeout", "async_lr_scaling",
                           "worker_timeout"}) {
    INFO(name);
    CHECK(IsJobFlag(name));
  }
  for (const char* name : {"epoch", "", "learning_rate", "Mode", "lr ", "row"}) {
    INFO(name);
    CHECK_FALSE(IsJobFlag(name));
  }
}

TEST_CASE("job flags: a near miss names the flag it misses", "[flags]") {
  CHECK(NearestJobFlag("epoch") == "epochs");
  CHECK(NearestJobFlag("stalenes") == "staleness");
  CHECK(NearestJobFlag("partiton_bytes") == "partition_bytes");
  CHECK(NearestJobFlag("momentun") == "momentum");
  CHECK(NearestJobFlag("lrr") == "lr");
}

TEST_CASE("job flags: names far from every job flag, a script's own among them, name none", "[flags]") {
  // python/examples/ctr.py's own flags share the job's file with the servers'.
  for (const char* name : {"data", "test_data", "dim", "hash_size", "hash_embeddings", "prefetch_rows", "max_steps",
                           "dump_dense", "phase_times", "final_eval_after_all", "learning_rate", "mdoe"}) {
    INFO(name);
    CHECK(NearestJobFlag(name).empty());
  }
}

TEST_CASE("job flags: edit distance counts inserts, deletes and substitutions", "[flags]") {
  CHECK(EditDistance("", "") == 0);
  CHECK(EditDistance("epoch", "epochs") == 1);
  CHECK(EditDistance("epochs", "epoch") == 1);
  CHECK(EditDistance("mdoe", "mode") == 2);
  CHECK(EditDistance("kitten", "sitting") == 3);
  CHECK(EditDistance("", "lr") == 2);
}

}  // namespace
}  // namespace shardps
