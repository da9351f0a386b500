// Random, reproducible mutations of protobuf messages, for the wire fuzz
// test (tests/wire_fuzz_test.cc): a peer that sends well-formed messages
// with wrong contents (a field at an extreme value, a repeated field grown
// or cut, a sub-message dropped), and bytes that are almost a message.
// Works on any message through reflection, so a field added to the wire is
// fuzzed without a change here.
#ifndef SHARDPS_TESTS_PROTO_MUTATOR_H_
#define SHARDPS_TESTS_PROTO_MUTATOR_H_

#include <google/protobuf/message.h>

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace shardps::testing {

class ProtoMutator {
 public:
  explicit ProtoMutator(uint64_t seed) : rng_(seed) {}

  // 1 to 3 mutations, each of one field (one element of a repeated field)
  // anywhere in `message`, nested messages included.
  void Mutate(google::protobuf::Message* message);
  // `bytes` with one change: a byte flipped, the end cut, random bytes
  // appended or inserted, or all of it replaced.
  std::string MutateBytes(std::string bytes);
  // Each byte that is not printable ASCII mapped onto one that is: for
  // proto3 strings (UTF-8) and metadata values.
  static std::string Printable(std::string bytes);
  // A uniform integer in [lo, hi].
  int64_t Uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  bool OneIn(int n) { return Uniform(1, n) == 1; }

 private:
  using Message = google::protobuf::Message;
  using Field = google::protobuf::FieldDescriptor;
  // Every (message, field) of `message` and of the sub-messages it holds.
  void CollectFields(Message* message, std::vector<std::pair<Message*, const Field*>>* out);
  void MutateField(Message* message, const Field* field);
  void MutateRepeated(Message* message, const Field* field);
  // Sets the singular field, or element `index` of the repeated one (-1: adds one).
  void SetScalar(Message* message, const Field* field, int index);
  int64_t Integer(int64_t now);
  uint64_t Unsigned(uint64_t now);
  double Real();
  std::string RandomBytes(size_t n);

  std::mt19937_64 rng_;
};

}  // namespace shardps::testing

#endif  // SHARDPS_TESTS_PROTO_MUTATOR_H_
