// The query part of a store URI ("k=v&k2=v2"), shared by the backends that
// parse their own options from it.
//
// Thread-safety: pure functions.
#ifndef SLUICE_BACKENDS_URI_QUERY_H_
#define SLUICE_BACKENDS_URI_QUERY_H_

#include <cerrno>
#include <cstdlib>
#include <functional>
#include <string>

#include "sluice/status.h"

namespace sluice {

// Calls `option(key, value)` for each non-empty "key=value" of `query` in
// order (value empty when there is no '='); stops at the first error.
inline Status ForEachQueryOption(
    const std::string& query,
    const std::function<Status(const std::string& key, const std::string& value)>& option) {
  size_t pos = 0;
  while (pos < query.size()) {
    size_t amp = query.find('&', pos);
    std::string kv = query.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
    pos = amp == std::string::npos ? query.size() : amp + 1;
    if (kv.empty()) continue;
    size_t eq = kv.find('=');
    RETURN_IF_ERROR(option(kv.substr(0, eq), eq == std::string::npos ? "" : kv.substr(eq + 1)));
  }
  return Status::OK();
}

// `val` as a whole decimal number in lo..hi; InvalidArgument naming the URI
// and the option otherwise.
inline Result<unsigned> ParseUnsignedOption(const std::string& uri, const std::string& key,
                                            const std::string& val, unsigned lo, unsigned hi) {
  char* end = nullptr;
  errno = 0;
  unsigned long v = std::strtoul(val.c_str(), &end, 10);
  if (val.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) {
    return Status::InvalidArgument("store URI '" + uri + "': option " + key + "='" + val +
                                   "' (expected " + std::to_string(lo) + ".." + std::to_string(hi) + ")");
  }
  return static_cast<unsigned>(v);
}

}  // namespace sluice

#endif  // SLUICE_BACKENDS_URI_QUERY_H_
