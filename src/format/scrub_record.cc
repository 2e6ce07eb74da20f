#include "format/scrub_record.h"

#include "format/encoding.h"
#include "format/limits.h"
#include "format/record_frame.h"

namespace sluice {
namespace {
constexpr size_t kMaxDetailBytes = 1024;
constexpr size_t kMaxScopeBytes = 64 * 1024;
}  // namespace

std::string ScrubProgressObject() { return "scrub/progress"; }
std::string ScrubStatusObject() { return "scrub/status"; }
std::string ScrubLockObject() { return "scrub/lock"; }
std::string ScrubStagingObject(std::string_view object, std::string_view writer) {
  return std::string(object) + "." + std::string(writer) + ".new";
}

std::string EncodeScrubRecord(const ScrubRecord& record) {
  Encoder e;
  e.PutBytes(record.pass.substr(0, 64));
  e.PutBytes(record.scope.substr(0, kMaxScopeBytes));
  e.PutVarint(static_cast<uint64_t>(record.started_unix_ms));
  e.PutVarint(record.entries.size());
  for (const auto& x : record.entries) {
    e.PutBytes(x.name);
    e.PutVarint(x.step);
    e.PutBytes(x.state.substr(0, 32));
    e.PutVarint(static_cast<uint64_t>(x.unix_ms));
    e.PutBytes(x.detail.substr(0, kMaxDetailBytes));
  }
  return FrameRecord(kScrubRecordMagic, e.buffer());
}

Result<ScrubRecord> DecodeScrubRecord(std::string_view bytes, const std::string& what) {
  ASSIGN_OR_RETURN(std::string_view body, UnframeRecord(bytes, kScrubRecordMagic, what));
  Decoder d(body, what);
  ScrubRecord r;
  uint64_t v, n;
  RETURN_IF_ERROR(d.Bytes(&r.pass, 64, "pass"));
  RETURN_IF_ERROR(d.Bytes(&r.scope, kMaxScopeBytes, "scope"));
  RETURN_IF_ERROR(d.Varint(&v));
  r.started_unix_ms = static_cast<int64_t>(v);
  // name (>= 2 bytes) + step + state + time + detail: at least 6 bytes each.
  RETURN_IF_ERROR(d.Count(&n, 6, "entry"));
  r.entries.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    ScrubEntry x;
    RETURN_IF_ERROR(d.Bytes(&x.name, limits::kMaxNameBytes, "name"));
    RETURN_IF_ERROR(d.Varint(&x.step));
    RETURN_IF_ERROR(d.Bytes(&x.state, 32, "state"));
    RETURN_IF_ERROR(d.Varint(&v));
    x.unix_ms = static_cast<int64_t>(v);
    RETURN_IF_ERROR(d.Bytes(&x.detail, kMaxDetailBytes, "detail"));
    r.entries.push_back(std::move(x));
  }
  if (d.remaining() != 0) return d.Bad("trailing bytes");
  return r;
}

}  // namespace sluice
