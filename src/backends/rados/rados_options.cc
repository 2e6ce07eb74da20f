#include "backends/rados/rados_options.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "backends/hedge_state.h"
#include "backends/rados/rados_object.h"
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

namespace {

// How many OSDs are asked for their osd_max_object_size at open.
constexpr int kMaxOsdsAsked = 16;

// The first unsigned integer in a command's output ("134217728\n",
// "[0,1,2]"), from `pos`; advances `pos` past it.
bool NextNumber(const std::string& s, size_t* pos, uint64_t* out) {
  size_t i = s.find_first_of("0123456789", *pos);
  if (i == std::string::npos) return false;
  uint64_t v = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) v = v * 10 + static_cast<uint64_t>(s[i] - '0');
  *pos = i;
  *out = v;
  return true;
}

// osd_max_object_size as the OSDs run it. The value an OSD runs with can
// come from its local ceph.conf, which the monitors' config database does
// not see, so ask the mgr for the running value of (up to kMaxOsdsAsked)
// OSDs and take the smallest: any of them may be a primary. Where no OSD
// answers (no mgr, or a key without mgr caps), the monitors' value for
// "osd" is the best there is.
}  // namespace

Result<uint64_t> ReadMaxObjectBytes(librados::Rados& rados, const std::string& what) {
  librados::bufferlist in, out;
  std::string errs;
  int ret = rados.mon_command(R"({"prefix": "osd ls", "format": "json"})", in, &out, &errs);
  if (ret < 0) return RadosError(ret, what + ": list OSDs" + (errs.empty() ? "" : " (" + errs + ")"));
  std::string ids = out.to_str();
  uint64_t smallest = 0;
  int asked = 0;
  size_t pos = 0;
  uint64_t id = 0;
  while (asked < kMaxOsdsAsked && NextNumber(ids, &pos, &id)) {
    ++asked;
    librados::bufferlist reply;
    std::string outs;
    std::string cmd = R"({"prefix": "config show", "who": "osd.)" + std::to_string(id) +
                      R"(", "key": "osd_max_object_size"})";
    ret = rados.mgr_command(cmd, in, &reply, &outs);
    // No mgr, or no mgr caps: asking the other OSDs would only wait again.
    if (ret == -ETIMEDOUT || ret == -EACCES || ret == -EPERM) break;
    if (ret < 0) continue;  // a down OSD has no state
    size_t p = 0;
    uint64_t v = 0;
    if (NextNumber(reply.to_str(), &p, &v) && v > 0 && (smallest == 0 || v < smallest)) smallest = v;
  }
  if (smallest > 0) return smallest;
  librados::bufferlist reply;
  std::string outs;
  ret = rados.mon_command(R"({"prefix": "config get", "who": "osd", "key": "osd_max_object_size"})",
                          in, &reply, &outs);
  if (ret < 0) {
    return RadosError(ret, what + ": read osd_max_object_size from the cluster" +
                               (outs.empty() ? "" : " (" + outs + ")"));
  }
  pos = 0;
  if (!NextNumber(reply.to_str(), &pos, &smallest) || smallest == 0) {
    return Status::IOError(what + ": unreadable osd_max_object_size '" + reply.to_str() + "'");
  }
  return smallest;
}

std::string ConfGet(librados::Rados& rados, const char* option) {
  std::string v;
  if (rados.conf_get(option, v) < 0) return "?";
  return v;
}

}  // namespace sluice
