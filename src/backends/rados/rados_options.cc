#include "backends/rados/rados_options.h"

#include <cerrno>
#include <cstdlib>

#include "backends/uri_query.h"

namespace sluice {

Result<RadosOptions> ParseUri(const std::string& uri, const std::string& location,
                              const std::string& query) {
  RadosOptions o;
  size_t slash = location.find('/');
  o.pool = location.substr(0, slash);
  if (o.pool.empty()) {
    return Status::InvalidArgument("store URI '" + uri + "' has no pool (rados://POOL/PREFIX)");
  }
  if (slash != std::string::npos) o.prefix = location.substr(slash + 1);
  while (!o.prefix.empty() && o.prefix.back() == '/') o.prefix.pop_back();
  if (!o.prefix.empty() && (o.prefix.front() == '/' || o.prefix.find("//") != std::string::npos)) {
    return Status::InvalidArgument("store URI '" + uri + "': prefix '" + o.prefix +
                                   "' has an empty component");
  }
  RETURN_IF_ERROR(ForEachQueryOption(query, [&](const std::string& key, const std::string& val) -> Status {
    auto need_value = [&]() -> Status {
      if (val.empty()) {
        return Status::InvalidArgument("store URI '" + uri + "': option " + key + " needs a value");
      }
      return Status::OK();
    };
    if (key == "conf") {
      RETURN_IF_ERROR(need_value());
      o.conf = val;
    } else if (key == "id") {
      RETURN_IF_ERROR(need_value());
      o.id = val.rfind("client.", 0) == 0 ? val.substr(7) : val;
      if (o.id.empty()) return Status::InvalidArgument("store URI '" + uri + "': empty id");
    } else if (key == "keyring") {
      RETURN_IF_ERROR(need_value());
      o.keyring = val;
    } else if (key == "qd") {
      ASSIGN_OR_RETURN(o.queue_depth, ParseUnsignedOption(uri, key, val, 1, 4096));
    } else if (key == "connect_timeout_s") {
      ASSIGN_OR_RETURN(o.connect_timeout_s, ParseUnsignedOption(uri, key, val, 1, 3600));
    } else if (key == "op_timeout_s") {
      ASSIGN_OR_RETURN(o.op_timeout_s, ParseUnsignedOption(uri, key, val, 0, 86400));
    } else if (key == "hedge") {
      if (val != "on" && val != "off") {
        return Status::InvalidArgument("store URI '" + uri + "': option hedge='" + val + "' (expected on or off)");
      }
      o.hedge = val == "on";
    } else if (key == "hedge_extra") {
      char* end = nullptr;
      errno = 0;
      double v = std::strtod(val.c_str(), &end);
      if (val.empty() || *end != '\0' || errno != 0 || !(v >= 0 && v <= 4)) {
        return Status::InvalidArgument("store URI '" + uri + "': option hedge_extra='" + val +
                                       "' (expected a fraction of the bytes written, 0..4, e.g. 0.25)");
      }
      o.hedge_extra = v;
    } else if (key == "hedge_floor_ms") {
      ASSIGN_OR_RETURN(o.hedge_floor_ms, ParseUnsignedOption(uri, key, val, 1, 600'000));
    } else {
      return Status::InvalidArgument("store URI '" + uri + "': unknown option '" + key +
                                     "' (rados stores take conf, id, keyring, qd, "
                                     "connect_timeout_s, op_timeout_s, hedge, hedge_extra, hedge_floor_ms)");
    }
    return Status::OK();
  }));
  return o;
}

}  // namespace sluice
