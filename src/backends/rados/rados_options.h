// The options of a rados:// store URI (rados_backend.h lists them), parsed
// apart from librados so that the parsing has no cluster to depend on.
//
// Thread-safety: pure functions.
#ifndef SLUICE_BACKENDS_RADOS_RADOS_OPTIONS_H_
#define SLUICE_BACKENDS_RADOS_RADOS_OPTIONS_H_

#include <rados/librados.hpp>

#include <string>

#include "sluice/status.h"

namespace sluice {

struct RadosOptions {
  std::string pool;
  std::string prefix;  // without trailing '/', may be empty
  std::string conf;
  std::string id = "admin";
  std::string keyring;
  unsigned queue_depth = 16;
  unsigned connect_timeout_s = 15;
  // Per OSD operation. It must outlast what a healthy cluster can make an
  // operation wait: a write queued behind qd others on a saturated cluster
  // takes seconds, and one to a PG whose OSD just died waits for the
  // failure to be detected (osd_heartbeat_grace, 20 s) and the PG to peer
  // again, ~25-30 s in all. 60 s keeps a drain running through an OSD
  // failure, and still turns a stuck cluster into an Unavailable error
  // (that the pipeline retries with backoff) instead of a hang. The bound
  // is per operation, so a drain of any length is fine.
  unsigned op_timeout_s = 60;
  // Hedged writes (rados_placement.h): on by default; `hedge_extra` bounds the
  // extra bytes as a fraction of the bytes written, `hedge_floor_ms` is the
  // shortest deadline.
  bool hedge = true;
  double hedge_extra = 0.25;
  unsigned hedge_floor_ms = 100;
  // With hedging on: when the store opens, read from each OSD's placement
  // groups and suspect those that do not answer within hedge_floor_ms, so
  // that the first save under a slow OSD keeps away from it instead of
  // learning it from its own late writes (RadosPlacement::Probe).
  bool hedge_probe = true;
};

// Parses `location` ("POOL/PREFIX") and `query` of `uri`; InvalidArgument
// names the bad part.
Result<RadosOptions> ParseUri(const std::string& uri, const std::string& location,
                              const std::string& query);

// osd_max_object_size as the cluster's OSDs run it (see the .cc); `what`
// names the store in errors.
Result<uint64_t> ReadMaxObjectBytes(librados::Rados& rados, const std::string& what);
// A Ceph configuration option as the client reads it, "?" where unset.
std::string ConfGet(librados::Rados& rados, const char* option);

}  // namespace sluice

#endif  // SLUICE_BACKENDS_RADOS_RADOS_OPTIONS_H_
