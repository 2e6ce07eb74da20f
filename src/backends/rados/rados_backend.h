// RadosBackend: objects as Ceph RADOS objects, through librados.
//
//   rados://POOL/PREFIX?conf=PATH&id=CLIENT&keyring=PATH&qd=N
//
// Object `name` is the RADOS object "PREFIX/name" in POOL (just "name" when
// PREFIX is empty). Data objects are written with librados aio_write at
// offsets, up to qd writes in flight per object, and read with aio_read;
// every write the cluster acknowledges is already on all replicas, so
// Finish() only truncates to the final size. PublishIfAbsent is one RADOS
// write operation (exclusive create + write_full), applied atomically by
// the object's primary OSD: of two publishers exactly one wins, and a reader
// sees the whole record or no object. Create is an exclusive create;
// CreateRelocatable (the data objects of a save) may hedge a late object
// into another placement group under a name beside it (rados_hedge.h). The
// largest data object is the cluster's osd_max_object_size, read from the
// cluster at open.
//
// URI query options:
//   conf=PATH             ceph.conf (default: $CEPH_CONF, else Ceph's search path)
//   id=CLIENT             cephx user, "sluice" or "client.sluice" (default admin)
//   keyring=PATH          keyring (default: what the conf says)
//   qd=N                  operations in flight per object, 1..4096 (default 16)
//   connect_timeout_s=S   bound on reaching the monitors and authenticating (default 15)
//   op_timeout_s=S        bound on one OSD operation, 0 = none (default 60; see .cc)
//   hedge=on|off          data objects placed away from slow OSDs, and hedged (default on; rados_placement.h)
//   hedge_extra=F         hedges write at most F x (bytes written + 256 MiB) extra (default 0.25)
//   hedge_floor_ms=MS     no write is late sooner than this (default 100)
//   hedge_probe=on|off    with hedging, probe the OSDs when the store opens and
//                         suspect those that answer late (default on)
//
// Thread-safety: as Backend.
#ifndef SLUICE_BACKENDS_RADOS_RADOS_BACKEND_H_
#define SLUICE_BACKENDS_RADOS_RADOS_BACKEND_H_

#include <memory>
#include <string>

#include "sluice/backend.h"

namespace sluice {

// `location` is the URI between "rados://" and '?' ("POOL/PREFIX");
// `query` the query string (no '?'). The pool must exist: `create_if_missing`
// creates nothing (PREFIX is only a name prefix), and a missing pool is
// NotFound.
Result<std::unique_ptr<Backend>> OpenRadosBackend(const std::string& uri, const std::string& location,
                                                  const std::string& query, bool create_if_missing);

}  // namespace sluice

#endif  // SLUICE_BACKENDS_RADOS_RADOS_BACKEND_H_
