// async and ssp: how a push's learning rate relates to a step's, for dense
// keys (server/optimizer.h) and rows (server/sparse/) alike.
#ifndef SHARDPS_SERVER_ASYNC_LR_SCALING_H_
#define SHARDPS_SERVER_ASYNC_LR_SCALING_H_

namespace shardps {

// async and ssp: how a push's learning rate relates to a step's.
enum class AsyncLrScaling {
  kWorkers,  // a push is 1/num_workers of a step (server/optimizer.h)
  kNone,     // every push is a full step (before this option existed)
  // kNone for AdaGrad (dense --optimizer=adagrad; rows adagrad and
  // rowwise_adagrad), kWorkers for the others: AdaGrad divides by the root
  // of its summed squares, so lr / N with squares / N is lr / sqrt(N), a
  // cut that sync has not (ResolveAsyncLrScaling).
  kAuto,
};
// What kAuto means for an optimizer; the others stand as they are.
inline AsyncLrScaling ResolveAsyncLrScaling(AsyncLrScaling s, bool adagrad) {
  if (s != AsyncLrScaling::kAuto) return s;
  return adagrad ? AsyncLrScaling::kNone : AsyncLrScaling::kWorkers;
}

}  // namespace shardps

#endif  // SHARDPS_SERVER_ASYNC_LR_SCALING_H_
