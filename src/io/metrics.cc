#include "sluice/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace sluice {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::bucket_counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = buckets_[i].load(std::memory_order_relaxed);
  return out;
}

struct MetricsRegistry::Family {
  std::string help;
  MetricType type;
  std::vector<double> bounds;  // histograms
  // One of these per series, by labels.
  std::map<MetricLabels, std::unique_ptr<sluice::Counter>> counters;
  std::map<MetricLabels, std::unique_ptr<sluice::Gauge>> gauges;
  std::map<MetricLabels, std::unique_ptr<Histogram>> histograms;
};

MetricsRegistry::Family& MetricsRegistry::FamilyFor(std::string_view name, std::string_view help,
                                                    MetricType type) {
  auto it = families_.find(name);
  if (it == families_.end()) {
    auto family = std::make_unique<Family>();
    family->help = std::string(help);
    family->type = type;
    it = families_.emplace(std::string(name), std::move(family)).first;
  }
  if (it->second->type != type) {
    std::fprintf(stderr, "sluice: metric %.*s used as two types\n", static_cast<int>(name.size()), name.data());
    std::abort();
  }
  return *it->second;
}

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

Counter& MetricsRegistry::GetCounter(std::string_view name, std::string_view help, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(series_mu_);
  auto& slot = FamilyFor(name, help, MetricType::kCounter).counters[labels];
  if (!slot) slot = std::make_unique<sluice::Counter>();
  return *slot;
}

Gauge& MetricsRegistry::GetGauge(std::string_view name, std::string_view help, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(series_mu_);
  auto& slot = FamilyFor(name, help, MetricType::kGauge).gauges[labels];
  if (!slot) slot = std::make_unique<sluice::Gauge>();
  return *slot;
}

Histogram& MetricsRegistry::GetHistogram(std::string_view name, std::string_view help,
                                         const std::vector<double>& upper_bounds, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(series_mu_);
  Family& family = FamilyFor(name, help, MetricType::kHistogram);
  if (family.histograms.empty()) family.bounds = upper_bounds;
  if (family.bounds != upper_bounds) {
    std::fprintf(stderr, "sluice: histogram %.*s used with two bucket layouts\n", static_cast<int>(name.size()),
                 name.data());
    std::abort();
  }
  auto& slot = family.histograms[labels];
  if (!slot) slot = std::make_unique<Histogram>(upper_bounds);
  return *slot;
}

namespace {

class RegistrationImpl : public MetricsRegistry::Registration {
 public:
  RegistrationImpl(std::mutex* mu, std::map<uint64_t, std::function<void(MetricsSink&)>>* collectors, uint64_t id)
      : mu_(mu), collectors_(collectors), id_(id) {}
  ~RegistrationImpl() override {
    std::lock_guard<std::mutex> lock(*mu_);
    collectors_->erase(id_);
  }

 private:
  std::mutex* mu_;
  std::map<uint64_t, std::function<void(MetricsSink&)>>* collectors_;
  uint64_t id_;
};

// Sums what collectors report, by family and labels.
class SummingSink : public MetricsSink {
 public:
  struct Entry {
    std::string help;
    MetricType type;
    std::map<MetricLabels, double> values;
  };
  void Gauge(std::string_view name, std::string_view help, const MetricLabels& labels, double value) override {
    Add(name, help, MetricType::kGauge, labels, value);
  }
  void Counter(std::string_view name, std::string_view help, const MetricLabels& labels, double value) override {
    Add(name, help, MetricType::kCounter, labels, value);
  }
  std::map<std::string, Entry, std::less<>> entries;

 private:
  void Add(std::string_view name, std::string_view help, MetricType type, const MetricLabels& labels, double value) {
    auto it = entries.find(name);
    if (it == entries.end()) it = entries.emplace(std::string(name), Entry{std::string(help), type, {}}).first;
    it->second.values[labels] += value;
  }
};

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

void AppendEscaped(std::string* out, std::string_view s, bool quote_too) {
  for (char c : s) {
    if (c == '\\') {
      *out += "\\\\";
    } else if (c == '\n') {
      *out += "\\n";
    } else if (c == '"' && quote_too) {
      *out += "\\\"";
    } else {
      *out += c;
    }
  }
}

}  // namespace

std::unique_ptr<MetricsRegistry::Registration> MetricsRegistry::AddCollector(
    std::function<void(MetricsSink&)> collect) {
  std::lock_guard<std::mutex> lock(collectors_mu_);
  const uint64_t id = next_collector_++;
  collectors_.emplace(id, std::move(collect));
  return std::make_unique<RegistrationImpl>(&collectors_mu_, &collectors_, id);
}

std::vector<MetricFamily> MetricsRegistry::Collect() const {
  SummingSink collected;
  {
    std::lock_guard<std::mutex> lock(collectors_mu_);
    for (const auto& [id, fn] : collectors_) fn(collected);
  }
  std::map<std::string, MetricFamily> out;
  for (auto& [name, entry] : collected.entries) {
    MetricFamily& f = out[name];
    f.name = name;
    f.help = entry.help;
    f.type = entry.type;
    for (auto& [labels, value] : entry.values) f.samples.push_back({name, labels, value});
  }
  std::lock_guard<std::mutex> lock(series_mu_);
  for (const auto& [name, family] : families_) {
    MetricFamily& f = out[name];
    if (!f.samples.empty() && f.type != family->type) continue;  // a collector took the name first
    f.name = name;
    f.help = family->help;
    f.type = family->type;
    for (const auto& [labels, c] : family->counters) f.samples.push_back({name, labels, c->value()});
    for (const auto& [labels, g] : family->gauges) f.samples.push_back({name, labels, g->value()});
    for (const auto& [labels, h] : family->histograms) {
      const auto counts = h->bucket_counts();
      uint64_t cumulative = 0;
      for (size_t i = 0; i < counts.size(); ++i) {
        cumulative += counts[i];
        MetricLabels with_le = labels;
        with_le.emplace_back("le", i < family->bounds.size() ? FormatValue(family->bounds[i]) : "+Inf");
        f.samples.push_back({name + "_bucket", std::move(with_le), static_cast<double>(cumulative)});
      }
      f.samples.push_back({name + "_sum", labels, h->sum()});
      f.samples.push_back({name + "_count", labels, static_cast<double>(cumulative)});
    }
  }
  std::vector<MetricFamily> families;
  families.reserve(out.size());
  for (auto& [name, f] : out) {
    if (!f.samples.empty()) families.push_back(std::move(f));
  }
  return families;
}

std::string RenderPrometheus(const std::vector<MetricFamily>& families) {
  std::string out;
  out.reserve(families.size() * 160);
  for (const auto& f : families) {
    out += "# HELP ";
    out += f.name;
    out += ' ';
    AppendEscaped(&out, f.help, false);
    out += "\n# TYPE ";
    out += f.name;
    out += f.type == MetricType::kCounter ? " counter\n" : f.type == MetricType::kGauge ? " gauge\n" : " histogram\n";
    for (const auto& s : f.samples) {
      out += s.name;
      if (!s.labels.empty()) {
        out += '{';
        for (size_t i = 0; i < s.labels.size(); ++i) {
          if (i > 0) out += ',';
          out += s.labels[i].first;
          out += "=\"";
          AppendEscaped(&out, s.labels[i].second, true);
          out += '"';
        }
        out += '}';
      }
      out += ' ';
      out += FormatValue(s.value);
      out += '\n';
    }
  }
  return out;
}

std::string MetricsRegistry::RenderPrometheus() const { return sluice::RenderPrometheus(Collect()); }

MetricsRegistry& DefaultMetrics() {
  static MetricsRegistry* registry = new MetricsRegistry();  // never destroyed: threads may record at exit
  return *registry;
}

const std::vector<double>& SecondsBuckets() {
  static const std::vector<double> buckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                              2.5,   5,      10,    30,   60,    120,  300, 600, 1800, 3600};
  return buckets;
}

}  // namespace sluice
