// The configuration of an s3:// store: the URI's options (s3_backend.h lists
// them) and the credentials, found where every S3 tool looks for them.
// Parsed apart from any HTTP so that it has no server to depend on.
//
// Credentials never appear in a URI (an option naming one is refused), and
// nothing here puts them in a message: errors name the file or the variable
// that was wrong, never its value.
//
// Thread-safety: pure functions (they read the environment and files).
#ifndef SLUICE_BACKENDS_S3_S3_CONFIG_H_
#define SLUICE_BACKENDS_S3_S3_CONFIG_H_

#include <cstdint>
#include <string>

#include "sluice/status.h"

namespace sluice {

struct S3Credentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // empty without one
  std::string source;         // where they came from, for messages: "environment", "profile 'x' in FILE"
};

// Whether commit records rely on the server honouring If-None-Match: *.
enum class S3Conditional {
  kRequire,  // probe at open; refuse a server that ignores the condition (default)
  kUnsafe,   // the user accepts last-writer-wins commits (see doc/s3.md)
};

struct S3Config {
  std::string bucket;
  std::string prefix;    // without a trailing '/', may be empty
  std::string endpoint;  // scheme://host[:port], no trailing '/'
  std::string region = "us-east-1";
  std::string profile;   // the profile credentials and region were looked up in
  bool path_style = true;  // endpoint/BUCKET/KEY; false: BUCKET.host/KEY
  uint64_t part_bytes = 32ull << 20;
  unsigned queue_depth = 64;  // writes (or reads) in flight per object: with 4 MiB writes, 8 parts
  unsigned connections = 64;  // HTTP connections to the endpoint at most
  unsigned retries = 6;       // attempts after the first for 5xx, SlowDown and dropped connections
  unsigned timeout_s = 60;    // a request that moves no byte for this long fails
  S3Conditional conditional = S3Conditional::kRequire;
  S3Credentials credentials;
};

// S3's smallest part but the last (5 MiB) and most parts (10,000).
inline constexpr uint64_t kS3MinPartBytes = 5ull << 20;
inline constexpr uint64_t kS3MaxParts = 10000;

// Parses "BUCKET/PREFIX" and `query` of `uri`, then resolves what the URI
// leaves out (region, endpoint) and the credentials from `env` lookups and
// the AWS files (see LoadCredentials). InvalidArgument names the bad part.
Result<S3Config> ParseS3Uri(const std::string& uri, const std::string& location, const std::string& query);

// The credentials for `profile` (empty: $AWS_PROFILE, else "default"):
// $AWS_ACCESS_KEY_ID / $AWS_SECRET_ACCESS_KEY / $AWS_SESSION_TOKEN when no
// profile was named in the URI, else the profile's aws_access_key_id /
// aws_secret_access_key / aws_session_token in $AWS_SHARED_CREDENTIALS_FILE
// (~/.aws/credentials), else in $AWS_CONFIG_FILE (~/.aws/config, section
// "[profile NAME]"). NotFound says where it looked.
Result<S3Credentials> LoadCredentials(const std::string& profile, bool profile_from_uri);

// A value of the INI file `path` ("[section]" then "key = value" lines);
// empty when the file, the section or the key is missing.
std::string IniValue(const std::string& path, const std::string& section, const std::string& key);

// S3's URI encoding (RFC 3986 unreserved characters kept, everything else
// %XX uppercase); '/' kept when `keep_slash`.
std::string S3Encode(const std::string& s, bool keep_slash);

}  // namespace sluice

#endif  // SLUICE_BACKENDS_S3_S3_CONFIG_H_
