#include "output.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace sluice::cli {

int Fail(const Status& st, bool usage) {
  std::string msg = st.message();
  for (char& c : msg) if (c == '\n') c = ' ';
  std::fprintf(stderr, "sluice: %s\n", msg.c_str());
  return usage ? kExitUsage : kExitError;
}

int FailStoreOpen(const Status& st) {
  return Fail(st, st.code() == StatusCode::kInvalidArgument);
}

bool ParseOrExit(const CommandSpec& spec, int argc, char** argv, Flags* flags, int* exit_code) {
  bool help = false;
  auto parsed = Flags::Parse(spec, argc, argv, 2, &help);
  if (help) {
    std::fputs(HelpText(spec).c_str(), stdout);
    *exit_code = kExitOk;
    return false;
  }
  if (!parsed.ok()) {
    *exit_code = Fail(parsed.status(), true);
    return false;
  }
  *flags = std::move(parsed).value();
  return true;
}

std::string JsonText(const JsonValue& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void PrintJson(const JsonValue& j) { std::printf("%s\n", JsonText(j).c_str()); }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

Status MakeDirs(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    return S_ISDIR(st.st_mode) ? Status::OK() : Status::IOError(dir + " exists and is not a directory");
  }
  size_t slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) RETURN_IF_ERROR(MakeDirs(dir.substr(0, slash)));
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Status::FromErrno(errno, "mkdir " + dir);
  return Status::OK();
}

JsonValue HedgeJson(const HedgeStats& s) {
  return {{"bytes_written", s.bytes_submitted},
          {"extra_bytes", s.extra_bytes},
          {"extra_fraction", s.bytes_submitted > 0 ? static_cast<double>(s.extra_bytes) / s.bytes_submitted : 0.0},
          {"budget", s.budget},
          {"objects_hedged", s.objects_hedged},
          {"hedges_won", s.hedges_won},
          {"hedges_refused", s.hedges_refused},
          {"slow_placements_avoided", s.slow_avoided},
          {"deadline_ms", s.deadline_ms},
          {"suspect_devices", s.suspect_devices},
          {"write_seconds", s.write_seconds}};
}

std::string HumanBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) { v /= 1024; ++u; }
  char buf[32];
  if (u == 0) snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  return buf;
}

std::string HumanRate(double bps) {
  return HumanBytes(static_cast<uint64_t>(bps > 0 ? bps : 0)) + "/s";
}

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double ProcessCpuSeconds() {
  double total = 0;
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage ru{};
    getrusage(who, &ru);
    total += ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  }
  return total;
}

Progress::Progress(std::string label, uint64_t total_bytes)
    : label_(std::move(label)), total_(total_bytes), enabled_(isatty(STDERR_FILENO) == 1) {
  start_ = last_ = std::chrono::steady_clock::now();
}
Progress::~Progress() { Done(); }

void Progress::Add(uint64_t bytes) {
  done_ += bytes;
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(250)) return;
  last_ = now;
  double secs = SecondsSince(start_);
  double rate = secs > 0 ? done_ / secs : 0;
  double eta = rate > 0 && total_ > done_ ? (total_ - done_) / rate : 0;
  std::fprintf(stderr, "\r%s  %s / %s  %s  ETA %.0fs   ", label_.c_str(), HumanBytes(done_).c_str(),
               HumanBytes(total_).c_str(), HumanRate(rate).c_str(), eta);
  std::fflush(stderr);
}

void Progress::Done() {
  if (enabled_ && !finished_ && SecondsSince(start_) >= 0.25) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
  finished_ = true;
}

}  // namespace sluice::cli

namespace sluice::cli {

std::string FormatTime(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  time_t t = static_cast<time_t>(unix_ms / 1000);
  tm tmv{};
  gmtime_r(&t, &tmv);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tmv);
  return buf;
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace sluice::cli
