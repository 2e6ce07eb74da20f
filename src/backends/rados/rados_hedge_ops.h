// The plumbing of hedged RADOS writes (rados_hedge.cc): where completions
// of one object's operations arrive, and the token that marks a copy.
//
// Internal to src/backends/rados.
#ifndef SLUICE_BACKENDS_RADOS_RADOS_HEDGE_OPS_H_
#define SLUICE_BACKENDS_RADOS_RADOS_HEDGE_OPS_H_

#include <rados/librados.hpp>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/hedge_state.h"
#include "io/aligned_buffer.h"

namespace sluice::rados_hedge {

using Clock = HedgeState::Clock;

// A random token (16 hex digits) that marks one copy's object.
std::string NewCopyToken();

// Where completions of one object's operations arrive (librados calls
// OnComplete on its finisher thread). Shared with every operation, so that
// an object that stops waiting (a loser, an abandoned object) leaves its
// operations to finish here: OnComplete then releases them itself.
struct Inbox;
struct Op {
  std::shared_ptr<Inbox> inbox;
  int copy = 0;
  int piece = -1;  // -1: the removal of a losing copy
  Clock::time_point start;
  Clock::time_point finished;  // when librados completed it, not when it was reaped
  librados::AioCompletion* completion = nullptr;
  // The copies its bytes are in: kept until it completes, also after the
  // object stopped waiting for it.
  std::vector<std::shared_ptr<AlignedBuffer>> keep;
};
struct Inbox {
  explicit Inbox(std::shared_ptr<HedgeState> s) : state(std::move(s)) {}
  std::shared_ptr<HedgeState> state;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Op*> done;    // GUARDED_BY(mu)
  bool abandoned = false;  // GUARDED_BY(mu)
};

// Releases a completed operation (its completion, its bytes) and counts it
// ended.
void ReleaseOp(Op* op);
// librados's completion callback: `arg` is the Op.
void OnComplete(librados::completion_t, void* arg);

}  // namespace sluice::rados_hedge

#endif  // SLUICE_BACKENDS_RADOS_RADOS_HEDGE_OPS_H_
