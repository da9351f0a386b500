#include "worker/dataset.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"

namespace shardps {
namespace {

// The whole file, decompressed when it is gzip (zlib reads plain files too).
absl::StatusOr<std::string> ReadMaybeGzip(const std::string& path) {
  if (!std::filesystem::exists(path)) {
    return absl::NotFoundError(absl::StrCat(
        "no file ", path, "; for Fashion-MNIST run `apt-get install dataset-fashion-mnist` ",
        "(files in ", kDefaultDataDir, ") or pass --data_dir"));
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return absl::DataLossError(absl::StrCat("cannot open ", path));
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, n);
  int err = 0;
  const char* message = gzerror(f, &err);
  const bool failed = n < 0 || (err != Z_OK && err != Z_STREAM_END);
  const std::string what = failed ? message : "";
  gzclose(f);
  if (failed) return absl::DataLossError(absl::StrCat(path, " is corrupt: ", what));
  return out;
}

uint32_t BigEndian32(const std::string& s, size_t offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data() + offset);
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

absl::StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path) {
  absl::StatusOr<std::string> images = ReadMaybeGzip(images_path);
  if (!images.ok()) return images.status();
  absl::StatusOr<std::string> labels = ReadMaybeGzip(labels_path);
  if (!labels.ok()) return labels.status();
  if (images->size() < 16 || BigEndian32(*images, 0) != 2051) {
    return absl::DataLossError(absl::StrCat(images_path, " is not an IDX image file (magic 2051)"));
  }
  if (labels->size() < 8 || BigEndian32(*labels, 0) != 2049) {
    return absl::DataLossError(absl::StrCat(labels_path, " is not an IDX label file (magic 2049)"));
  }
  Dataset d;
  d.count = BigEndian32(*images, 4);
  d.rows = static_cast<int>(BigEndian32(*images, 8));
  d.cols = static_cast<int>(BigEndian32(*images, 12));
  if (d.rows <= 0 || d.cols <= 0 || d.rows > 4096 || d.cols > 4096) {
    return absl::DataLossError(absl::StrCat(images_path, " has image size ", d.rows, "x", d.cols));
  }
  if (images->size() != 16 + static_cast<size_t>(d.count * d.ImageSize())) {
    return absl::DataLossError(absl::StrCat(images_path, " is truncated: ", images->size(), " bytes for ",
                                            d.count, " images of ", d.rows, "x", d.cols));
  }
  if (BigEndian32(*labels, 4) != d.count || labels->size() != 8 + static_cast<size_t>(d.count)) {
    return absl::DataLossError(absl::StrCat(labels_path, " does not hold ", d.count, " labels"));
  }
  d.images.resize(d.count * d.ImageSize());
  for (size_t i = 0; i < d.images.size(); ++i) {
    d.images[i] = static_cast<unsigned char>((*images)[16 + i]) / 255.0f;
  }
  d.labels.resize(d.count);
  for (int64_t i = 0; i < d.count; ++i) {
    d.labels[i] = static_cast<unsigned char>((*labels)[8 + i]);
    if (d.labels[i] >= d.classes) {
      return absl::DataLossError(absl::StrCat(labels_path, ": label ", d.labels[i], " at ", i, " is not in 0..9"));
    }
  }
  return d;
}

absl::StatusOr<Dataset> LoadMnistStyle(const std::string& dir, bool train) {
  const std::string prefix = absl::StrCat(dir, "/", train ? "train" : "t10k");
  return LoadIdx(prefix + "-images-idx3-ubyte.gz", prefix + "-labels-idx1-ubyte.gz");
}

Dataset SyntheticDataset(int64_t count, int rows, int cols, uint64_t seed) {
  Dataset d;
  d.count = count;
  d.rows = rows;
  d.cols = cols;
  d.images.resize(count * d.ImageSize());
  d.labels.resize(count);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0, 1);
  const int64_t band = std::max<int64_t>(1, d.ImageSize() / d.classes);
  for (int64_t i = 0; i < count; ++i) {
    float* img = &d.images[i * d.ImageSize()];
    for (int64_t p = 0; p < d.ImageSize(); ++p) img[p] = 0.2f * u(rng);
    // The label lights up one band of pixels.
    d.labels[i] = static_cast<int32_t>(rng() % d.classes);
    for (int64_t p = d.labels[i] * band; p < std::min(d.ImageSize(), (d.labels[i] + 1) * band); ++p) img[p] += 0.8f;
  }
  return d;
}

std::vector<int64_t> EpochShard(int64_t count, uint64_t seed, int epoch, int rank, int num_workers) {
  std::vector<int64_t> all(count);
  std::iota(all.begin(), all.end(), 0);
  std::mt19937_64 rng(seed * 1000003ULL + static_cast<uint64_t>(epoch));
  std::shuffle(all.begin(), all.end(), rng);
  const int64_t share = count / num_workers;
  return {all.begin() + rank * share, all.begin() + (rank + 1) * share};
}

}  // namespace shardps
