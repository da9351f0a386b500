// A gRPC status a test expects: its code, and a text its message contains
// (the message is shown when it differs). Catch2: main thread only.
#ifndef SHARDPS_TESTS_EXPECT_STATUS_H_
#define SHARDPS_TESTS_EXPECT_STATUS_H_

#include <catch2/catch.hpp>
#include <grpcpp/grpcpp.h>

#include <string>

namespace shardps::testing {

inline void Expect(const grpc::Status& s, grpc::StatusCode code, const std::string& text) {
  INFO(s.error_message());
  REQUIRE(s.error_code() == code);
  REQUIRE_THAT(s.error_message(), Catch::Contains(text));
}

}  // namespace shardps::testing

#endif  // SHARDPS_TESTS_EXPECT_STATUS_H_
