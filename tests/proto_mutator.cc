#include "tests/proto_mutator.h"

#include <cmath>
#include <limits>

namespace shardps::testing {

using google::protobuf::Reflection;

void ProtoMutator::Mutate(Message* message) {
  const int count = static_cast<int>(Uniform(1, 3));
  for (int i = 0; i < count; ++i) {
    std::vector<std::pair<Message*, const Field*>> fields;
    CollectFields(message, &fields);
    if (fields.empty()) return;
    const auto& [holder, field] = fields[Uniform(0, static_cast<int64_t>(fields.size()) - 1)];
    MutateField(holder, field);
  }
}

void ProtoMutator::CollectFields(Message* message, std::vector<std::pair<Message*, const Field*>>* out) {
  const Reflection* r = message->GetReflection();
  const google::protobuf::Descriptor* d = message->GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const Field* f = d->field(i);
    out->emplace_back(message, f);
    if (f->cpp_type() != Field::CPPTYPE_MESSAGE) continue;
    if (f->is_repeated()) {
      for (int j = 0; j < r->FieldSize(*message, f); ++j) CollectFields(r->MutableRepeatedMessage(message, f, j), out);
    } else if (r->HasField(*message, f)) {
      CollectFields(r->MutableMessage(message, f), out);
    }
  }
}

void ProtoMutator::MutateField(Message* message, const Field* field) {
  if (field->is_repeated()) return MutateRepeated(message, field);
  const Reflection* r = message->GetReflection();
  if (field->cpp_type() == Field::CPPTYPE_MESSAGE) {
    if (r->HasField(*message, field) && OneIn(2)) {
      r->ClearField(message, field);
    } else {
      r->MutableMessage(message, field);  // present, every field at its default
    }
    return;
  }
  if (OneIn(8)) return r->ClearField(message, field);
  SetScalar(message, field, /*index=*/0);
}

void ProtoMutator::MutateRepeated(Message* message, const Field* field) {
  const Reflection* r = message->GetReflection();
  const int size = r->FieldSize(*message, field);
  switch (size == 0 ? 0 : Uniform(0, 3)) {
    case 0:  // one more: a copy of an element, or a new one
      if (field->cpp_type() == Field::CPPTYPE_MESSAGE) {
        Message* added = r->AddMessage(message, field);
        if (size > 0) added->CopyFrom(r->GetRepeatedMessage(*message, field, static_cast<int>(Uniform(0, size - 1))));
      } else {
        SetScalar(message, field, /*index=*/-1);
      }
      return;
    case 1:
      return r->RemoveLast(message, field);
    case 2:
      return r->SwapElements(message, field, 0, static_cast<int>(Uniform(0, size - 1)));
    default:
      if (field->cpp_type() != Field::CPPTYPE_MESSAGE) SetScalar(message, field, static_cast<int>(Uniform(0, size - 1)));
      return;
  }
}

void ProtoMutator::SetScalar(Message* m, const Field* f, int index) {
  const Reflection* r = m->GetReflection();
  const bool add = index < 0;
  auto now_int = [&] {
    if (add) return int64_t{0};
    switch (f->cpp_type()) {
      case Field::CPPTYPE_INT32: return int64_t{f->is_repeated() ? r->GetRepeatedInt32(*m, f, index) : r->GetInt32(*m, f)};
      case Field::CPPTYPE_INT64: return f->is_repeated() ? r->GetRepeatedInt64(*m, f, index) : r->GetInt64(*m, f);
      default: return int64_t{0};
    }
  };
  auto now_unsigned = [&] {
    if (add) return uint64_t{0};
    if (f->cpp_type() == Field::CPPTYPE_UINT32) {
      return uint64_t{f->is_repeated() ? r->GetRepeatedUInt32(*m, f, index) : r->GetUInt32(*m, f)};
    }
    return f->is_repeated() ? r->GetRepeatedUInt64(*m, f, index) : r->GetUInt64(*m, f);
  };
// Sets, adds or sets element `index` of field `f` of `m` with the setter of one type.
#define SHARDPS_SET(Type, value)                                        \
  do {                                                                  \
    if (!f->is_repeated()) {                                            \
      r->Set##Type(m, f, value);                                        \
    } else if (add) {                                                   \
      r->Add##Type(m, f, value);                                        \
    } else {                                                            \
      r->SetRepeated##Type(m, f, index, value);                         \
    }                                                                   \
  } while (false)
  switch (f->cpp_type()) {
    case Field::CPPTYPE_INT32: SHARDPS_SET(Int32, static_cast<int32_t>(Integer(now_int()))); break;
    case Field::CPPTYPE_INT64: SHARDPS_SET(Int64, Integer(now_int())); break;
    case Field::CPPTYPE_UINT32: SHARDPS_SET(UInt32, static_cast<uint32_t>(Unsigned(now_unsigned()))); break;
    case Field::CPPTYPE_UINT64: SHARDPS_SET(UInt64, Unsigned(now_unsigned())); break;
    case Field::CPPTYPE_FLOAT: SHARDPS_SET(Float, static_cast<float>(Real())); break;
    case Field::CPPTYPE_DOUBLE: SHARDPS_SET(Double, Real()); break;
    case Field::CPPTYPE_BOOL: SHARDPS_SET(Bool, OneIn(2)); break;
    case Field::CPPTYPE_ENUM: SHARDPS_SET(EnumValue, static_cast<int>(Uniform(-1, 6))); break;
    case Field::CPPTYPE_STRING: {
      std::string now = add ? "" : (f->is_repeated() ? r->GetRepeatedString(*m, f, index) : r->GetString(*m, f));
      std::string next = MutateBytes(std::move(now));
      if (f->type() == Field::TYPE_STRING) next = Printable(std::move(next));  // proto3 strings are UTF-8
      SHARDPS_SET(String, std::move(next));
      break;
    }
    case Field::CPPTYPE_MESSAGE: break;  // not a scalar
  }
#undef SHARDPS_SET
}

int64_t ProtoMutator::Integer(int64_t now) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  switch (Uniform(0, 9)) {
    case 0: return 0;
    case 1: return -1;
    case 2: return kMin;
    case 3: return kMax;
    case 4: return now == kMax ? now : now + 1;
    case 5: return now == kMin ? now : now - 1;
    case 6: return int64_t{1} << Uniform(16, 62);
    case 7: return -(int64_t{1} << Uniform(16, 62));
    default: return Uniform(-8, 1000);
  }
}

uint64_t ProtoMutator::Unsigned(uint64_t now) {
  switch (Uniform(0, 7)) {
    case 0: return 0;
    case 1: return std::numeric_limits<uint64_t>::max();
    case 2: return now + 1;
    case 3: return now - 1;  // wraps at 0
    case 4: return uint64_t{1} << Uniform(16, 63);
    default: return static_cast<uint64_t>(Uniform(0, 1000));
  }
}

double ProtoMutator::Real() {
  switch (Uniform(0, 7)) {
    case 0: return std::nan("");
    case 1: return std::numeric_limits<double>::infinity();
    case 2: return -std::numeric_limits<double>::infinity();
    case 3: return 0;
    case 4: return -1;
    case 5: return 1e30;
    case 6: return 1e-40;  // a float denormal
    default: return static_cast<double>(Uniform(-1000, 1000)) / 16;
  }
}

std::string ProtoMutator::Printable(std::string bytes) {
  for (char& c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (u < ' ' || u > '~') c = static_cast<char>(' ' + u % 95);  // printable bytes stay as they are
  }
  return bytes;
}

std::string ProtoMutator::RandomBytes(size_t n) {
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(Uniform(0, 255));
  return out;
}

std::string ProtoMutator::MutateBytes(std::string bytes) {
  const auto size = static_cast<int64_t>(bytes.size());
  switch (Uniform(0, 5)) {
    case 0:
      if (size > 0) bytes[Uniform(0, size - 1)] ^= static_cast<char>(1 << Uniform(0, 7));
      return bytes;
    case 1:
      bytes.resize(size == 0 ? 0 : Uniform(0, size - 1));
      return bytes;
    case 2:
      return bytes + RandomBytes(Uniform(1, 64));
    case 3:
      return bytes.insert(Uniform(0, size), RandomBytes(Uniform(1, 16)));
    case 4:
      return bytes + bytes;
    default:
      return RandomBytes(Uniform(0, 96));
  }
}

}  // namespace shardps::testing
