#include "sluice/status.h"

#include <cerrno>
#include <cstring>

namespace sluice {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kAlreadyExists: return "AlreadyExists";
    case StatusCode::kCorruption: return "Corruption";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kIOError: return "IOError";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kNotSupported: return "NotSupported";
    case StatusCode::kNoSpace: return "NoSpace";
  }
  return "Unknown";
}

Status Status::FromErrno(int err, std::string_view what) {
  std::string msg(what);
  msg += ": ";
  msg += std::strerror(err);
  switch (err) {
    case ENOENT: return NotFound(std::move(msg));
    case EEXIST: return AlreadyExists(std::move(msg));
    case ENOSPC:
    case EDQUOT: return NoSpace(std::move(msg));
    case EINVAL: return InvalidArgument(std::move(msg));
    case EOPNOTSUPP:
    case ENOSYS: return NotSupported(std::move(msg));
    case EAGAIN:
    case ETIMEDOUT:
    case ECONNREFUSED: return Unavailable(std::move(msg));
    default: return IOError(std::move(msg));
  }
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, std::string(context) + ": " + message_);
}

}  // namespace sluice
