#include "client/job_alignment.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardps {
namespace {

JoinPlan Fail(absl::Status error) {
  JoinPlan plan;
  plan.action = JoinPlan::Action::kFail;
  plan.error = std::move(error);
  return plan;
}

// The steps every server holds a checkpoint of, ascending.
std::vector<int64_t> CommonSteps(const std::vector<ServerJoinView>& servers) {
  std::vector<int64_t> common = servers.front().checkpoint_steps;
  for (const ServerJoinView& s : servers) {
    std::vector<int64_t> both;
    std::set_intersection(common.begin(), common.end(), s.checkpoint_steps.begin(), s.checkpoint_steps.end(),
                          std::back_inserter(both));
    common = std::move(both);
  }
  return common;
}

std::string StepsOfEach(const std::vector<ServerJoinView>& servers) {
  std::vector<std::string> parts;
  for (const ServerJoinView& s : servers) {
    parts.push_back(absl::StrCat("server ", s.server_id, " has [", absl::StrJoin(s.checkpoint_steps, ", "), "]"));
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace

JoinPlan PlanJoin(Mode mode, const std::vector<ServerJoinView>& servers) {
  if (servers.empty()) return Fail(absl::InvalidArgumentError("no servers"));
  const auto trained = std::find_if(servers.begin(), servers.end(), [](const auto& s) { return s.trained; });
  for (const ServerJoinView& s : servers) {
    if (!s.initialized && trained != servers.end()) {
      // The answers are taken one by one: this one may predate the job's
      // init reaching that server (a registration answered early, another
      // late), so look again; the caller fails with `error` if it stays.
      JoinPlan again;
      again.action = JoinPlan::Action::kRegisterAgain;
      again.error = absl::FailedPreconditionError(absl::StrCat(
          "server ", s.server_id, " holds no weights while server ", trained->server_id,
          " has trained: its shard is lost (it restarted without a checkpoint; give every server a "
          "--checkpoint_dir)"));
      return again;
    }
  }
  const auto furthest = std::max_element(servers.begin(), servers.end(), [](const auto& a, const auto& b) {
    return a.current_step < b.current_step;
  });
  JoinPlan plan;
  if (mode != Mode::kAsync) {
    for (const ServerJoinView& s : servers) {
      if (s.awaiting_rewind) plan.restarted.emplace_back(s.server_id, s.incarnation);
    }
  }
  if (!plan.restarted.empty()) {
    const std::vector<int64_t> common = CommonSteps(servers);
    if (common.empty()) {
      return Fail(absl::FailedPreconditionError(absl::StrCat(
          "a server restarted, but no step has a checkpoint on every server: ", StepsOfEach(servers))));
    }
    plan.action = JoinPlan::Action::kRewind;
    plan.step = common.back();
    for (const ServerJoinView& s : servers) plan.timeline = std::max(plan.timeline, s.timeline + 1);
    return plan;
  }
  for (const ServerJoinView& s : servers) {
    if (s.timeline != servers.front().timeline) {
      plan.action = JoinPlan::Action::kRegisterAgain;
      return plan;
    }
  }
  plan.timeline = servers.front().timeline;
  plan.step = furthest->current_step;
  for (const ServerJoinView& s : servers) {
    if (s.current_step != plan.step) plan.behind.push_back(s.server_id);
  }
  return plan;
}

}  // namespace shardps
