// client/ps_requests.h: requests built from tensors and pull answers decoded
// into them, without sockets.
#include <catch2/catch.hpp>

#include "common/tensor_frame.h"
#include "client/ps_requests.h"

namespace shardps {
namespace {

// w[3,5] and b[5] in 16-byte chunks (4 floats): 6 keys over 2 servers.
Layout SmallLayout() { return Layout{{{"w", {3, 5}}, {"b", {5}}}}; }

TEST_CASE("pushes: each server's chunks in requests of at most the cap, every chunk once, payloads borrowed",
          "[requests]") {
  const KeyMap map = *KeyMap::Build(SmallLayout(), 2, 16);
  const RequestBuilder builder(&map, /*max_request_bytes=*/32, wire::DTYPE_FLOAT32);
  std::vector<float> w(15), b(5);
  for (int i = 0; i < 15; ++i) w[i] = static_cast<float>(i);
  auto pushes = builder.Pushes(3, {{0, w.data()}, {1, b.data()}});
  REQUIRE(pushes.ok());
  int chunks = 0;
  for (const auto& req : *pushes) {
    REQUIRE(req->header.step() == 3);
    REQUIRE(req->payloads.size() == static_cast<size_t>(req->header.chunks_size()));
    REQUIRE(req->bytes <= 32);
    REQUIRE(req->first_tensor == req->header.chunks(0).key().tensor());
    int64_t bytes = 0;
    for (int i = 0; i < req->header.chunks_size(); ++i, ++chunks) {
      const wire::Chunk& c = req->header.chunks(i);
      const ChunkInfo* info = map.Find({c.key().tensor(), c.key().chunk()});
      REQUIRE(info->server == req->server);
      REQUIRE(c.raw_bytes() == info->length * 4);
      bytes += c.raw_bytes();
      const float* tensor = c.key().tensor() == 0 ? w.data() : b.data();
      REQUIRE(req->payloads[i].data() == reinterpret_cast<const char*>(tensor + info->offset));  // no copy
    }
    REQUIRE(bytes == req->bytes);
  }
  REQUIRE(chunks == 6);
  // 76 bytes over two servers in requests of at most 32: at least 3.
  REQUIRE(pushes->size() >= 3);
  // Without a cap, one request per server.
  const RequestBuilder whole(&map, 0, wire::DTYPE_FLOAT32);
  REQUIRE(whole.Pushes(3, {{0, w.data()}, {1, b.data()}})->size() == 2);
}

TEST_CASE("requests keep each server's chunks in tensor order, so a request's first tensor is its place in line",
          "[requests]") {
  const KeyMap map = *KeyMap::Build(SmallLayout(), 1, 16);
  const RequestBuilder builder(&map, 16, wire::DTYPE_FLOAT32);  // one chunk per request
  std::vector<float> w(15), b(5);
  auto pulls = builder.Pulls(2, {{0, w.data()}, {1, b.data()}});
  REQUIRE(pulls.ok());
  REQUIRE(pulls->size() == 6);
  std::vector<uint32_t> firsts;
  for (const PullPart& p : *pulls) firsts.push_back(p.first_tensor);
  REQUIRE(firsts == std::vector<uint32_t>{0, 0, 0, 0, 1, 1});
  REQUIRE((*pulls)[3].bytes == 12);  // w's last chunk: 3 floats
}

TEST_CASE("pushes and pulls group by caps of their own", "[requests]") {
  // One server, 6 keys: w's 16+16+16+12 bytes, b's 16+4.
  const KeyMap map = *KeyMap::Build(SmallLayout(), 1, 16);
  const RequestBuilder builder(&map, /*max_push_bytes=*/48, /*max_pull_bytes=*/16, wire::DTYPE_FLOAT32);
  std::vector<float> w(15), b(5);
  auto pushes = builder.Pushes(1, {{0, w.data()}, {1, b.data()}});
  auto pulls = builder.Pulls(1, {{0, w.data()}, {1, b.data()}});
  REQUIRE(pushes.ok());
  REQUIRE(pulls.ok());
  std::vector<int> push_chunks;
  for (const auto& req : *pushes) push_chunks.push_back(req->header.chunks_size());
  REQUIRE(push_chunks == std::vector<int>{3, 3});  // 48 bytes, then 12 + 16 + 4
  REQUIRE(pulls->size() == 6);                     // one key each
}

TEST_CASE("bfloat16 pushes carry narrowed copies of half the size", "[requests]") {
  const KeyMap map = *KeyMap::Build(SmallLayout(), 1, 16);
  const RequestBuilder builder(&map, 0, wire::DTYPE_BFLOAT16);
  std::vector<float> b = {1.0f, -2.0f, 0.5f, 3.0f, 8.0f};
  auto pushes = builder.Pushes(0, {{1, b.data()}});
  REQUIRE(pushes.ok());
  const RawPush& req = *(*pushes)[0];
  REQUIRE(req.header.chunks_size() == 2);
  REQUIRE(req.payloads[0].size() == 8);
  uint16_t first;
  std::memcpy(&first, req.payloads[0].data(), 2);
  REQUIRE(first == 0x3f80);  // 1.0f's top 16 bits
}

// The (tensor, chunk) keys a push names, in order.
std::vector<std::pair<uint32_t, uint32_t>> KeysOf(const RawPush& req) {
  std::vector<std::pair<uint32_t, uint32_t>> keys;
  for (const wire::Chunk& c : req.header.chunks()) keys.emplace_back(c.key().tensor(), c.key().chunk());
  return keys;
}

TEST_CASE("waiting pushes of a step to a server merge into one request, in order, payloads still borrowed",
          "[requests]") {
  const KeyMap map = *KeyMap::Build(SmallLayout(), 1, 16);
  const RequestBuilder builder(&map, 0, wire::DTYPE_FLOAT32);
  std::vector<float> w(15), b(5);
  std::vector<std::shared_ptr<RawPush>> pushes = *builder.Pushes(4, {{1, b.data()}});  // backward: b first
  pushes.push_back((*builder.Pushes(4, {{0, w.data()}}))[0]);
  std::vector<std::shared_ptr<RawPush>> merged = MergePushes(pushes);
  REQUIRE(merged.size() == 1);
  const RawPush& req = *merged[0];
  CHECK(req.header.step() == 4);
  CHECK(req.server == 0);
  CHECK(req.first_tensor == 0);  // its place in line: the earliest tensor it carries
  CHECK(req.bytes == 80);
  CHECK(KeysOf(req) == std::vector<std::pair<uint32_t, uint32_t>>{{1, 0}, {1, 1}, {0, 0}, {0, 1}, {0, 2}, {0, 3}});
  REQUIRE(req.payloads.size() == 6);
  CHECK(req.payloads[0].data() == reinterpret_cast<const char*>(b.data()));
  CHECK(req.payloads[2].data() == reinterpret_cast<const char*>(w.data()));  // no copy
  CHECK(req.payloads[5].size() == 12);
}

TEST_CASE("a push that names a key again, or owns its payloads, starts a request of its own", "[requests]") {
  const KeyMap map = *KeyMap::Build(SmallLayout(), 1, 16);
  const RequestBuilder builder(&map, 0, wire::DTYPE_FLOAT32);
  std::vector<float> w(15), b(5);
  auto push = [&](uint32_t tensor) { return (*builder.Pushes(2, {{tensor, tensor == 0 ? w.data() : b.data()}}))[0]; };
  // b, w, b again (the server would refuse a request naming b's keys twice), w again.
  std::vector<size_t> request_of;
  std::vector<std::shared_ptr<RawPush>> merged = MergePushes({push(1), push(0), push(1), push(0)}, &request_of);
  REQUIRE(merged.size() == 2);
  CHECK(merged[0]->header.chunks_size() == 6);
  CHECK(merged[1]->header.chunks_size() == 6);
  CHECK(request_of == std::vector<size_t>{0, 0, 1, 1});  // whose answer each caller gets
  // A copy kept for the failover holds its payloads: sent alone, as it is.
  std::shared_ptr<RawPush> owned = push(0)->OwnedCopy();
  merged = MergePushes({push(1), owned, push(1)}, &request_of);
  REQUIRE(merged.size() == 3);
  CHECK(merged[1] == owned);
  CHECK(merged[2]->header.chunks_size() == 2);
  CHECK(request_of == std::vector<size_t>{0, 1, 2});
  // One push is left as it is.
  std::shared_ptr<RawPush> alone = push(1);
  CHECK(MergePushes({alone}, &request_of)[0] == alone);
  CHECK(request_of == std::vector<size_t>{0});
}

TEST_CASE("merged bfloat16 pushes keep their narrowed values where the payloads point", "[requests]") {
  const KeyMap map = *KeyMap::Build(SmallLayout(), 1, 16);
  const RequestBuilder builder(&map, 0, wire::DTYPE_BFLOAT16);
  std::vector<float> w(15, 2.0f), b(5, 1.0f);
  std::vector<std::shared_ptr<RawPush>> merged =
      MergePushes({(*builder.Pushes(0, {{1, b.data()}}))[0], (*builder.Pushes(0, {{0, w.data()}}))[0]});
  REQUIRE(merged.size() == 1);
  REQUIRE(merged[0]->narrowed.size() == 6);
  CHECK(merged[0]->bytes == 40);
  uint16_t first, third;
  std::memcpy(&first, merged[0]->payloads[0].data(), 2);
  std::memcpy(&third, merged[0]->payloads[2].data(), 2);
  CHECK(first == 0x3f80);  // 1.0f
  CHECK(third == 0x4000);  // 2.0f, from w's narrowed copy
  CHECK(merged[0]->payloads[2].data() == reinterpret_cast<const char*>(merged[0]->narrowed[2].get()));
}

TEST_CASE("bad tensors are refused before anything is sent", "[requests]") {
  const KeyMap map = *KeyMap::Build(SmallLayout(), 1, 16);
  const RequestBuilder builder(&map, 0, wire::DTYPE_FLOAT32);
  std::vector<float> x(15);
  REQUIRE(builder.Pushes(0, {}).status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE_THAT(std::string(builder.Pulls(0, {{7, x.data()}}).status().message()), Catch::Contains("unknown tensor 7"));
  REQUIRE(builder.Inits({x}).status().code() == absl::StatusCode::kInvalidArgument);  // 1 tensor of 2
}

// The answer a server sends for `req`: each chunk's values are its key's
// index times 10 plus the element's index.
grpc::ByteBuffer Answer(const KeyMap& map, const wire::PullRequest& req, wire::DType dtype) {
  wire::PullResponse resp;
  std::vector<SharedPayload> payloads;
  for (const wire::Key& k : req.keys()) {
    const ChunkInfo* info = map.Find({k.tensor(), k.chunk()});
    auto values = std::make_shared<std::vector<float>>(info->length);
    for (int64_t i = 0; i < info->length; ++i) (*values)[i] = static_cast<float>(k.chunk() * 10 + i);
    wire::Chunk* c = resp.add_chunks();
    *c->mutable_key() = k;
    c->set_dtype(dtype);
    c->set_raw_bytes(info->length * 4);
    payloads.push_back(ShareFloats(values));
  }
  return EncodeFrame(resp, std::move(payloads));
}

TEST_CASE("a pull answer lands in the caller's tensors; a wrong one is DATA_LOSS", "[requests]") {
  const KeyMap map = *KeyMap::Build(SmallLayout(), 1, 16);
  const RequestBuilder builder(&map, 0, wire::DTYPE_FLOAT32);
  std::vector<float> w(15, -1.0f);
  auto plan = builder.Pulls(5, {{0, w.data()}});
  REQUIRE(plan.ok());
  REQUIRE(plan->size() == 1);
  const wire::PullRequest& req = *(*plan)[0].request;
  REQUIRE(req.step() == 5);
  REQUIRE(req.keys_size() == 4);
  REQUIRE(DecodePullAnswer(Answer(map, req, wire::DTYPE_FLOAT32), (*plan)[0].targets, wire::DTYPE_FLOAT32).ok());
  REQUIRE(w[0] == 0.0f);
  REQUIRE(w[5] == 11.0f);   // chunk 1, element 1
  REQUIRE(w[14] == 32.0f);  // chunk 3, element 2

  wire::PullRequest fewer = req;
  fewer.mutable_keys()->RemoveLast();
  const absl::Status short_answer = DecodePullAnswer(Answer(map, fewer, wire::DTYPE_FLOAT32), (*plan)[0].targets,
                                                     wire::DTYPE_FLOAT32);
  REQUIRE(short_answer.code() == absl::StatusCode::kDataLoss);
  REQUIRE_THAT(std::string(short_answer.message()), Catch::Contains("answered 3 chunks; asked for 4"));
}

}  // namespace
}  // namespace shardps
