#include "backends/rados/rados_options.h"

#include <cerrno>
#include <cstdlib>

#include "backends/hedge_state.h"
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
    } else if (key == "hedge_probe") {
      if (val != "on" && val != "off") {
        return Status::InvalidArgument("store URI '" + uri + "': option hedge_probe='" + val + "' (expected on or off)");
      }
      o.hedge_probe = val == "on";
    } else {
      HedgeUriOptions h{o.hedge, o.hedge_extra, o.hedge_floor_ms};
      ASSIGN_OR_RETURN(bool taken, ParseHedgeUriOption(uri, key, val, &h));
      if (!taken) {
        return Status::InvalidArgument("store URI '" + uri + "': unknown option '" + key +
                                       "' (rados stores take conf, id, keyring, qd, "
                                       "connect_timeout_s, op_timeout_s, hedge, hedge_extra, hedge_floor_ms, "
                                       "hedge_probe)");
      }
      o.hedge = h.hedge;
      o.hedge_extra = h.extra;
      o.hedge_floor_ms = h.floor_ms;
    }
    return Status::OK();
  }));
  return o;
}

}  // namespace sluice
