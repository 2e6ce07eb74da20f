// Metrics: counters, gauges and histograms that the engine keeps while it
// works, for operators to scrape (Prometheus text format) or read in-process.
//
// The engine records into one registry per process, DefaultMetrics(), as a
// Prometheus client library does: every pipeline, scrub and rebuild of the
// process adds to the same series, labelled by tier index (the tier's URI is
// on sluice_tier_info). Values that are a state rather than an event count
// (checkpoints in flight, queue depths) come from collectors, called on each
// Collect(), so a scrape reads memory only and never lists a store.
//
// Recording is a relaxed atomic add on a series found once; finding a series
// takes a lock, so hot paths keep the reference (it lives as long as the
// registry).
//
// Thread-safety: thread-safe.
#ifndef SLUICE_METRICS_H_
#define SLUICE_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice {

// Label names and values in order; names match [a-zA-Z_][a-zA-Z0-9_]*.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

enum class MetricType { kCounter, kGauge, kHistogram };

class Counter {
 public:
  void Add(double delta = 1) { value_.fetch_add(delta, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  // `upper_bounds` ascending; a +Inf bucket is implied.
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  const std::vector<double>& upper_bounds() const { return bounds_; }
  // Per bucket (the last is +Inf), not cumulative; with sum and count.
  std::vector<uint64_t> bucket_counts() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<double> sum_{0};
  std::atomic<uint64_t> count_{0};
};

// One line of the exposition: a histogram family has name_bucket{le=...},
// name_sum and name_count samples.
struct MetricSample {
  std::string name;
  MetricLabels labels;
  double value = 0;
};

struct MetricFamily {
  std::string name;
  std::string help;
  MetricType type = MetricType::kGauge;
  std::vector<MetricSample> samples;
};

// What collectors report into. A series reported twice (two pipelines in one
// process) is summed.
class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void Gauge(std::string_view name, std::string_view help, const MetricLabels& labels,
                     double value) = 0;
  virtual void Counter(std::string_view name, std::string_view help, const MetricLabels& labels,
                       double value) = 0;
};

class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // The series (name, labels), created on first use. A name keeps the type
  // (and, for histograms, the buckets) it was first created with: asking for
  // it as another type is a programming error and aborts.
  sluice::Counter& GetCounter(std::string_view name, std::string_view help, const MetricLabels& labels = {});
  sluice::Gauge& GetGauge(std::string_view name, std::string_view help, const MetricLabels& labels = {});
  Histogram& GetHistogram(std::string_view name, std::string_view help,
                          const std::vector<double>& upper_bounds, const MetricLabels& labels = {});

  // A function called on every Collect() to report values read from live
  // state. It runs without the registry's series lock held, so it may take
  // its owner's locks; it must not call AddCollector or drop a registration.
  // The collector is removed when the returned registration is destroyed
  // (which waits for a Collect() running it to finish).
  class Registration {
   public:
    virtual ~Registration() = default;
  };
  [[nodiscard]] std::unique_ptr<Registration> AddCollector(std::function<void(MetricsSink&)> collect);

  // Every family, sorted by name, each series sorted by labels.
  std::vector<MetricFamily> Collect() const;
  // Collect() in the Prometheus text exposition format (version 0.0.4).
  std::string RenderPrometheus() const;

 private:
  struct Family;
  struct CollectorEntry;
  Family& FamilyFor(std::string_view name, std::string_view help, MetricType type);

  mutable std::mutex series_mu_;
  std::map<std::string, std::unique_ptr<Family>, std::less<>> families_;
  // Held while collectors run, and by AddCollector/~Registration; never
  // together with series_mu_.
  mutable std::mutex collectors_mu_;
  std::map<uint64_t, std::function<void(MetricsSink&)>> collectors_;
  uint64_t next_collector_ = 0;
};

// The process's registry, which the engine records into.
MetricsRegistry& DefaultMetrics();

// Families in the Prometheus text exposition format.
std::string RenderPrometheus(const std::vector<MetricFamily>& families);

// Buckets for durations in seconds: 1 ms to 1 h.
const std::vector<double>& SecondsBuckets();

}  // namespace sluice

#endif  // SLUICE_METRICS_H_
