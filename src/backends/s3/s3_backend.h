// S3Backend: objects in an S3-compatible object store (AWS S3, Ceph RGW,
// MinIO), through libcurl (s3_http.h).
//
//   s3://BUCKET/PREFIX?endpoint=URL&region=R&profile=P&addressing=path|virtual&...
//
// Object `name` is the key "PREFIX/name" in BUCKET. Data objects are
// multipart uploads, part after part as their writes arrive, several parts
// in flight, and appear whole at Finish (s3_objects.h); reads are ranged
// GETs. PublishIfAbsent is a PUT with `If-None-Match: *`: the server stores
// the record only if no object has the name, so of two publishers exactly
// one wins, and a reader sees the whole record or none. Whether the server
// honours the condition is probed before the first publish (two conditional
// PUTs of one probe key; opening only checks the bucket and the keys with a
// listing); a server that ignores it is refused unless the URI says
// conditional=unsafe. Replace is a server-side copy then a delete
// (a copy replaces the target whole, as any PUT does), so the largest
// object is 5 GiB, CopyObject's limit. Remove is a HEAD then a DELETE
// (DELETE answers the same for a missing key). List is ListObjectsV2,
// page by page; it assumes what AWS S3 has guaranteed since December 2020
// and RGW and MinIO always gave: an object listed and read right after it
// was written (strong read-after-write consistency). ReclaimLeftovers
// aborts multipart uploads under the prefix older than the given age (a
// writer killed mid-upload leaves one, whose parts the server keeps).
//
// Credentials come from the environment or the AWS profile files
// (s3_config.h), never from the URI.
//
// URI query options:
//   endpoint=URL        http(s)://HOST[:PORT] (default: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL,
//                       the profile's endpoint_url, else AWS's https://s3.REGION.amazonaws.com)
//   region=R            the SigV4 signing region (default: $AWS_REGION, $AWS_DEFAULT_REGION,
//                       the profile's region, else us-east-1)
//   profile=P           the profile of ~/.aws/credentials and ~/.aws/config (default: $AWS_PROFILE;
//                       naming one skips the AWS_ACCESS_KEY_ID variables)
//   addressing=path|virtual   ENDPOINT/BUCKET/KEY or BUCKET.HOST/KEY (default: path with an
//                       endpoint, virtual on AWS)
//   part_mib=N          multipart part size, 5..5120 MiB (default 32)
//   qd=N                writes or reads in flight per object, 1..1024 (default 64)
//   connections=N       HTTP connections to the endpoint at most, 1..1024 (default 64)
//   retries=N           tries after the first for 5xx, SlowDown and dropped connections, 0..20 (default 6)
//   timeout_s=S         a request that moves no byte for S seconds fails (default 60)
//   conditional=require|unsafe   refuse a server that ignores If-None-Match (default require)
//
// Thread-safety: as Backend.
#ifndef SLUICE_BACKENDS_S3_S3_BACKEND_H_
#define SLUICE_BACKENDS_S3_S3_BACKEND_H_

#include <memory>
#include <string>

#include "sluice/backend.h"

namespace sluice {

// `location` is the URI between "s3://" and '?' ("BUCKET/PREFIX"), `query`
// the query string (no '?'). The bucket must exist (NotFound otherwise,
// saying so): `create_if_missing` creates nothing, since a bucket is the
// object store administrator's to make.
Result<std::unique_ptr<Backend>> OpenS3Backend(const std::string& uri, const std::string& location,
                                               const std::string& query, bool create_if_missing);

}  // namespace sluice

#endif  // SLUICE_BACKENDS_S3_S3_BACKEND_H_
