// SIGTERM and SIGINT for a daemon's main(): constructed first thing in
// main(), before any other thread starts, it blocks both signals in every
// thread and waits for them on a thread of its own, so a signal at any
// moment of start-up (a slow checkpoint restore included) is seen and can
// end the process cleanly instead of killing it.
#ifndef SHARDPS_COMMON_SHUTDOWN_SIGNAL_H_
#define SHARDPS_COMMON_SHUTDOWN_SIGNAL_H_

#include <signal.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"

namespace shardps {

class ShutdownSignal {
 public:
  ShutdownSignal() {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    std::thread([this, signals] {
      int number = 0;
      sigwait(&signals, &number);
      signal_ = number;
      Notify();
    }).detach();  // lives until the process ends, blocked in sigwait when no signal comes
  }
  ShutdownSignal(const ShutdownSignal&) = delete;
  ShutdownSignal& operator=(const ShutdownSignal&) = delete;

  bool received() const { return received_.HasBeenNotified(); }
  // Asks for the same stop as a signal (an admin's stop); Wait() returns 0.
  void Request() { Notify(); }
  // Blocks until a signal or a Request() comes; returns the signal's number
  // (0 for a Request()).
  int Wait() {
    received_.WaitForNotification();
    return signal_;
  }

 private:
  void Notify() {
    if (!notified_.exchange(true)) received_.Notify();  // the first of a signal and a Request()
  }

  absl::Notification received_;
  std::atomic<bool> notified_{false};
  std::atomic<int> signal_{0};
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_SHUTDOWN_SIGNAL_H_
