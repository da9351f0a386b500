#include "common/table_spec.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace shardps {

const char* RowOptimizerName(RowOptimizerKind kind) {
  switch (kind) {
    case RowOptimizerKind::kSgd:
      return "sgd";
    case RowOptimizerKind::kAdagrad:
      return "adagrad";
    case RowOptimizerKind::kRowwiseAdagrad:
      return "rowwise_adagrad";
    case RowOptimizerKind::kLazyAdam:
      return "lazy_adam";
  }
  return "?";
}

absl::StatusOr<RowOptimizerKind> ParseRowOptimizer(absl::string_view name) {
  for (RowOptimizerKind k : {RowOptimizerKind::kSgd, RowOptimizerKind::kAdagrad, RowOptimizerKind::kRowwiseAdagrad,
                             RowOptimizerKind::kLazyAdam}) {
    if (name == RowOptimizerName(k)) return k;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown row optimizer '", name, "'; want sgd, adagrad, rowwise_adagrad or lazy_adam"));
}

absl::Status CheckTableSpec(const TableSpec& spec) {
  if (spec.name.empty()) return absl::InvalidArgumentError("a table has an empty name");
  const std::string who = absl::StrCat("table '", spec.name, "': ");
  if (spec.dim <= 0 || spec.dim > (1 << 16)) {
    return absl::InvalidArgumentError(absl::StrCat(who, "row dimension ", spec.dim, " is not in [1, 65536]"));
  }
  if (spec.vocab < 0) return absl::InvalidArgumentError(absl::StrCat(who, "vocabulary ", spec.vocab, " < 0"));
  if (!(spec.init_scale >= 0) || !std::isfinite(spec.init_scale)) {
    return absl::InvalidArgumentError(absl::StrCat(who, "init scale ", spec.init_scale, " is not finite and >= 0"));
  }
  if (!(spec.lr > 0) || !std::isfinite(spec.lr)) {
    return absl::InvalidArgumentError(absl::StrCat(who, "learning rate ", spec.lr, " is not finite and > 0"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TableSpec> TableSpecFromProto(const wire::TableSpec& proto) {
  TableSpec spec;
  spec.name = proto.name();
  spec.dim = proto.dim();
  spec.vocab = proto.vocab();
  spec.init_scale = proto.init_scale();
  spec.lr = proto.lr();
  spec.seed = proto.seed();
  switch (proto.optimizer()) {
    case wire::ROW_SGD:
      spec.optimizer = RowOptimizerKind::kSgd;
      break;
    case wire::ROW_ADAGRAD:
      spec.optimizer = RowOptimizerKind::kAdagrad;
      break;
    case wire::ROW_ROWWISE_ADAGRAD:
      spec.optimizer = RowOptimizerKind::kRowwiseAdagrad;
      break;
    case wire::ROW_LAZY_ADAM:
      spec.optimizer = RowOptimizerKind::kLazyAdam;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("table '", proto.name(), "': unknown row optimizer ", proto.optimizer()));
  }
  if (absl::Status s = CheckTableSpec(spec); !s.ok()) return s;
  return spec;
}

wire::TableSpec TableSpecToProto(const TableSpec& spec) {
  wire::TableSpec p;
  p.set_name(spec.name);
  p.set_dim(spec.dim);
  p.set_vocab(spec.vocab);
  p.set_init_scale(spec.init_scale);
  p.set_lr(spec.lr);
  p.set_seed(spec.seed);
  static constexpr wire::RowOptimizer kWire[] = {wire::ROW_SGD, wire::ROW_ADAGRAD, wire::ROW_ROWWISE_ADAGRAD,
                                                 wire::ROW_LAZY_ADAM};
  p.set_optimizer(kWire[static_cast<int>(spec.optimizer)]);
  return p;
}

int RowServer(int64_t id, int num_servers) {
  // The high half of the mix, scaled to [0, num_servers) without a division;
  // stripes inside a server use the low bits, which stay evenly spread.
  const uint64_t high = MixId(static_cast<uint64_t>(id)) >> 32;
  return static_cast<int>((high * static_cast<uint64_t>(num_servers)) >> 32);
}

namespace {
uint64_t NameHash(const std::string& name) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  return h;
}
}  // namespace

void InitialRow(const TableSpec& spec, int64_t id, float* out) {
  if (spec.init_scale == 0.0f) {  // rows start at zero: no draws
    std::fill_n(out, spec.dim, 0.0f);
    return;
  }
  uint64_t state = MixId(NameHash(spec.name) ^ MixId(spec.seed + 0x9e3779b97f4a7c15ULL)) ^ static_cast<uint64_t>(id);
  for (int32_t j = 0; j < spec.dim; ++j) {
    state += 0x9e3779b97f4a7c15ULL;
    // 24 random bits -> [0, 1) exactly representable in float, then [-s, s].
    const float unit = static_cast<float>(MixId(state) >> 40) * (1.0f / 16777216.0f);
    out[j] = (2.0f * unit - 1.0f) * spec.init_scale;
  }
}

}  // namespace shardps
