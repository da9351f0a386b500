#include "client/ps_requests.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/tensor_frame.h"
#include "common/wire_dtype.h"

namespace shardps {

template <typename Tensor>
absl::Status RequestBuilder::CheckTensors(const std::vector<Tensor>& tensors, const char* what) const {
  if (tensors.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " of no tensors"));
  std::vector<bool> named(map_->layout().tensors.size(), false);
  for (const Tensor& t : tensors) {
    if (t.tensor >= map_->layout().tensors.size()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " of unknown tensor ", t.tensor));
    }
    // A server refuses a request that names a key twice.
    if (named[t.tensor]) return absl::InvalidArgumentError(absl::StrCat(what, " names tensor ", t.tensor, " twice"));
    named[t.tensor] = true;
  }
  return absl::OkStatus();
}

template <typename Tensor, typename Add>
void RequestBuilder::Group(const std::vector<Tensor>& tensors, int64_t max_request_bytes, Add add) const {
  std::vector<int> open(map_->num_servers(), -1);          // each server's open request
  std::vector<int64_t> open_bytes(map_->num_servers(), 0);
  int requests = 0;
  for (const Tensor& t : tensors) {
    for (const ChunkInfo& c : map_->ChunksOfTensor(t.tensor)) {
      const int64_t bytes = c.length * ValueBytes(dtype_);
      int& r = open[c.server];
      if (r < 0 || (max_request_bytes > 0 && open_bytes[c.server] + bytes > max_request_bytes)) {
        r = requests++;
        open_bytes[c.server] = 0;
      }
      open_bytes[c.server] += bytes;
      add(r, c, t);
    }
  }
}

std::shared_ptr<RawPush> RawPush::OwnedCopy() const {
  auto copy = std::make_shared<RawPush>();
  copy->server = server;
  copy->first_tensor = first_tensor;
  copy->bytes = bytes;
  copy->header = header;
  size_t total = 0;
  for (absl::string_view p : payloads) total += p.size();
  copy->owned.reserve(total);
  for (absl::string_view p : payloads) copy->owned.append(p.data(), p.size());
  size_t at = 0;
  for (absl::string_view p : payloads) {
    copy->payloads.emplace_back(copy->owned.data() + at, p.size());
    at += p.size();
  }
  return copy;
}

namespace {
// Appends `push` to `into`, which holds pushes of the same step to the same server.
void Append(RawPush& push, RawPush& into) {
  into.first_tensor = std::min(into.first_tensor, push.first_tensor);
  into.bytes += push.bytes;
  for (wire::Chunk& c : *push.header.mutable_chunks()) *into.header.add_chunks() = std::move(c);
  into.payloads.insert(into.payloads.end(), push.payloads.begin(), push.payloads.end());
  for (auto& n : push.narrowed) into.narrowed.push_back(std::move(n));  // the arrays stay where they are
}
}  // namespace

std::vector<std::shared_ptr<RawPush>> MergePushes(std::vector<std::shared_ptr<RawPush>> pushes,
                                                  std::vector<size_t>* request_of) {
  if (request_of != nullptr) request_of->clear();
  if (pushes.size() < 2) {
    if (request_of != nullptr) request_of->assign(pushes.size(), 0);
    return pushes;
  }
  std::vector<std::shared_ptr<RawPush>> merged;
  absl::flat_hash_set<ChunkKey> keys;  // of merged.back()
  bool open = false;                   // merged.back() takes more pushes
  for (std::shared_ptr<RawPush>& push : pushes) {
    if (!push->owned.empty()) {  // sent as it is
      merged.push_back(std::move(push));
      open = false;
      if (request_of != nullptr) request_of->push_back(merged.size() - 1);
      continue;
    }
    std::vector<ChunkKey> named;
    for (const wire::Chunk& c : push->header.chunks()) named.push_back({c.key().tensor(), c.key().chunk()});
    const bool repeats = std::any_of(named.begin(), named.end(), [&](const ChunkKey& k) { return keys.contains(k); });
    if (!open || repeats) {  // a request of its own, which later pushes join
      auto request = std::make_shared<RawPush>();
      request->server = push->server;
      request->first_tensor = push->first_tensor;
      request->header.set_step(push->header.step());
      merged.push_back(std::move(request));
      keys.clear();
      open = true;
    }
    keys.insert(named.begin(), named.end());
    Append(*push, *merged.back());
    if (request_of != nullptr) request_of->push_back(merged.size() - 1);
  }
  return merged;
}

absl::StatusOr<std::vector<std::shared_ptr<RawPush>>> RequestBuilder::Pushes(
    int64_t step, const std::vector<TensorIn>& tensors, const PulledVersions* pulled) const {
  if (absl::Status ok = CheckTensors(tensors, "push"); !ok.ok()) return ok;
  std::vector<std::shared_ptr<RawPush>> reqs;
  Group(tensors, max_push_bytes_, [&](int r, const ChunkInfo& c, const TensorIn& t) {
    if (r == static_cast<int>(reqs.size())) {
      reqs.push_back(std::make_shared<RawPush>());
      reqs.back()->server = c.server;
      reqs.back()->first_tensor = c.key.tensor;
      reqs.back()->header.set_step(step);
    }
    RawPush& req = *reqs[r];
    wire::Chunk* chunk = req.header.add_chunks();
    chunk->mutable_key()->set_tensor(c.key.tensor);
    chunk->mutable_key()->set_chunk(c.key.chunk);
    chunk->set_dtype(dtype_);
    if (pulled != nullptr) {
      if (std::optional<int64_t> base = pulled->For(c.key, step)) chunk->set_base_version(*base);
    }
    if (dtype_ == wire::DTYPE_BFLOAT16) {
      auto& narrow = req.narrowed.emplace_back(new uint16_t[c.length]);
      ToBfloat16(t.values + c.offset, c.length, narrow.get());
      req.payloads.emplace_back(reinterpret_cast<const char*>(narrow.get()), c.length * 2);
    } else {
      req.payloads.emplace_back(reinterpret_cast<const char*>(t.values + c.offset), c.length * 4);
    }
    chunk->set_raw_bytes(static_cast<int64_t>(req.payloads.back().size()));
    req.bytes += chunk->raw_bytes();
  });
  return reqs;
}

absl::StatusOr<std::vector<PullPart>> RequestBuilder::Pulls(int64_t step, const std::vector<TensorOut>& tensors) const {
  if (absl::Status ok = CheckTensors(tensors, "pull"); !ok.ok()) return ok;
  std::vector<PullPart> parts;
  Group(tensors, max_pull_bytes_, [&](int r, const ChunkInfo& c, const TensorOut& t) {
    if (r == static_cast<int>(parts.size())) {
      PullPart& p = parts.emplace_back();
      p.server = c.server;
      p.first_tensor = c.key.tensor;
      p.request = std::make_shared<wire::PullRequest>();
      p.request->set_step(step);
      p.request->set_dtype(dtype_);
    }
    PullPart& part = parts[r];
    wire::Key* key = part.request->add_keys();
    key->set_tensor(c.key.tensor);
    key->set_chunk(c.key.chunk);
    part.targets.push_back({c, t.values});
    part.bytes += c.length * ValueBytes(dtype_);
  });
  return parts;
}

absl::StatusOr<std::vector<std::shared_ptr<wire::InitRequest>>> RequestBuilder::Inits(
    const std::vector<std::vector<float>>& weights, const ReplicaMap* replicas) const {
  const Layout& layout = map_->layout();
  if (weights.size() != layout.tensors.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Init got ", weights.size(), " tensors; layout has ", layout.tensors.size()));
  }
  std::vector<std::shared_ptr<wire::InitRequest>> reqs(map_->num_servers());
  for (auto& r : reqs) {
    r = std::make_shared<wire::InitRequest>();
    *r->mutable_layout() = LayoutToProto(layout);
  }
  for (const ChunkInfo& c : map_->chunks()) {
    const std::vector<float>& values = weights[c.key.tensor];
    if (static_cast<int64_t>(values.size()) != layout.tensors[c.key.tensor].NumElements()) {
      return absl::InvalidArgumentError(absl::StrCat("Init tensor ", c.key.tensor, " has the wrong size"));
    }
    for (int holder : replicas != nullptr ? replicas->Chain(c.server) : std::vector<int>{c.server}) {
      wire::Chunk* chunk = reqs[holder]->add_chunks();
      chunk->mutable_key()->set_tensor(c.key.tensor);
      chunk->mutable_key()->set_chunk(c.key.chunk);
      chunk->set_dtype(wire::DTYPE_FLOAT32);
      chunk->set_data(reinterpret_cast<const char*>(values.data() + c.offset), c.length * 4);
    }
  }
  return reqs;
}

absl::Status DecodePullAnswer(const grpc::ByteBuffer& answer, const std::vector<PullTarget>& targets,
                              wire::DType dtype, int64_t step, PulledVersions* pulled) {
  wire::PullResponse resp;
  absl::StatusOr<std::unique_ptr<FrameReader>> frame = FrameReader::Parse(answer, &resp);
  if (!frame.ok()) return absl::DataLossError(frame.status().message());
  if (resp.chunks_size() != static_cast<int>(targets.size())) {
    return absl::DataLossError(absl::StrCat("pull answered ", resp.chunks_size(), " chunks; asked for ", targets.size()));
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    const wire::Chunk& c = resp.chunks(static_cast<int>(i));
    const ChunkInfo& want = targets[i].chunk;
    const int64_t bytes = want.length * ValueBytes(dtype);
    if (c.key().tensor() != want.key.tensor || c.key().chunk() != want.key.chunk || c.dtype() != dtype ||
        c.raw_bytes() != bytes || (*frame)->remaining() < bytes) {
      return absl::DataLossError(absl::StrCat("pull answered a wrong chunk for key ", KeyName(want.key)));
    }
    float* out = targets[i].tensor_values + want.offset;
    if (dtype == wire::DTYPE_FLOAT32) {
      (*frame)->CopyNext(bytes, reinterpret_cast<char*>(out));
    } else {
      (*frame)->WidenNextBfloat16(want.length, out);
    }
    if (pulled != nullptr) pulled->Record(want.key, step, c.version());
  }
  return absl::OkStatus();
}

}  // namespace shardps
