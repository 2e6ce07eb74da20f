#include "serve_metrics.h"

#include <algorithm>
#include <cstdio>

#include "sluice/pipeline.h"
#include "store_flags.h"

namespace sluice::cli {

FlagSpec MetricsListenFlagSpec() {
  return {"metrics-listen", "[HOST:]PORT",
          "serve Prometheus metrics at http://HOST:PORT/metrics while this runs\n"
          "                            (HOST defaults to 127.0.0.1; 0.0.0.0 for every interface)"};
}

Result<std::unique_ptr<MetricsServer>> ServeMetricsIfAsked(const Flags& flags) {
  auto listen = flags.Get("metrics-listen");
  if (!listen) return std::unique_ptr<MetricsServer>();
  // Every family at zero from the first scrape on, before the pipeline
  // opens (a RADOS tier may take seconds) and before its first save.
  auto tiers = TierUrisFromFlags(flags);
  DeclarePipelineMetrics(tiers.ok() ? std::max<size_t>(tiers->size(), 1) : 1);
  auto server = MetricsServer::Start(*listen, DefaultMetrics());
  if (!server.ok()) return server.status().WithContext("--metrics-listen");
  std::fprintf(stderr, "sluice: serving metrics at %s\n", (*server)->url().c_str());
  return server;
}

}  // namespace sluice::cli
