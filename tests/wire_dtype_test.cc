// bfloat16 wire compression: the conversions, the frame reader's widening
// across slice boundaries, and a real server applying bfloat16 pushes and
// answering bfloat16 pulls.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/tensor_frame.h"
#include "common/wire_dtype.h"
#include "tests/test_cluster.h"

namespace shardps::testing {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint16_t Narrow(float f) {
  uint16_t h;
  ToBfloat16(&f, 1, &h);
  return h;
}

TEST_CASE("float32 to bfloat16 rounds to nearest, ties to even, and keeps NaN and Inf", "[wire_dtype]") {
  CHECK(Narrow(1.0f) == 0x3f80);
  CHECK(Narrow(-2.0f) == 0xc000);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even one (1).
  CHECK(Narrow(FromBits(0x3f808000)) == 0x3f80);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  CHECK(Narrow(FromBits(0x3f818000)) == 0x3f82);
  CHECK(Narrow(FromBits(0x3f808001)) == 0x3f81);  // just above halfway rounds up
  CHECK(Narrow(INFINITY) == 0x7f80);
  CHECK(Narrow(-INFINITY) == 0xff80);
  CHECK(Bfloat16NonFinite(Narrow(std::nanf(""))));
  CHECK((Narrow(std::nanf("")) & 0x007f) != 0);  // still a NaN, not an infinity
  // A NaN whose payload lies only in the low bits must not become Inf.
  CHECK((Narrow(FromBits(0x7f800001)) & 0x007f) != 0);
  // Above the largest bfloat16 a finite float rounds to Inf, as IEEE says.
  CHECK(Narrow(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(Narrow(1e-39f) == 0x000b);  // denormals keep their top bits
}

TEST_CASE("bfloat16 widens exactly, from any alignment", "[wire_dtype]") {
  std::vector<float> in(1001), out(1001);
  for (size_t i = 0; i < in.size(); ++i) in[i] = std::sin(0.37f * i) * std::pow(10.0f, static_cast<float>(i % 9) - 4);
  std::vector<char> bytes(1 + 2 * in.size());
  std::vector<uint16_t> narrow(in.size());
  ToBfloat16(in.data(), static_cast<int64_t>(in.size()), narrow.data());
  std::memcpy(bytes.data() + 1, narrow.data(), 2 * narrow.size());  // odd address
  FromBfloat16(bytes.data() + 1, static_cast<int64_t>(in.size()), out.data());
  for (size_t i = 0; i < in.size(); ++i) {
    REQUIRE(Bits(out[i]) == static_cast<uint32_t>(narrow[i]) << 16);
    // 8 significant bits: within half a unit in the last place (2^-8 relative).
    REQUIRE(std::fabs(out[i] - in[i]) <= std::fabs(in[i]) * (1.0f / 256));
  }
}

TEST_CASE("the frame reader widens bfloat16 payloads split anywhere between slices", "[wire_dtype][frame]") {
  std::vector<uint16_t> values(333);
  for (size_t i = 0; i < values.size(); ++i) values[i] = Narrow(static_cast<float>(i) - 100.5f);
  wire::PullResponse h;
  h.add_chunks()->set_raw_bytes(2 * values.size());
  const grpc::ByteBuffer frame =
      EncodeFrame(h, {absl::string_view(reinterpret_cast<const char*>(values.data()), 2 * values.size())});
  for (size_t slice : {size_t{1}, size_t{3}, size_t{5}, size_t{64}, size_t{1} << 20}) {
    INFO("slices of " << slice << " bytes");
    std::vector<grpc::Slice> pieces;
    REQUIRE(frame.Dump(&pieces).ok());
    std::string all;
    for (const grpc::Slice& s : pieces) all.append(reinterpret_cast<const char*>(s.begin()), s.size());
    std::vector<grpc::Slice> resliced;
    for (size_t at = 0; at < all.size(); at += slice) resliced.emplace_back(all.substr(at, slice));
    const grpc::ByteBuffer got(resliced.data(), resliced.size());
    wire::PullResponse header;
    auto reader = FrameReader::Parse(got, &header);
    REQUIRE(reader.ok());
    std::vector<float> out(values.size());
    (*reader)->WidenNextBfloat16(static_cast<int64_t>(values.size()), out.data());
    CHECK((*reader)->remaining() == 0);
    for (size_t i = 0; i < values.size(); ++i) REQUIRE(Bits(out[i]) == static_cast<uint32_t>(values[i]) << 16);
  }
}

TEST_CASE("a server applies bfloat16 pushes as their float32 values and answers bfloat16 pulls", "[wire_dtype][async]") {
  ServerOptions o = SyncOptions(1, 2);
  o.job.mode = Mode::kAsync;
  o.async_lr_scaling = AsyncLrScaling::kNone;  // every push a whole step
  TestCluster cluster(o);
  ClientOptions narrow_options = cluster.ClientFor(0);
  narrow_options.wire_dtype = wire::DTYPE_BFLOAT16;
  auto narrow = PsClient::Connect(narrow_options);
  REQUIRE(narrow.ok());
  REQUIRE((*narrow)->Register().ok());
  auto exact = cluster.Worker(1);
  // Initial weights 1/3 (not a bfloat16 value); lr is 1 in these options.
  REQUIRE(exact->Init(Filled(1.0f / 3)).ok());

  // A bfloat16 push of 0.1 applies the bfloat16 value 0.1 rounds to.
  const auto grads = Filled(0.1f);
  REQUIRE((*narrow)->Push(0, {{0, grads[0].data()}, {1, grads[1].data()}}).ok());
  const float expected = 1.0f / 3 - FromBits(static_cast<uint32_t>(Narrow(0.1f)) << 16);
  auto w = Filled(0);
  REQUIRE(PullAll(*exact, 1, w).ok());  // float32 pull: the server's exact float32 weights
  for (const auto& t : w) {
    for (float v : t) REQUIRE(v == expected);
  }
  // A bfloat16 pull answers the same weights rounded to bfloat16.
  auto rounded = Filled(0);
  REQUIRE(PullAll(**narrow, 1, rounded).ok());
  const float expected_rounded = FromBits(static_cast<uint32_t>(Narrow(expected)) << 16);
  REQUIRE(expected_rounded != expected);  // the test tells the two apart
  for (const auto& t : rounded) {
    for (float v : t) REQUIRE(v == expected_rounded);
  }
  // Half the bytes: 2 per value of the 15 + 5 pushed; the pulls count what
  // went on the wire, 4 bytes per value for the float32 one, 2 for the other.
  const ServerStats stats = cluster.core(0)->Stats();
  CHECK(stats.bytes_pushed == 2 * (15 + 5));
  CHECK(stats.bytes_pulled == (4 + 2) * (15 + 5));
}

}  // namespace
}  // namespace shardps::testing
