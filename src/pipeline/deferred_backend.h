// A tier that could not be opened, standing in for it so that work over
// several tiers (a pipeline's saves and drains, scrub) goes on with the
// others: every call retries the open of its URI, at most once a second,
// and fails as Unavailable until it succeeds; then it forwards to the
// opened backend. Until then its caps are the conservative ones of the
// smallest backend, so data laid out meanwhile fits any tier.
//
// Thread-safety: as any Backend.
#ifndef SLUICE_PIPELINE_DEFERRED_BACKEND_H_
#define SLUICE_PIPELINE_DEFERRED_BACKEND_H_

#include <memory>
#include <string>

#include "sluice/backend.h"

namespace sluice {

// `first_error`: why the open failed, what every call says until it opens.
std::unique_ptr<Backend> NewDeferredBackend(std::string uri, bool create, Status first_error);

}  // namespace sluice

#endif  // SLUICE_PIPELINE_DEFERRED_BACKEND_H_
