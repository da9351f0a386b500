// Synthetic layouts for the scaling harness: a model's tensor sizes without
// its compute. "resnet50/10" is ResNet-50's parameter tensors (convolutions,
// batch-norm scale and shift, the classifier) with every size divided by 10:
// 10.2 MB in float32. A list like "1000,250000" gives sizes in floats.
#ifndef SHARDPS_BENCH_SYNTHETIC_LAYOUT_H_
#define SHARDPS_BENCH_SYNTHETIC_LAYOUT_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/layout.h"

namespace shardps {

absl::StatusOr<Layout> SyntheticLayout(const std::string& spec);

}  // namespace shardps

#endif  // SHARDPS_BENCH_SYNTHETIC_LAYOUT_H_
