// Validation of checkpoint names, item keys and steps. Names become object
// name components and keys become restored file paths, so anything that
// could escape a directory or confuse a listing is refused here.
#include <string>
#include <string_view>

#include "sluice/names.h"
#include "format/limits.h"

namespace sluice {
namespace {

bool HasControl(std::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

}  // namespace

Status ValidateCheckpointName(std::string_view name) {
  auto bad = [&](const char* why) {
    std::string shown(name.substr(0, 64));
    for (char& c : shown) if (static_cast<unsigned char>(c) < 0x20) c = '?';
    return Status::InvalidArgument("checkpoint name '" + shown + "' " + why);
  };
  if (name.empty()) return Status::InvalidArgument("checkpoint name is empty");
  if (name.size() > limits::kMaxNameBytes) return bad("is longer than 255 bytes");
  if (name.find('\0') != std::string_view::npos) return bad("contains a NUL byte");
  if (HasControl(name)) return bad("contains a control character");
  if (name.find('/') != std::string_view::npos) return bad("contains '/'");
  if (name == "." || name == "..") return bad("is a reserved directory name");
  if (name.find(".tmp.") != std::string_view::npos) return bad("contains '.tmp.' (reserved)");
  return Status::OK();
}

Status ValidateItemKey(std::string_view key) {
  auto bad = [&](const char* why) {
    std::string shown(key.substr(0, 128));
    for (char& c : shown) if (static_cast<unsigned char>(c) < 0x20) c = '?';
    return Status::InvalidArgument("item key '" + shown + "' " + why);
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
