// Messages with bytes fields sent from borrowed or shared memory
// (common/proto_bytes.h): protobuf's own parser reads them whole; the
// receiving side routes those fields into memory it names, from buffers
// split at any place; malformed buffers and sinks that refuse give errors.
#include <catch2/catch.hpp>

#include <grpcpp/impl/codegen/proto_utils.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "common/proto_bytes.h"
#include "proto/shardps.pb.h"

namespace shardps {
namespace {

std::string Flat(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  REQUIRE(buffer.Dump(&slices).ok());
  std::string all;
  for (const grpc::Slice& s : slices) all.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return all;
}

// `bytes` split into slices of `size` bytes, as a receiver may get them.
grpc::ByteBuffer Sliced(const std::string& bytes, size_t size) {
  std::vector<grpc::Slice> out;
  for (size_t at = 0; at < bytes.size(); at += size) out.emplace_back(bytes.data() + at, std::min(size, bytes.size() - at));
  return grpc::ByteBuffer(out.data(), out.size());
}

struct Rows {
  std::vector<int64_t> ids{3, -7, 1LL << 40};
  std::vector<float> rows = std::vector<float>(3 * 5);
  Rows() { std::iota(rows.begin(), rows.end(), 0.25f); }
};

grpc::ByteBuffer Encoded(const Rows& r) {
  wire::PushRowsRequest head;
  head.set_session_id(9);
  head.set_step(41);
  head.set_table(2);
  head.set_dtype(wire::DTYPE_FLOAT32);
  auto shared_rows = std::make_shared<std::vector<float>>(r.rows);
  return MessageWithBytes(
      head, {{4, {reinterpret_cast<const char*>(r.ids.data()), r.ids.size() * 8}, nullptr},
             {5, {reinterpret_cast<const char*>(shared_rows->data()), shared_rows->size() * 4}, shared_rows}});
}

TEST_CASE("protobuf's own parser reads a message sent with bytes fields apart") {
  const Rows r;
  wire::PushRowsRequest got;
  REQUIRE(got.ParseFromString(Flat(Encoded(r))));
  CHECK(got.session_id() == 9);
  CHECK(got.step() == 41);
  CHECK(got.table() == 2);
  CHECK(got.ids() == std::string(reinterpret_cast<const char*>(r.ids.data()), r.ids.size() * 8));
  CHECK(got.rows() == std::string(reinterpret_cast<const char*>(r.rows.data()), r.rows.size() * 4));
}

TEST_CASE("bytes fields land in the receiver's memory from slices split anywhere") {
  const Rows r;
  const std::string bytes = Flat(Encoded(r));
  for (size_t size : {1, 3, 7, 64, 4096}) {
    std::vector<int64_t> ids;
    std::vector<float> rows;
    wire::PushRowsRequest head;
    const absl::Status s = ParseWithBytes(Sliced(bytes, size), {4, 5}, [&](int number, size_t n) -> absl::StatusOr<char*> {
      if (number == 4) {
        ids.resize(n / 8);
        return reinterpret_cast<char*>(ids.data());
      }
      rows.resize(n / 4);
      return reinterpret_cast<char*>(rows.data());
    }, &head);
    REQUIRE(s.ok());
    CHECK(ids == r.ids);
    CHECK(rows == r.rows);
    CHECK(head.step() == 41);
    CHECK(head.ids().empty());
    CHECK(head.rows().empty());
  }
}

TEST_CASE("neighbouring pieces of one field arrive as that field's bytes in order") {
  wire::PullRowsResponse head;
  head.set_version(3);
  const std::string a = "abc", b, c = "defgh";
  auto owned = std::make_shared<std::string>("ij");
  wire::PullRowsResponse got;
  REQUIRE(got.ParseFromString(Flat(MessageWithBytes(head, {{1, a, nullptr}, {1, b, nullptr}, {1, c, nullptr},
                                                           {1, *owned, owned}}))));
  CHECK(got.rows() == "abcdefghij");
  CHECK(got.version() == 3);
}

TEST_CASE("an empty bytes field and a message of small fields only") {
  wire::PullRowsResponse head;
  head.set_version(5);
  const grpc::ByteBuffer empty_rows = MessageWithBytes(head, {{1, {}, nullptr}});
  int calls = 0;
  wire::PullRowsResponse got;
  REQUIRE(ParseWithBytes(empty_rows, {1}, [&](int, size_t n) -> absl::StatusOr<char*> {
    ++calls;
    CHECK(n == 0);
    return nullptr;
  }, &got).ok());
  CHECK(calls == 1);
  CHECK(got.version() == 5);
}

TEST_CASE("a cut buffer, a bad tag and a refusing sink are errors") {
  const Rows r;
  const std::string bytes = Flat(Encoded(r));
  std::vector<char> room(bytes.size());
  const BytesSink any = [&](int, size_t) -> absl::StatusOr<char*> { return room.data(); };
  wire::PushRowsRequest head;
  SECTION("cut short inside the rows") {
    const absl::Status s = ParseWithBytes(Sliced(bytes.substr(0, bytes.size() - 5), 16), {4, 5}, any, &head);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("field 5 is cut short"));
  }
  SECTION("a zero tag in the middle") {
    std::string bad = bytes;
    bad.insert(2, 1, '\0');
    CHECK(ParseWithBytes(Sliced(bad, 16), {4, 5}, any, &head).code() == absl::StatusCode::kInvalidArgument);
  }
  SECTION("a length past the message's end") {
    std::string bad = bytes + std::string("\x22\xff\xff\xff\x0f", 5);  // field 4 again, 4 GB long
    const absl::Status s = ParseWithBytes(Sliced(bad, 16), {4, 5}, any, &head);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("field 4 says"));
  }
  SECTION("the sink's own error") {
    const absl::Status s = ParseWithBytes(Sliced(bytes, 16), {4, 5}, [](int number, size_t) -> absl::StatusOr<char*> {
      return absl::InvalidArgumentError(absl::StrCat("no room for field ", number));
    }, &head);
    CHECK(s.message() == "no room for field 4");
  }
}

}  // namespace
}  // namespace shardps
