// The objects of the s3:// backend: one being written as a multipart
// upload, and one being read with ranged GETs. Internal to src/backends/s3.
#ifndef SLUICE_BACKENDS_S3_S3_OBJECTS_H_
#define SLUICE_BACKENDS_S3_S3_OBJECTS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "backends/s3/s3_http.h"
#include "sluice/backend.h"

namespace sluice {

// An object written front to back as object `key` (`name` in messages).
// Consecutive writes gather into parts of about config.part_bytes, each
// uploaded (UploadPart) straight from the writers' buffers, several at once;
// a write completes when the part holding it is stored. When the writer
// waits for a completion while no part is in flight (it keeps fewer bytes
// in flight than a part), the gathered writes are copied and complete at
// once, so a writer never waits for bytes it has not given. The object
// appears, whole, at Finish (CompleteMultipartUpload; an object smaller
// than one part is one PUT). Destroyed unfinished, its upload is aborted.
std::unique_ptr<WritableObject> NewS3Writable(std::shared_ptr<S3Http> http, std::string key, std::string name);

// An object read with ranged GETs straight into the reader's buffers,
// config.queue_depth at once.
std::unique_ptr<ReadableObject> NewS3Readable(std::shared_ptr<S3Http> http, std::string key, std::string name,
                                              uint64_t size);

}  // namespace sluice

#endif  // SLUICE_BACKENDS_S3_S3_OBJECTS_H_
