// The raw framing (common/tensor_frame.h) and the payload block walker
// (server/payload_blocks.h): payloads split into slices at every odd place
// and at misaligned addresses come back bit for bit (by view, pieces, runs
// and FloatsOf); malformed frames are refused with INVALID_ARGUMENT.
#include <catch2/catch.hpp>

#include <cstring>
#include <numeric>

#include "common/tensor_frame.h"
#include "proto/shardps.pb.h"
#include "server/payload_blocks.h"

namespace shardps {
namespace {

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.5f);
  return v;
}

// The bytes of `frame` re-split into slices of `size` bytes (the last may be
// shorter), as a receiver may get them.
grpc::ByteBuffer Resliced(const grpc::ByteBuffer& frame, size_t size) {
  std::vector<grpc::Slice> in;
  REQUIRE(frame.Dump(&in).ok());
  std::string all;
  for (const grpc::Slice& s : in) all.append(reinterpret_cast<const char*>(s.begin()), s.size());
  std::vector<grpc::Slice> out;
  for (size_t at = 0; at < all.size(); at += size) out.emplace_back(all.substr(at, size));
  return grpc::ByteBuffer(out.data(), out.size());
}

wire::PushRequest Header(const std::vector<int64_t>& bytes) {
  wire::PushRequest h;
  h.set_session_id(7);
  h.set_step(3);
  for (size_t i = 0; i < bytes.size(); ++i) {
    wire::Chunk* c = h.add_chunks();
    c->mutable_key()->set_chunk(static_cast<uint32_t>(i));
    c->set_raw_bytes(bytes[i]);
  }
  return h;
}

TEST_CASE("a frame round-trips through any slicing, by copy, view, pieces and runs", "[frame]") {
  const std::vector<float> a = Iota(1001), b = Iota(37);
  const std::vector<absl::string_view> payloads = {
      {reinterpret_cast<const char*>(a.data()), a.size() * 4}, {reinterpret_cast<const char*>(b.data()), b.size() * 4}};
  const grpc::ByteBuffer frame = EncodeFrame(Header({4004, 148}), payloads);
  for (size_t slice : {size_t{1}, size_t{3}, size_t{7}, size_t{64}, size_t{4096}, size_t{1} << 20}) {
    INFO("slices of " << slice << " bytes");
    const grpc::ByteBuffer got = Resliced(frame, slice);
    wire::PushRequest h;
    auto reader = FrameReader::Parse(got, &h);
    REQUIRE(reader.ok());
    CHECK(h.session_id() == 7);
    REQUIRE(h.chunks_size() == 2);
    REQUIRE((*reader)->remaining() == 4004 + 148);
    // First payload through NextPieces and the run walker; second by view.
    const PayloadPieces pieces = (*reader)->NextPieces(4004);
    CHECK(PayloadBytes(pieces) == 4004);
    // The pieces as runs of floats read in place (any alignment, no copies).
    std::vector<float> runs(a.size(), -1);
    int64_t run_covered = 0;
    ForEachFloatRun(pieces, [&](int64_t first, const UnalignedFloat* values, int64_t n) {
      REQUIRE(first == run_covered);
      for (int64_t i = 0; i < n; ++i) runs[first + i] = values[i];
      run_covered += n;
    });
    CHECK(run_covered == static_cast<int64_t>(a.size()));
    CHECK(runs == a);
    const absl::string_view second = (*reader)->Next(148);
    REQUIRE(reinterpret_cast<uintptr_t>(second.data()) % alignof(float) == 0);
    CHECK(std::memcmp(second.data(), b.data(), 148) == 0);
    CHECK((*reader)->remaining() == 0);
  }
}

TEST_CASE("FloatsOf reads values whole through any slicing", "[frame]") {
  const std::vector<float> a = Iota(3001), b = Iota(5);
  const std::vector<absl::string_view> payloads = {
      {reinterpret_cast<const char*>(a.data()), a.size() * 4}, {reinterpret_cast<const char*>(b.data()), b.size() * 4}};
  const grpc::ByteBuffer frame = EncodeFrame(Header({12004, 20}), payloads);
  for (size_t slice : {size_t{1}, size_t{3}, size_t{6}, size_t{4097}, size_t{1} << 20}) {
    INFO("slices of " << slice << " bytes");
    const grpc::ByteBuffer got = Resliced(frame, slice);
    wire::PushRequest h;
    auto reader = FrameReader::Parse(got, &h);
    REQUIRE(reader.ok());
    const std::vector<float> first = FloatsOf((*reader)->NextPieces(a.size() * 4));
    CHECK(first.size() == a.size());
    CHECK(first == a);
    CHECK(FloatsOf((*reader)->NextPieces(b.size() * 4)) == b);
    CHECK((*reader)->remaining() == 0);
  }
}

TEST_CASE("a frame that shares its payloads holds them until gRPC lets go", "[frame]") {
  wire::PullResponse h;
  h.add_chunks()->set_raw_bytes(8);
  auto weights = std::make_shared<const std::vector<float>>(std::vector<float>{1.5f, -2.0f});
  {
    const grpc::ByteBuffer frame = EncodeFrame(h, std::vector<SharedPayload>{ShareFloats(weights)});
    CHECK(weights.use_count() == 2);  // the slice holds one reference, no copy
    wire::PullResponse got;
    auto reader = FrameReader::Parse(Resliced(frame, 5), &got);
    REQUIRE(reader.ok());
    float out[2];
    (*reader)->CopyNext(8, reinterpret_cast<char*>(out));
    CHECK(out[0] == 1.5f);
    CHECK(out[1] == -2.0f);
  }
  CHECK(weights.use_count() == 1);  // released with the last slice
}

TEST_CASE("malformed frames are refused with INVALID_ARGUMENT", "[frame]") {
  wire::PushRequest h;
  auto parse = [&](const std::string& bytes) {
    grpc::Slice s(bytes);
    return FrameReader::Parse(grpc::ByteBuffer(&s, 1), &h).status();
  };
  auto expect = [](const absl::Status& s, const std::string& text) {
    INFO(s.message());
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains(text));
  };
  expect(parse("ab"), "no header length");
  expect(parse(std::string("\x10\x00\x00\x00", 4) + "short"), "only 5 follow");
  expect(parse(std::string("\x04\x00\x00\x00", 4) + "\xff\xff\xff\xff"), "does not parse");
}

}  // namespace
}  // namespace shardps
