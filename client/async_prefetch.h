// The async (and ssp) schedule's pull ahead: the next step's weights are fetched as a
// worker's backward pass begins, into a staging copy of the model, and each
// layer gets its staged values once its own backward no longer reads them.
//
// Why: in async the next forward pass needs its first layers' weights the
// moment backward ends, and backward makes those layers' gradients last.
// Fetched after those pushes (read-your-writes), every early layer travels in
// the gap between two steps, and the forward pass waits for the link; fetched
// while backward runs, nothing is left to travel then. The price: a worker's
// next step uses the servers' latest weights as its backward began, holding
// every other worker's pushes so far but not its own of this step (they
// arrive one step later). DESIGN.md's async promises only "the latest
// weights without waiting". In ssp the fetch is a pull for the next step
// like any other, so it waits until the slowest worker is within the
// staleness bound: the bound holds exactly, only read-your-writes is lost
// (DESIGN.md's ssp does not promise it). Opt-in (ClientOptions::async_prefetch,
// --async_prefetch): the extra staleness costs accuracy (README, "Scaling").
//
// Thread-safe. `fetch` is called outside the lock; the copies and `done`
// callbacks run on the thread that completes the last needed fetch, or on
// the caller's when everything has arrived already.
#ifndef SHARDPS_CLIENT_ASYNC_PREFETCH_H_
#define SHARDPS_CLIENT_ASYNC_PREFETCH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "client/ps_client.h"

namespace shardps {

class AsyncPrefetch {
 public:
  // Pulls `tensors` for `step` and runs `done` once (PsClient::PullAsync).
  using Fetch = std::function<void(int64_t step, std::vector<TensorOut> tensors, PsClient::Done done)>;
  // `elements[t]`: tensor t's number of values.
  AsyncPrefetch(std::vector<int64_t> elements, Fetch fetch);

  // Starts fetching every tensor for `step`, one fetch each in forward
  // order, unless that step's fetches have begun already. A new step drops
  // the staging of the one before (its fetches still in flight finish into
  // it harmlessly).
  void Begin(int64_t step);
  // Copies the staged values of `weights` for `step` into them and runs
  // `done` once every one of them has arrived (now, if they have), with the
  // first error of their fetches. Begins `step` if it has not begun.
  void Deliver(int64_t step, std::vector<TensorOut> weights, PsClient::Done done);
  // Drops the staging of the step begun, so that the next Begin or Deliver
  // fetches afresh even for the same step: a worker registering again may be
  // rewound to the step it was on, and what was staged (or the error a fetch
  // met) belongs to the timeline left behind. Deliveries already waiting on
  // the old staging are still answered by its fetches.
  void Forget();

 private:
  struct Staging;
  // `step`'s staging, its fetches started now if they had not been.
  std::shared_ptr<Staging> StartOrJoin(int64_t step);

  const std::vector<int64_t> elements_;
  const Fetch fetch_;
  absl::Mutex mu_;
  std::shared_ptr<Staging> current_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_CLIENT_ASYNC_PREFETCH_H_
