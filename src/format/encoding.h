// Little-endian fixed-width and LEB128 varint encoding, and a decoder that
// treats its input as untrusted: every read is bounds-checked and reports
// Corruption instead of over-reading; counts are checked against the bytes
// left before anything is allocated.
//
// Thread-safety: none needed (values).
#ifndef SLUICE_FORMAT_ENCODING_H_
#define SLUICE_FORMAT_ENCODING_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice {

class Encoder {
 public:
  void PutFixed32(uint32_t v) { for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>(v >> (8 * i))); }
  void PutFixed64(uint64_t v) { for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>(v >> (8 * i))); }
  void PutVarint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  void PutBytes(std::string_view s) {
    PutVarint(s.size());
    out_.append(s);
  }
  void PutRaw(std::string_view s) { out_.append(s); }
  std::string& buffer() { return out_; }

 private:
  std::string out_;
};

class Decoder {
 public:
  // `what` names the record in error messages ("manifest ckpt/a/.../r0.man").
  Decoder(std::string_view in, std::string what) : in_(in), what_(std::move(what)) {}

  size_t remaining() const { return in_.size() - pos_; }
  size_t position() const { return pos_; }

  Status Fixed32(uint32_t* v) {
    if (remaining() < 4) return Truncated("fixed32");
    uint32_t r = 0;
    for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
    pos_ += 4;
    *v = r;
    return Status::OK();
  }
  Status Fixed64(uint64_t* v) {
    if (remaining() < 8) return Truncated("fixed64");
    uint64_t r = 0;
    for (int i = 0; i < 8; ++i) r |= static_cast<uint64_t>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
    pos_ += 8;
    *v = r;
    return Status::OK();
  }
  Status Varint(uint64_t* v) {
    uint64_t r = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
      if (remaining() < 1) return Truncated("varint");
      uint8_t b = static_cast<uint8_t>(in_[pos_++]);
      if (shift == 63 && b > 1) return Bad("varint overflows 64 bits");
      r |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        *v = r;
        return Status::OK();
      }
    }
    return Bad("varint longer than 10 bytes");
  }
  Status Varint32(uint32_t* v, const char* field) {
    uint64_t r;
    RETURN_IF_ERROR(Varint(&r));
    if (r > UINT32_MAX) return Bad(std::string(field) + " does not fit 32 bits");
    *v = static_cast<uint32_t>(r);
    return Status::OK();
  }
  Status Bytes(std::string* s, size_t max_len, const char* field) {
    uint64_t n;
    RETURN_IF_ERROR(Varint(&n));
    if (n > max_len) return Bad(std::string(field) + " length " + std::to_string(n) + " exceeds " + std::to_string(max_len));
    if (n > remaining()) return Truncated(field);
    s->assign(in_.data() + pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return Status::OK();
  }
  Status Raw(size_t n, std::string_view* s) {
    if (n > remaining()) return Truncated("raw bytes");
    *s = in_.substr(pos_, n);
    pos_ += n;
    return Status::OK();
  }
  // A count of elements each at least `min_element_bytes` long: rejects counts
  // the remaining bytes cannot hold, so garbage never drives an allocation.
  Status Count(uint64_t* n, size_t min_element_bytes, const char* field) {
    RETURN_IF_ERROR(Varint(n));
    if (min_element_bytes > 0 && *n > remaining() / min_element_bytes) {
      return Bad(std::string(field) + " count " + std::to_string(*n) + " exceeds what the record holds");
    }
    return Status::OK();
  }

  Status Bad(const std::string& why) const { return Status::Corruption(what_ + ": " + why); }

 private:
  Status Truncated(const char* field) const {
    return Status::Corruption(what_ + ": truncated at byte " + std::to_string(pos_) + " reading " + field);
  }
  std::string_view in_;
  size_t pos_ = 0;
  std::string what_;
};

}  // namespace sluice

#endif  // SLUICE_FORMAT_ENCODING_H_
