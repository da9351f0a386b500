#include "bench/synthetic_layout.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace shardps {
namespace {

// ResNet-50's parameter tensors in forward order, as element counts.
std::vector<int64_t> ResNet50Sizes() {
  std::vector<int64_t> sizes;
  auto conv = [&](int64_t in, int64_t out, int64_t k) {
    sizes.push_back(in * out * k * k);
    sizes.push_back(2 * out);  // batch norm: scale and shift
  };
  conv(3, 64, 7);
  int64_t in = 64;
  const int blocks[] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t width = int64_t{64} << stage;
    for (int b = 0; b < blocks[stage]; ++b) {
      conv(in, width, 1);
      conv(width, width, 3);
      conv(width, 4 * width, 1);
      if (b == 0) conv(in, 4 * width, 1);  // projection shortcut
      in = 4 * width;
    }
  }
  sizes.push_back(2048 * 1000);  // classifier weights
  sizes.push_back(1000);         // and bias
  return sizes;
}

}  // namespace

absl::StatusOr<Layout> SyntheticLayout(const std::string& spec) {
  std::vector<int64_t> sizes;
  if (spec == "resnet50/10") {
    for (int64_t n : ResNet50Sizes()) sizes.push_back(std::max<int64_t>(1, n / 10));
  } else {
    for (absl::string_view s : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
      int64_t n = 0;
      if (!absl::SimpleAtoi(s, &n) || n <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("layout '", spec, "': want resnet50/10 or a list of tensor sizes in floats"));
      }
      sizes.push_back(n);
    }
  }
  if (sizes.empty()) return absl::InvalidArgumentError("empty layout");
  Layout layout;
  for (size_t i = 0; i < sizes.size(); ++i) layout.tensors.push_back({absl::StrCat("t", i), {sizes[i]}});
  return layout;
}

}  // namespace shardps
