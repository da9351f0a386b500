// common/moved_servers: where a server that joined at a new address (a
// spare) listens, as processes pass it on and merge it.
#include <catch2/catch.hpp>

#include "common/moved_servers.h"

namespace shardps {
namespace {

TEST_CASE("nothing moved: no text, no address, the job's addresses as they are") {
  MovedServers moved;
  CHECK(moved.Text().empty());
  CHECK_FALSE(moved.AddressOf(1).has_value());
  CHECK(moved.Apply({"a:1", "b:2"}) == std::vector<std::string>{"a:1", "b:2"});
  CHECK(moved.Merge("") == std::optional<std::vector<int>>(std::vector<int>{}));
}

TEST_CASE("a move is passed on as text and merged elsewhere") {
  MovedServers spare_side;
  CHECK(spare_side.Note(1, 5, "10.0.0.9:7000"));
  CHECK(spare_side.Text() == "1=5@10.0.0.9:7000");
  MovedServers worker_side;
  CHECK(worker_side.Merge(spare_side.Text()) == std::optional<std::vector<int>>(std::vector<int>{1}));
  CHECK(worker_side.AddressOf(1) == std::optional<std::string>("10.0.0.9:7000"));
  CHECK(worker_side.Apply({"a:1", "b:2", "c:3"}) == std::vector<std::string>{"a:1", "10.0.0.9:7000", "c:3"});
  // The same text again changes nothing.
  CHECK(worker_side.Merge(spare_side.Text()) == std::optional<std::vector<int>>(std::vector<int>{}));
}

TEST_CASE("the newer join wins, in whatever order the moves arrive") {
  MovedServers in_order, reversed;
  CHECK(in_order.Note(2, 5, "old:1"));
  CHECK(in_order.Note(2, 11, "new:1"));
  CHECK_FALSE(in_order.Note(2, 8, "between:1"));  // older than the one recorded
  CHECK(reversed.Merge("2=11@new:1")->size() == 1);
  CHECK(reversed.Merge("2=5@old:1")->empty());
  CHECK(in_order.AddressOf(2) == reversed.AddressOf(2));
  CHECK(in_order.Text() == reversed.Text());
}

TEST_CASE("a join at the same address is recorded but changes no address") {
  MovedServers moved;
  CHECK(moved.Note(0, 2, "h:1"));
  CHECK_FALSE(moved.Note(0, 5, "h:1"));  // restarted where it was
  CHECK(moved.Text() == "0=5@h:1");
  CHECK(moved.Note(0, 8, "h:2"));
  CHECK(moved.Merge("0=8@h:2;3=2@x:9")->size() == 1);
  CHECK(moved.Text() == "0=8@h:2;3=2@x:9");
}

TEST_CASE("text that does not parse is refused whole; invalid entries are not recorded") {
  MovedServers moved;
  for (const char* bad : {"1", "1=5", "1@5=a:1", "x=5@a:1", "1=x@a:1", "1=4@a:1" /* not a joining generation */,
                          "64=5@a:1", "-1=5@a:1", "1=5@", "1=5@a b:1", "1=5@a:1;", ";1=5@a:1",
                          "1=5@a:1;2=3@b:1", "1=99999999999@a:1"}) {
    INFO(bad);
    CHECK_FALSE(moved.Merge(bad).has_value());
  }
  CHECK(moved.Text().empty());
  CHECK_FALSE(moved.Note(1, 3, "a:1"));  // live, not joining
  CHECK_FALSE(moved.Note(1, 5, std::string(256, 'a')));
  CHECK_FALSE(moved.Note(1, 5, "a;b"));
  CHECK(moved.Text().empty());
  CHECK(moved.IsValid(63, 2, "unix:/tmp/s.sock"));
  CHECK(moved.IsValid(0, 2, "[::1]:7000"));
}

TEST_CASE("only the job's servers move, and the text stays small whatever peers send") {
  MovedServers moved(/*num_servers=*/3);
  CHECK_FALSE(moved.Note(3, 5, "a:1"));
  CHECK_FALSE(moved.Merge("1=5@a:1;3=5@b:1").has_value());  // refused whole
  CHECK(moved.Text().empty());
  MovedServers many;  // 64 servers
  int kept = 0;
  for (int s = 0; s < 64; ++s) kept += many.Note(s, 2, std::string(200, 'a' + s % 26)) ? 1 : 0;
  CHECK(kept > 0);
  CHECK(kept < 64);  // each entry is valid; together they would pass the cap
  CHECK(many.Text().size() <= MovedServers::kMaxTextBytes);
  CHECK_FALSE(moved.Merge(std::string(MovedServers::kMaxTextBytes + 1, '1')).has_value());
}

}  // namespace
}  // namespace shardps
