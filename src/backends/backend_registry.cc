// OpenBackend: picks the driver by URI scheme. A new backend adds one branch.
#include <string>

#include "backends/file/file_backend.h"
#include "backends/file/file_directory.h"
#include "backends/file/multi_dir_backend.h"
#ifdef SLUICE_HAVE_RADOS
#include "backends/rados/rados_backend.h"
#endif
#ifdef SLUICE_HAVE_S3
#include "backends/s3/s3_backend.h"
#endif
#include "sluice/backend.h"

namespace sluice {

Result<std::unique_ptr<Backend>> OpenBackend(const std::string& uri, bool create_if_missing) {
  if (uri.empty()) return Status::InvalidArgument("empty store URI");
  std::string rest = uri;
  std::string scheme = "file";
  size_t sep = uri.find("://");
  if (sep != std::string::npos) {
    scheme = uri.substr(0, sep);
    rest = uri.substr(sep + 3);
  }
  std::string query;
  if (size_t q = rest.find('?'); q != std::string::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (scheme == "file") {
    if (rest.empty()) return Status::InvalidArgument("store URI '" + uri + "' has no path");
    // file://HOST/path names a path on HOST: only this host's own.
    if (sep != std::string::npos && rest.front() != '/') {
      const std::string host = rest.substr(0, rest.find('/'));
      if (host != "localhost") {
        return Status::InvalidArgument("store URI '" + uri + "' names a host ('" + host +
                                       "'): write file:///" + rest + " for the absolute path /" + rest +
                                       ", or a plain path for a relative one");
      }
      rest = rest.substr(host.size());
      if (rest.empty()) return Status::InvalidArgument("store URI '" + uri + "' has no path");
    }
    std::string multi_dir_query;
    ASSIGN_OR_RETURN(FileOptions options, ParseFileQuery(uri, query, IsMultiDirOption, &multi_dir_query));
    // A store over several directories when the URI names more (dirs=) or
    // the directory records that it is one; else one directory.
    ASSIGN_OR_RETURN(bool multi, IsMultiDirStore(rest, multi_dir_query));
    if (multi) return OpenMultiDirFileBackend(uri, rest, multi_dir_query, options, create_if_missing);
    ASSIGN_OR_RETURN(auto directory, OpenFileDirectory(uri, rest, options, create_if_missing));
    return std::unique_ptr<Backend>(std::move(directory));
  }
  if (scheme == "rados") {
#ifdef SLUICE_HAVE_RADOS
    return OpenRadosBackend(uri, rest, query, create_if_missing);
#else
    return Status::NotSupported("store URI '" + uri +
                                "': this sluice was built without RADOS support (needs librados-dev "
                                "and libradospp-dev at build time)");
#endif
  }
  if (scheme == "s3") {
#ifdef SLUICE_HAVE_S3
    return OpenS3Backend(uri, rest, query, create_if_missing);
#else
    return Status::NotSupported("store URI '" + uri.substr(0, uri.find('?')) +
                                "': this sluice was built without S3 support (needs libcurl4-openssl-dev "
                                "and libexpat1-dev at build time)");
#endif
  }
  return Status::InvalidArgument("store URI '" + uri + "': unknown scheme '" + scheme +
                                 "' (supported: file://, rados://, s3://, or a plain path)");
}

}  // namespace sluice
