#include <catch2/catch.hpp>

#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "tests/temp_dir.h"
#include "worker/dataset.h"

namespace shardps {
namespace {

std::string Dir() { return testing::TempDir("idx"); }

std::string BigEndian(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

void WriteGzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

// Three 2x2 images with pixel values 0..11 and labels 7, 0, 9.
std::string Images() {
  std::string s = BigEndian(2051) + BigEndian(3) + BigEndian(2) + BigEndian(2);
  for (int i = 0; i < 12; ++i) s += static_cast<char>(i * 20);
  return s;
}
std::string Labels() { return BigEndian(2049) + BigEndian(3) + std::string("\x07\x00\x09", 3); }

TEST_CASE("IDX files, gzip or plain, are read exactly", "[data]") {
  const std::string d = Dir();
  WriteGzip(d + "/img.gz", Images());
  std::ofstream(d + "/lab", std::ios::binary) << Labels();
  auto ds = LoadIdx(d + "/img.gz", d + "/lab");
  REQUIRE(ds.ok());
  REQUIRE(ds->count == 3);
  REQUIRE(ds->rows == 2);
  REQUIRE(ds->cols == 2);
  REQUIRE(ds->labels == std::vector<int32_t>{7, 0, 9});
  REQUIRE(ds->images[5] == 100.0f / 255.0f);
}

TEST_CASE("missing, truncated and corrupt IDX files are refused naming the file", "[data]") {
  const std::string d = Dir();
  std::ofstream(d + "/lab", std::ios::binary) << Labels();
  auto missing = LoadIdx(d + "/nope.gz", d + "/lab");
  REQUIRE(missing.status().code() == absl::StatusCode::kNotFound);
  REQUIRE_THAT(std::string(missing.status().message()),
               Catch::Contains("nope.gz") && Catch::Contains("dataset-fashion-mnist"));

  WriteGzip(d + "/short.gz", Images().substr(0, 20));
  auto truncated = LoadIdx(d + "/short.gz", d + "/lab");
  REQUIRE(truncated.status().code() == absl::StatusCode::kDataLoss);
  REQUIRE_THAT(std::string(truncated.status().message()), Catch::Contains("short.gz is truncated"));

  std::string bad = Images();
  bad[3] = 1;  // wrong magic
  WriteGzip(d + "/magic.gz", bad);
  REQUIRE_THAT(std::string(LoadIdx(d + "/magic.gz", d + "/lab").status().message()), Catch::Contains("magic 2051"));

  // A gzip stream cut in the middle.
  WriteGzip(d + "/full.gz", Images() + std::string(4000, 'x'));
  const auto size = std::filesystem::file_size(d + "/full.gz");
  std::filesystem::resize_file(d + "/full.gz", size / 2);
  REQUIRE(LoadIdx(d + "/full.gz", d + "/lab").status().code() == absl::StatusCode::kDataLoss);

  std::ofstream(d + "/badlab", std::ios::binary) << BigEndian(2049) + BigEndian(3) + std::string("\x07\x00\x0b", 3);
  WriteGzip(d + "/img.gz", Images());
  REQUIRE_THAT(std::string(LoadIdx(d + "/img.gz", d + "/badlab").status().message()), Catch::Contains("label 11"));
}

TEST_CASE("Fashion-MNIST from Debian's package loads", "[data]") {
  if (!std::filesystem::exists(std::string(kDefaultDataDir) + "/t10k-images-idx3-ubyte.gz")) {
    FAIL("dataset-fashion-mnist is not installed (tools/setup installs it)");
  }
  auto test = LoadMnistStyle(kDefaultDataDir, /*train=*/false);
  REQUIRE(test.ok());
  REQUIRE(test->count == 10000);
  REQUIRE(test->rows == 28);
  std::set<int32_t> classes(test->labels.begin(), test->labels.end());
  REQUIRE(classes.size() == 10);
}

TEST_CASE("epoch shards: disjoint, equal, deterministic, reshuffled each epoch", "[data]") {
  const int64_t n = 1003;
  std::set<int64_t> seen;
  for (int r = 0; r < 4; ++r) {
    auto shard = EpochShard(n, 42, 0, r, 4);
    REQUIRE(shard.size() == 250);
    REQUIRE(shard == EpochShard(n, 42, 0, r, 4));
    for (int64_t i : shard) REQUIRE(seen.insert(i).second);
  }
  REQUIRE(EpochShard(n, 42, 1, 0, 4) != EpochShard(n, 42, 0, 0, 4));
  REQUIRE(EpochShard(n, 43, 0, 0, 4) != EpochShard(n, 42, 0, 0, 4));
}

}  // namespace
}  // namespace shardps
