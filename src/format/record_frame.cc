#include "format/record_frame.h"

#include "format/encoding.h"
#include "io/crc32c.h"

namespace sluice {

std::string FrameRecord(std::string_view magic8, std::string_view body, uint32_t version) {
  Encoder e;
  e.PutRaw(magic8);
  e.PutFixed32(version);
  e.PutFixed32(0);  // flags: none defined
  e.PutFixed64(body.size());
  e.PutRaw(body);
  e.PutFixed32(Crc32c(e.buffer().data(), e.buffer().size()));
  return std::move(e.buffer());
}

Result<std::string_view> UnframeRecord(std::string_view bytes, std::string_view magic8,
                                       const std::string& what) {
  uint32_t version = 0;
  return UnframeRecord(bytes, magic8, what, kFormatVersion, &version);
}

Result<std::string_view> UnframeRecord(std::string_view bytes, std::string_view magic8,
                                       const std::string& what, uint32_t max_version,
                                       uint32_t* version_out) {
  if (bytes.size() < kFrameOverhead) {
    return Status::Corruption(what + ": " + std::to_string(bytes.size()) +
                              " bytes is shorter than any record");
  }
  if (bytes.substr(0, 8) != magic8) return Status::Corruption(what + ": bad magic");
  Decoder d(bytes.substr(8), what);
  uint32_t version, flags;
  uint64_t body_len;
  RETURN_IF_ERROR(d.Fixed32(&version));
  RETURN_IF_ERROR(d.Fixed32(&flags));
  RETURN_IF_ERROR(d.Fixed64(&body_len));
  if (body_len != bytes.size() - kFrameOverhead) {
    return Status::Corruption(what + ": body length " + std::to_string(body_len) +
                              " does not match record size " + std::to_string(bytes.size()));
  }
  uint32_t stored_crc = 0;
  Decoder tail(bytes.substr(bytes.size() - 4), what);
  RETURN_IF_ERROR(tail.Fixed32(&stored_crc));
  if (Crc32c(bytes.data(), bytes.size() - 4) != stored_crc) {
    return Status::Corruption(what + ": checksum mismatch");
  }
  // The version is checked after the crc so that a flipped version byte
  // reads as corruption, not as "written by a newer sluice".
  if (version == 0 || version > max_version) {
    return Status::NotSupported(what + ": format version " + std::to_string(version) +
                                " (this sluice reads versions 1.." + std::to_string(max_version) + ")");
  }
  *version_out = version;
  if (flags != 0) return Status::NotSupported(what + ": unknown flags " + std::to_string(flags));
  return bytes.substr(kFrameOverhead - 4, static_cast<size_t>(body_len));
}

}  // namespace sluice
