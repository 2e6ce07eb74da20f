// The objects of the rados:// backend: the shared cluster handle, the
// asynchronous reads and writes of one object (librados aio), and the
// extensions RADOS offers (sluice/backend.h): the messenger's crc reused as
// the chunk checksum, and received buffers lent instead of copied.
// Internal to src/backends/rados.
#ifndef SLUICE_BACKENDS_RADOS_RADOS_OBJECT_H_
#define SLUICE_BACKENDS_RADOS_RADOS_OBJECT_H_

#include <rados/librados.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "sluice/backend.h"

namespace sluice {

// The one place a librados return code (-errno) becomes a Status. Connection
// trouble is Unavailable so that callers know a retry may succeed.
Status RadosError(int ret, const std::string& what);

// The cluster handle and pool context, shared by the backend and every
// object it opened, so that neither may outlive the other's handle.
struct Cluster {
  librados::Rados rados;
  librados::IoCtx io;
  bool connected = false;
  // Waits out operations still in flight that no object waits for (a
  // hedge's loser), so that librados never completes into a closed handle.
  std::function<void()> before_shutdown;
  ~Cluster() {
    if (before_shutdown) before_shutdown();
    io.close();
    if (connected) rados.shutdown();
  }
};

// Smaller pieces are checksummed without priming the messenger's crc cache:
// a buffer of its own per piece would cost more than the hash saves.
constexpr size_t kMinSummedPieceBytes = 64 << 10;

// A writable of this backend (plain or hedged) that computes the chunk
// checksum of bytes it is about to send through the messenger's crc cache
// (TransportChecksum::ChecksumForWrite).
class RadosChecksummingWritable : public WritableObject {
 public:
  virtual uint32_t ChecksumForWrite(uint32_t crc, const void* data, size_t len) = 0;
};

// An object being written / read through `cluster`, as `oid` in its pool
// (`name` is the backend's name, for messages), `depth` operations in flight.
std::unique_ptr<WritableObject> NewRadosWritable(std::shared_ptr<Cluster> cluster, std::string oid,
                                                 std::string name, size_t depth);
std::unique_ptr<ReadableObject> NewRadosReadable(std::shared_ptr<Cluster> cluster, std::string oid,
                                                 std::string name, size_t depth, uint64_t size);

// The allocation hint of a data object (`object_bytes` expected), the one
// rados bench gives: BlueStore then sizes its blobs and checksum blocks for
// large sequential writes of the pipeline's io size.
void HintDataObject(librados::ObjectWriteOperation* op, uint64_t object_bytes);

// The extensions, for BackendCaps. An object that is not one of these (a
// decorator's) gets the plain behaviour.
const TransportChecksum* RadosTransportChecksumExtension();
const LentReadBuffers* RadosLentReadBuffersExtension();

}  // namespace sluice

#endif  // SLUICE_BACKENDS_RADOS_RADOS_OBJECT_H_
