#include "backends/rados/rados_hedge_ops.h"

#include <cstdio>
#include <random>

namespace sluice::rados_hedge {

std::string NewCopyToken() {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^
                                          static_cast<uint64_t>(Clock::now().time_since_epoch().count()));
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

void ReleaseOp(Op* op) {
  std::shared_ptr<HedgeState> state = op->inbox->state;
  op->completion->release();
  delete op;
  state->OpEnded();
}

void OnComplete(librados::completion_t, void* arg) {
  Op* op = static_cast<Op*>(arg);
  op->finished = Clock::now();
  // Held past the unlock: deleting the op may drop the last other reference.
  std::shared_ptr<Inbox> inbox = op->inbox;
  std::unique_lock<std::mutex> lock(inbox->mu);
  if (inbox->abandoned) {
    lock.unlock();
    ReleaseOp(op);
    return;
  }
  inbox->done.push_back(op);
  // Under the lock: the owner cannot abandon the inbox before this returns.
  inbox->cv.notify_one();
}

}  // namespace sluice::rados_hedge
