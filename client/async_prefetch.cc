#include "client/async_prefetch.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shardps {

// One step's staging copy and who waits for which of its tensors.
struct AsyncPrefetch::Staging {
  struct Waiter {
    std::vector<TensorOut> weights;
    int missing = 0;
    absl::Status status;
    PsClient::Done done;
  };

  Staging(int64_t s, const std::vector<int64_t>& elements)
      : step(s), arrived(elements.size(), false), status(elements.size()), waiting(elements.size()) {
    for (int64_t n : elements) values.emplace_back(n);
  }

  // Tensor t's fetch finished: finishes every waiter that needed only it.
  void Arrived(uint32_t t, const absl::Status& s) {
    std::vector<std::shared_ptr<Waiter>> ready;
    {
      absl::MutexLock lock(&mu);
      arrived[t] = true;
      status[t] = s;
      for (std::shared_ptr<Waiter>& w : waiting[t]) {
        KeepFirstError(w->status, s);
        if (--w->missing == 0) ready.push_back(std::move(w));
      }
      waiting[t].clear();
    }
    for (std::shared_ptr<Waiter>& w : ready) Finish(*w);
  }

  // Every tensor of `w` has arrived and is no longer written: copy, answer.
  void Finish(Waiter& w) {
    if (w.status.ok()) {
      for (const TensorOut& out : w.weights) std::copy(values[out.tensor].begin(), values[out.tensor].end(), out.values);
    }
    w.done(w.status);
  }

  const int64_t step;
  std::vector<std::vector<float>> values;  // each written once, by its fetch, before `arrived`
  absl::Mutex mu;
  std::vector<bool> arrived ABSL_GUARDED_BY(mu);
  std::vector<absl::Status> status ABSL_GUARDED_BY(mu);
  std::vector<std::vector<std::shared_ptr<Waiter>>> waiting ABSL_GUARDED_BY(mu);  // per tensor
};

AsyncPrefetch::AsyncPrefetch(std::vector<int64_t> elements, Fetch fetch)
    : elements_(std::move(elements)), fetch_(std::move(fetch)) {}

std::shared_ptr<AsyncPrefetch::Staging> AsyncPrefetch::StartOrJoin(int64_t step) {
  std::shared_ptr<Staging> staging;
  {
    absl::MutexLock lock(&mu_);
    if (current_ != nullptr && current_->step == step) return current_;
    current_ = staging = std::make_shared<Staging>(step, elements_);
  }
  for (uint32_t t = 0; t < elements_.size(); ++t) {
    fetch_(step, {TensorOut{t, staging->values[t].data()}},
           [staging, t](absl::Status s) { staging->Arrived(t, s); });
  }
  return staging;
}

void AsyncPrefetch::Begin(int64_t step) { StartOrJoin(step); }

void AsyncPrefetch::Forget() {
  absl::MutexLock lock(&mu_);
  current_ = nullptr;
}

void AsyncPrefetch::Deliver(int64_t step, std::vector<TensorOut> weights, PsClient::Done done) {
  for (const TensorOut& out : weights) {
    if (out.tensor >= elements_.size() || out.values == nullptr) {
      return done(absl::InvalidArgumentError(
          out.values == nullptr ? absl::StrCat("tensor ", out.tensor, ": no buffer to pull into")
                                : absl::StrCat("tensor ", out.tensor, " is not in the layout (", elements_.size(),
                                               " tensors)")));
    }
  }
  std::shared_ptr<Staging> staging = StartOrJoin(step);
  auto waiter = std::make_shared<Staging::Waiter>();
  waiter->weights = std::move(weights);
  waiter->done = std::move(done);
  {
    absl::MutexLock lock(&staging->mu);
    for (const TensorOut& out : waiter->weights) {
      if (staging->arrived[out.tensor]) {
        KeepFirstError(waiter->status, staging->status[out.tensor]);
      } else {
        ++waiter->missing;
        staging->waiting[out.tensor].push_back(waiter);
      }
    }
    if (waiter->missing > 0) return;
  }
  staging->Finish(*waiter);
}

}  // namespace shardps
