// Validation of checkpoint names, item keys and steps. Names become object
// name components and keys become restored file paths, so anything that
// could escape a directory or confuse a listing is refused here.
#include <cstdint>
#include <string>
#include <string_view>

#include "sluice/names.h"
#include "format/limits.h"

namespace sluice {
namespace {

// The length of the well-formed UTF-8 sequence starting at s[i] (its code
// point in *cp), or 0 if it is ill-formed: truncated, overlong, a
// surrogate, or past U+10FFFF.
size_t Utf8At(std::string_view s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t n;
  uint32_t v;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    v = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    v = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    v = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xc0) != 0x80) return 0;
    v = (v << 6) | (b(k) & 0x3f);
  }
  if ((n == 3 && v < 0x800) || (n == 4 && (v < 0x10000 || v > 0x10ffff)) || (v >= 0xd800 && v <= 0xdfff)) {
    return 0;
  }
  *cp = v;
  return n;
}

bool IsControl(uint32_t cp) { return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f); }

// At most `max` bytes of `s` for an error message: cut at a character
// boundary, with control characters and ill-formed bytes shown as '?', so the
// message is valid UTF-8 whatever the input.
std::string Shown(std::string_view s, size_t max) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    size_t n = Utf8At(s, i, &cp);
    if (n == 0 || IsControl(cp)) {
      if (out.size() + 1 > max) break;
      out += '?';
      i += n == 0 ? 1 : n;
      continue;
    }
    if (out.size() + n > max) break;
    out.append(s.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace

Status ValidateCheckpointName(std::string_view name) {
  auto bad = [&](const char* why) {
    return Status::InvalidArgument("checkpoint name '" + Shown(name, 64) + "' " + why);
  };
  if (name.empty()) return Status::InvalidArgument("checkpoint name is empty");
  if (name.size() > limits::kMaxNameBytes) return bad("is longer than 255 bytes");
  if (name.find('\0') != std::string_view::npos) return bad("contains a NUL byte");
  // Names are shown (ls, --json, error messages) and typed back: they must
  // be text that round-trips. C1 controls (U+0080-U+009F) are controls too.
  for (size_t i = 0; i < name.size();) {
    uint32_t cp = 0;
    const size_t n = Utf8At(name, i, &cp);
    if (n == 0) return bad("is not valid UTF-8");
    if (IsControl(cp)) return bad("contains a control character");
    i += n;
  }
  if (name.find('/') != std::string_view::npos) return bad("contains '/'");
  if (name == "." || name == "..") return bad("is a reserved directory name");
  if (name.find(".tmp.") != std::string_view::npos) return bad("contains '.tmp.' (reserved)");
  return Status::OK();
}

Status ValidateItemKey(std::string_view key) {
  auto bad = [&](const char* why) {
    return Status::InvalidArgument("item key '" + Shown(key, 128) + "' " + why);
  };
  if (key.empty()) return Status::InvalidArgument("item key is empty");
  if (key.size() > limits::kMaxKeyBytes) return bad("is longer than 4096 bytes");
  if (key.find('\0') != std::string_view::npos) return bad("contains a NUL byte");
  if (key.front() == '/') return bad("is an absolute path");
  size_t start = 0;
  while (start <= key.size()) {
    size_t slash = key.find('/', start);
    std::string_view comp = key.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (comp.empty()) return bad("has an empty path component");
    if (comp == "." || comp == "..") return bad("has a '.' or '..' component");
    if (comp.size() > 255) return bad("has a component longer than 255 bytes");
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return Status::OK();
}

Result<uint64_t> ParseStep(std::string_view text) {
  std::string shown(text.substr(0, 40));
  if (text.empty()) return Status::InvalidArgument("step is empty");
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      return Status::InvalidArgument("step '" + shown + "' is not a non-negative integer");
    }
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return Status::InvalidArgument("step '" + shown + "' is too large");
    v = v * 10 + d;
  }
  return v;
}

Status ValidateItem(std::string_view key, std::string_view metadata) {
  RETURN_IF_ERROR(ValidateItemKey(key));
  if (metadata.size() > limits::kMaxMetadataBytes) {
    return Status::InvalidArgument("item '" + std::string(key) + "': metadata over 16 MiB");
  }
  return Status::OK();
}

std::string CheckpointLabel(std::string_view name, uint64_t step) {
  return "checkpoint " + std::string(name) + "@" + std::to_string(step);
}

}  // namespace sluice
