// Status and Result<T>: the one error convention of sluice.
//
// Every fallible function returns a Status (no value) or a Result<T> (a value
// or a Status). Both are [[nodiscard]]. A message says what failed on which
// object, then why ("write data/r0-1a2b.dat at 8388608: No space left on
// device"). errno becomes a Status in exactly one helper, Status::FromErrno.
//
// Thread-safety: values; safe to copy and move between threads.
#ifndef SLUICE_STATUS_H_
#define SLUICE_STATUS_H_

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace sluice {

enum class StatusCode {
  kOk = 0,
  kNotFound,
  kAlreadyExists,
  kCorruption,
  kInvalidArgument,
  kIOError,
  kUnavailable,
  kNotSupported,
  kNoSpace,  // ENOSPC/EDQUOT: kept apart from IOError so callers can say "disk full"
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK

  static Status OK() { return Status(); }
  static Status NotFound(std::string msg) { return Status(StatusCode::kNotFound, std::move(msg)); }
  static Status AlreadyExists(std::string msg) { return Status(StatusCode::kAlreadyExists, std::move(msg)); }
  static Status Corruption(std::string msg) { return Status(StatusCode::kCorruption, std::move(msg)); }
  static Status InvalidArgument(std::string msg) { return Status(StatusCode::kInvalidArgument, std::move(msg)); }
  static Status IOError(std::string msg) { return Status(StatusCode::kIOError, std::move(msg)); }
  static Status Unavailable(std::string msg) { return Status(StatusCode::kUnavailable, std::move(msg)); }
  static Status NotSupported(std::string msg) { return Status(StatusCode::kNotSupported, std::move(msg)); }
  static Status NoSpace(std::string msg) { return Status(StatusCode::kNoSpace, std::move(msg)); }

  // Maps an errno value to a code and appends strerror: "<what>: <strerror>".
  static Status FromErrno(int err, std::string_view what);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  bool IsNotFound() const { return code_ == StatusCode::kNotFound; }
  bool IsAlreadyExists() const { return code_ == StatusCode::kAlreadyExists; }
  bool IsCorruption() const { return code_ == StatusCode::kCorruption; }

  // "Corruption: manifest ...: bad magic"
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>"; OK stays OK.
  Status WithContext(std::string_view context) const;

 private:
  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

const char* StatusCodeName(StatusCode code);

// A value of T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "Result constructed from OK status without a value");
    if (status_.ok()) status_ = Status::IOError("internal: Result from OK status");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { assert(ok()); return *value_; }
  const T& value() const& { assert(ok()); return *value_; }
  T&& value() && { assert(ok()); return std::move(*value_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace sluice

#define SLUICE_CONCAT_INNER_(a, b) a##b
#define SLUICE_CONCAT_(a, b) SLUICE_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define RETURN_IF_ERROR(expr)                  \
  do {                                         \
    ::sluice::Status sluice_st_ = (expr);      \
    if (!sluice_st_.ok()) return sluice_st_;   \
  } while (0)

// `lhs = value of expr`, or returns its Status from the enclosing function.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(SLUICE_CONCAT_(sluice_res_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

#endif  // SLUICE_STATUS_H_
