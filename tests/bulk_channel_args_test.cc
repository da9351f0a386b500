// common/bulk_channel_args: the channel arguments both ends use, with and
// without gRPC's bandwidth-delay probe.
#include <catch2/catch.hpp>

#include <grpc/grpc.h>

#include <algorithm>

#include "common/bulk_channel_args.h"

namespace shardps {
namespace {

const std::pair<std::string, int>* Find(const std::vector<std::pair<std::string, int>>& args, const char* name) {
  auto it = std::find_if(args.begin(), args.end(), [&](const auto& a) { return a.first == name; });
  return it == args.end() ? nullptr : &*it;
}

TEST_CASE("the probe is gRPC's default unless turned off; the bulk settings stay either way") {
  const auto with = BulkChannelArgs();
  const auto without = BulkChannelArgs(/*bdp_probe=*/false);
  CHECK(Find(with, GRPC_ARG_HTTP2_BDP_PROBE) == nullptr);
  REQUIRE(Find(without, GRPC_ARG_HTTP2_BDP_PROBE) != nullptr);
  CHECK(Find(without, GRPC_ARG_HTTP2_BDP_PROBE)->second == 0);
  for (const auto& arg : with) {
    INFO(arg.first);
    REQUIRE(Find(without, arg.first.c_str()) != nullptr);
    CHECK(Find(without, arg.first.c_str())->second == arg.second);
  }
  CHECK(without.size() == with.size() + 1);
}

}  // namespace
}  // namespace shardps
