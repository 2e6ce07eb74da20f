// --metrics-listen for the long-running commands (save --async, drain
// --watch, scrub, bench): the process's metrics served to Prometheus while
// the command runs.
#ifndef SLUICE_TOOLS_SLUICE_SERVE_METRICS_H_
#define SLUICE_TOOLS_SLUICE_SERVE_METRICS_H_

#include <memory>

#include "flags.h"
#include "sluice/metrics_server.h"

namespace sluice::cli {

FlagSpec MetricsListenFlagSpec();

// Starts serving when --metrics-listen was given (null when not), and says
// where on stderr. A bad address is InvalidArgument (exit 2); one that
// cannot be listened on (in use, not this host's) is Unavailable (exit 1).
Result<std::unique_ptr<MetricsServer>> ServeMetricsIfAsked(const Flags& flags);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_SLUICE_SERVE_METRICS_H_
