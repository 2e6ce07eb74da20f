// `sluice bench --report DIR`: what a bench run measured, drawn as SVG plots
// (gnuplot) in one self-contained HTML page, beside the data behind them.
//
// The bench samples cumulative byte counters while it runs (ByteSampler),
// measures a ceiling on the same store in the same run (fio on a file store,
// `rados bench` on a RADOS pool), and hands both to WriteReport.
#ifndef SLUICE_TOOLS_SLUICE_BENCH_REPORT_H_
#define SLUICE_TOOLS_SLUICE_BENCH_REPORT_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sluice/status.h"

namespace sluice::cli {

// OK if gnuplot runs and `dir` is (or could be made) a directory; else why
// not. Checked before a bench starts, so a run is never wasted on a report
// that cannot be written.
Status PrepareReport(const std::string& dir);

// Every `every`, reads the cumulative bytes of each series and keeps the rate
// since the previous sample (bytes/s), with the time since the start.
class ByteSampler {
 public:
  ByteSampler(std::vector<std::string> series, std::function<std::vector<uint64_t>()> read,
              std::chrono::milliseconds every);
  ~ByteSampler();
  void Stop();
  const std::vector<std::string>& series() const { return series_; }
  // One row per sample: seconds since the start, then one rate per series.
  std::vector<std::vector<double>> rows() const;

 private:
  void Loop();
  const std::vector<std::string> series_;
  const std::function<std::vector<uint64_t>()> read_;
  const std::chrono::milliseconds every_;
  const std::chrono::steady_clock::time_point start_;
  mutable std::mutex mu_;
  std::vector<std::vector<double>> rows_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The store's own limit, measured in the same run by a standard tool.
struct Ceiling {
  std::string tool;           // the command line that measured it ("" if none)
  double write_bytes_per_sec = 0;
  double read_bytes_per_sec = 0;
  std::string note;           // why there is none, or what it is
};

// fio on a file store's filesystem (O_DIRECT, sequential, `block` per I/O,
// queue depth 16, fsync at the end), or `rados bench` on a rados:// store's
// pool; `bytes` bounds what it writes. A missing tool gives a Ceiling with a
// note, not an error: the plots then say there is no ceiling.
Ceiling MeasureCeiling(const std::string& store_uri, uint64_t bytes, uint64_t block);

struct ReportPlot {
  std::string name;     // file stem: NAME.svg, NAME.dat
  std::string title;
  std::string caption;  // under the plot in the page
  std::string data;     // NAME.dat, whitespace-separated columns
  std::string gnuplot;  // commands after `set output`, reading NAME.dat
};

// Writes DIR/NAME.dat for every plot, DIR/report.gp, runs gnuplot there to
// make DIR/NAME.svg, and DIR/index.html with every SVG inlined (a data: URI,
// so the page needs nothing beside it) under `summary_html`, and
// DIR/report.json (`json`, the bench's result).
Status WriteReport(const std::string& dir, const std::string& title, const std::string& summary_html,
                   const std::vector<ReportPlot>& plots, const std::string& json);

// Runs argv (PATH lookup), its stdout into *out; the exit status, or
// NotFound if the program is not installed.
Result<int> RunTool(const std::vector<std::string>& argv, std::string* out);

// Escapes text for HTML; quotes text for a gnuplot string; a number for a
// data file or a table (4 significant digits).
std::string HtmlEscape(const std::string& s);
std::string GnuplotQuote(const std::string& s);
std::string FormatNumber(double v);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_SLUICE_BENCH_REPORT_H_
