// A store that could not be opened yet, standing in for it meanwhile.
//
// Thread-safety: thread-safe, as a Backend.
#ifndef SLUICE_PIPELINE_DEFERRED_BACKEND_H_
#define SLUICE_PIPELINE_DEFERRED_BACKEND_H_

#include <memory>
#include <string>

#include "sluice/backend.h"
#include "sluice/status.h"

namespace sluice {

// The backend of `uri`, which could not be opened (`first_error`): every
// call retries the open, at most once a second, and fails as Unavailable
// until it succeeds, then forwards to the opened backend.
std::unique_ptr<Backend> NewDeferredBackend(std::string uri, bool create, Status first_error);

}  // namespace sluice

#endif  // SLUICE_PIPELINE_DEFERRED_BACKEND_H_
