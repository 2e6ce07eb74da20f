#include "bench_report.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "output.h"

namespace sluice::cli {
namespace {

// Runs argv (PATH searched) in `cwd`, stdout captured, stderr to
// `stderr_path` (or discarded); the exit status, or an error if it could
// not run.
Result<int> Run(const std::vector<std::string>& argv, const std::string& cwd, std::string* out,
                const std::string& stderr_path = "") {
  // Everything the child needs is made before fork: the bench's threads may
  // hold the allocator's lock at that moment, so the child only calls
  // async-signal-safe functions until exec.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const char* err_path = stderr_path.empty() ? "/dev/null" : stderr_path.c_str();
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe");
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) return Status::FromErrno(errno, "fork");
  if (pid == 0) {
    dup2(pipefd[1], 1);
    int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err >= 0) dup2(err, 2);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(pipefd[1]);
  char buf[65536];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0 && out != nullptr) out->append(buf, static_cast<size_t>(n));
  }
  close(pipefd[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    return Status::NotFound(argv[0] + " not found");
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string Base64(const std::string& in) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(k[(v >> s) & 63]);
  }
  if (i < in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    if (i + 1 < in.size()) v |= uint8_t(in[i + 1]) << 8;
    out.push_back(k[(v >> 18) & 63]);
    out.push_back(k[(v >> 12) & 63]);
    out.push_back(i + 1 < in.size() ? k[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) return Status::IOError("write " + path);
  return Status::OK();
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::IOError("read " + path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

Ceiling FioCeiling(const std::string& dir, uint64_t bytes, uint64_t block) {
  Ceiling c;
  const std::string file = dir + "/.sluice-bench-fio-" + std::to_string(getpid());
  auto job = [&](const char* rw, std::string* out) {
    std::vector<std::string> argv = {"fio", "--name=ceiling", "--filename=" + file, std::string("--rw=") + rw,
                                     "--bs=" + std::to_string(block), "--size=" + std::to_string(bytes),
                                     "--direct=1", "--ioengine=io_uring", "--iodepth=16", "--end_fsync=1",
                                     "--output-format=json"};
    c.tool = "fio --rw=write|read --bs=" + HumanBytes(block) + " --size=" + HumanBytes(bytes) +
             " --direct=1 --ioengine=io_uring --iodepth=16 --end_fsync=1";
    return Run(argv, "", out);
  };
  std::string wout, rout;
  auto w = job("write", &wout);
  auto r = w.ok() && *w == 0 ? job("read", &rout) : w;
  unlink(file.c_str());
  if (!w.ok() || *w != 0 || !r.ok() || *r != 0) {
    c.note = !w.ok() ? w.status().message() : "fio failed on " + dir;
    c.tool.clear();
    return c;
  }
  try {
    c.write_bytes_per_sec = nlohmann::json::parse(wout)["jobs"][0]["write"]["bw_bytes"].get<double>();
    c.read_bytes_per_sec = nlohmann::json::parse(rout)["jobs"][0]["read"]["bw_bytes"].get<double>();
    c.note = "fio on the store's filesystem, same run";
  } catch (const std::exception& e) {
    c = Ceiling{};
    c.note = std::string("fio's output could not be read: ") + e.what();
  }
  return c;
}

Ceiling RadosCeiling(const std::string& uri, uint64_t block) {
  Ceiling c;
  // rados://POOL/PREFIX?conf=...&id=...
  std::string rest = uri.substr(8);
  std::string query = rest.find('?') == std::string::npos ? "" : rest.substr(rest.find('?') + 1);
  std::string pool = rest.substr(0, rest.find_first_of("/?"));
  std::vector<std::string> base = {"rados", "-p", pool};
  std::stringstream q(query);
  std::string kv;
  while (std::getline(q, kv, '&')) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    if (k == "conf") base.insert(base.end(), {"-c", v});
    if (k == "id") base.insert(base.end(), {"--id", v});
    if (k == "keyring") base.insert(base.end(), {"--keyring", v});
  }
  const std::string run_name = "sluice-bench-ceiling-" + std::to_string(getpid());
  auto bench = [&](const char* mode, std::string* out) {
    std::vector<std::string> argv = base;
    argv.insert(argv.end(), {"bench", "5", mode, "--run-name", run_name, "--format", "json"});
    // The block size is the write's; seq reads the objects it left.
    if (std::string(mode) == "write") argv.insert(argv.end(), {"-b", std::to_string(block), "--no-cleanup"});
    return Run(argv, "", out);
  };
  std::string wout, rout, ignored;
  auto w = bench("write", &wout);
  auto r = w.ok() && *w == 0 ? bench("seq", &rout) : w;
  std::vector<std::string> cleanup = base;
  cleanup.insert(cleanup.end(), {"cleanup", "--run-name", run_name});
  (void)Run(cleanup, "", &ignored);
  if (!w.ok() || *w != 0 || !r.ok() || *r != 0) {
    c.note = !w.ok() ? w.status().message() : "rados bench failed on pool " + pool;
    return c;
  }
  try {
    // rados bench prints "hints = 1" before its JSON object.
    auto bw = [](const std::string& out) {
      auto brace = out.find('{');
      if (brace == std::string::npos) throw std::runtime_error("no JSON in rados bench's output");
      auto j = nlohmann::json::parse(out.substr(brace));
      const auto& v = j["bandwidth"];
      double mb = v.is_string() ? std::stod(v.get<std::string>()) : v.get<double>();
      return mb * 1e6;  // rados bench's MB/sec are 10^6 bytes
    };
    c.write_bytes_per_sec = bw(wout);
    c.read_bytes_per_sec = bw(rout);
    c.tool = "rados -p " + pool + " bench 5 write|seq -b " + HumanBytes(block);
    c.note = "rados bench on the store's pool, same run";
  } catch (const std::exception& e) {
    c = Ceiling{};
    c.note = std::string("rados bench's output could not be read: ") + e.what();
  }
  return c;
}

}  // namespace

Result<int> RunTool(const std::vector<std::string>& argv, std::string* out) { return Run(argv, "", out); }

Status PrepareReport(const std::string& dir) {
  std::string out;
  auto rc = Run({"gnuplot", "--version"}, "", &out);
  if (!rc.ok() || *rc != 0) {
    return Status::NotFound("--report draws its plots with gnuplot, which is not installed "
                            "(apt-get install gnuplot-nox)");
  }
  return MakeDirs(dir);
}

ByteSampler::ByteSampler(std::vector<std::string> series, std::function<std::vector<uint64_t>()> read,
                         std::chrono::milliseconds every)
    : series_(std::move(series)), read_(std::move(read)), every_(every),
      start_(std::chrono::steady_clock::now()) {
  thread_ = std::thread([this] { Loop(); });
}

ByteSampler::~ByteSampler() { Stop(); }

void ByteSampler::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::vector<std::vector<double>> ByteSampler::rows() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rows_;
}

void ByteSampler::Loop() {
  std::vector<uint64_t> last = read_();
  auto last_t = std::chrono::steady_clock::now();
  while (!stop_) {
    std::this_thread::sleep_for(every_);
    std::vector<uint64_t> now = read_();
    auto t = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(t - last_t).count();
    std::vector<double> row = {std::chrono::duration<double>(t - start_).count()};
    for (size_t i = 0; i < series_.size(); ++i) {
      uint64_t a = i < last.size() ? last[i] : 0, b = i < now.size() ? now[i] : 0;
      row.push_back(dt > 0 && b >= a ? static_cast<double>(b - a) / dt : 0);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      rows_.push_back(std::move(row));
    }
    last = std::move(now);
    last_t = t;
  }
}

Ceiling MeasureCeiling(const std::string& store_uri, uint64_t bytes, uint64_t block) {
  if (store_uri.rfind("rados://", 0) == 0) return RadosCeiling(store_uri, block);
  std::string path = store_uri.rfind("file://", 0) == 0 ? store_uri.substr(7) : store_uri;
  path = path.substr(0, path.find('?'));
  Ceiling c = FioCeiling(path, bytes, block);
  if (c.tool.empty() && c.note.find("not found") != std::string::npos) {
    c.note = "no ceiling: fio is not installed (apt-get install fio)";
  }
  return c;
}

std::string FormatNumber(double v) {
  char b[32];
  snprintf(b, sizeof b, "%.4g", v);
  return b;
}

std::string HtmlEscape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += ch;
    }
  }
  return o;
}

std::string GnuplotQuote(const std::string& s) {
  std::string o = "'";
  for (char ch : s) o += ch == '\'' ? std::string("''") : std::string(1, ch);
  return o + "'";
}

Status WriteReport(const std::string& dir, const std::string& title, const std::string& summary_html,
                   const std::vector<ReportPlot>& plots, const std::string& json) {
  RETURN_IF_ERROR(MakeDirs(dir));
  std::string gp =
      "# Made by sluice bench --report: gnuplot report.gp redraws the plots from the .dat files.\n"
      "set terminal svg size 900,420 dynamic enhanced font 'sans,12' background rgb 'white'\n"
      "set grid\nset key outside right top\nset datafile missing 'NaN'\n";
  for (const auto& p : plots) {
    RETURN_IF_ERROR(WriteFile(dir + "/" + p.name + ".dat", p.data));
    gp += "\nreset session\nset terminal svg size 900,420 dynamic enhanced font 'sans,12' background rgb 'white'\n"
          "set grid\nset key outside right top\nset output '" + p.name + ".svg'\nset title " +
          GnuplotQuote(p.title) + "\n" + p.gnuplot + "\nunset output\n";
  }
  RETURN_IF_ERROR(WriteFile(dir + "/report.gp", gp));
  RETURN_IF_ERROR(WriteFile(dir + "/report.json", json + "\n"));
  std::string ignored;
  auto rc = Run({"gnuplot", "report.gp"}, dir, &ignored, dir + "/gnuplot.log");
  if (!rc.ok()) return rc.status().WithContext("--report");
  if (*rc != 0) {
    auto log = ReadFile(dir + "/gnuplot.log");
    return Status::IOError("gnuplot failed drawing the report (" + dir + "/gnuplot.log): " +
                           (log.ok() ? log->substr(0, 400) : std::string("?")));
  }
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" + HtmlEscape(title) +
      "</title>\n<style>body{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}"
      "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}"
      "th{background:#f4f4f4}figure{margin:2em 0}figcaption{color:#555}</style>\n"
      "<script>\n// Counts the plots that loaded, for people and for tests (body data-plots-loaded).\n"
      "window.addEventListener('load', function () {\n"
      "  var imgs = document.querySelectorAll('img.plot'), ok = 0;\n"
      "  imgs.forEach(function (i) { if (i.complete && i.naturalWidth > 0) ok++; });\n"
      "  document.body.setAttribute('data-plots', imgs.length);\n"
      "  document.body.setAttribute('data-plots-loaded', ok);\n});\n</script>\n"
      "</head><body>\n<h1>" + HtmlEscape(title) + "</h1>\n" + summary_html + "\n";
  for (const auto& p : plots) {
    ASSIGN_OR_RETURN(std::string svg, ReadFile(dir + "/" + p.name + ".svg"));
    html += "<figure id=\"" + p.name + "\"><img class=\"plot\" alt=\"" + HtmlEscape(p.title) +
            "\" width=\"900\" height=\"420\" src=\"data:image/svg+xml;base64," + Base64(svg) +
            "\">\n<figcaption>" + HtmlEscape(p.caption) + " (data: " + p.name + ".dat)</figcaption></figure>\n";
  }
  html += "<p>Raw result: report.json. Redraw: <code>gnuplot report.gp</code> in this directory.</p>\n"
          "</body></html>\n";
  return WriteFile(dir + "/index.html", html);
}

}  // namespace sluice::cli
