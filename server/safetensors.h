// Reading and writing safetensors files of float32 tensors (and int64 ones:
// a sparse table's ids)
// (https://github.com/huggingface/safetensors: an 8-byte little-endian header
// length, a JSON header, then the raw data).
#ifndef SHARDPS_SERVER_SAFETENSORS_H_
#define SHARDPS_SERVER_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace shardps {

// A tensor to write; the data is borrowed for the duration of the call.
struct TensorView {
  std::string name;
  std::vector<int64_t> shape;
  absl::Span<const float> values;
  absl::Span<const int64_t> ints;  // written (as I64) in place of `values` when is_int
  bool is_int = false;
};

struct LoadedTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;  // F32 tensors
  std::vector<int64_t> ints;  // I64 tensors
  bool is_int = false;
};

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  std::map<std::string, LoadedTensor> tensors;
};

// Writes to `path` + ".tmp", fsyncs it, renames it over `path` and fsyncs the
// directory, so a reader sees the old file or the new one, never a torn one.
absl::Status WriteSafetensorsAtomically(const std::string& path,
                                        const std::map<std::string, std::string>& metadata,
                                        const std::vector<TensorView>& tensors);

// NOT_FOUND when the file does not exist; DATA_LOSS when it is truncated,
// malformed, or holds a dtype other than F32 and I64.
absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path);

}  // namespace shardps

#endif  // SHARDPS_SERVER_SAFETENSORS_H_
