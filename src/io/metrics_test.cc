#include "sluice/metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace sluice {
namespace {

TEST(MetricsTest, CountersGaugesAndHistogramsRenderInThePrometheusTextFormat) {
  MetricsRegistry r;
  r.GetCounter("x_bytes_total", "Bytes, with a \\ and a\nnewline", {{"tier", "0"}}).Add(5);
  r.GetCounter("x_bytes_total", "ignored", {{"tier", "1"}}).Add(2.5);
  r.GetGauge("x_depth", "Depth").Set(3);
  Histogram& h = r.GetHistogram("x_seconds", "Seconds", {0.1, 1});
  h.Observe(0.05);
  h.Observe(0.1);  // le is inclusive
  h.Observe(7);
  const std::string text = r.RenderPrometheus();
  EXPECT_EQ(text,
            "# HELP x_bytes_total Bytes, with a \\\\ and a\\nnewline\n"
            "# TYPE x_bytes_total counter\n"
            "x_bytes_total{tier=\"0\"} 5\n"
            "x_bytes_total{tier=\"1\"} 2.5\n"
            "# HELP x_depth Depth\n"
            "# TYPE x_depth gauge\n"
            "x_depth 3\n"
            "# HELP x_seconds Seconds\n"
            "# TYPE x_seconds histogram\n"
            "x_seconds_bucket{le=\"0.10000000000000001\"} 2\n"
            "x_seconds_bucket{le=\"1\"} 2\n"
            "x_seconds_bucket{le=\"+Inf\"} 3\n"
            "x_seconds_sum 7.1500000000000004\n"
            "x_seconds_count 3\n");
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  MetricsRegistry r;
  r.GetGauge("g", "h", {{"uri", "a\"b\\c\nd"}}).Set(1);
  EXPECT_NE(r.RenderPrometheus().find("g{uri=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << r.RenderPrometheus();
}

TEST(MetricsTest, TheSameSeriesIsTheSameObject) {
  MetricsRegistry r;
  Counter& a = r.GetCounter("c_total", "h", {{"k", "v"}});
  Counter& b = r.GetCounter("c_total", "h", {{"k", "v"}});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &r.GetCounter("c_total", "h", {{"k", "w"}}));
}

TEST(MetricsTest, CollectorsAreSummedAndRemovedWithTheirRegistration) {
  MetricsRegistry r;
  auto one = r.AddCollector([](MetricsSink& s) { s.Gauge("live", "Live", {{"tier", "0"}}, 2); });
  auto two = r.AddCollector([](MetricsSink& s) { s.Gauge("live", "Live", {{"tier", "0"}}, 3); });
  EXPECT_NE(r.RenderPrometheus().find("live{tier=\"0\"} 5\n"), std::string::npos);
  two.reset();
  EXPECT_NE(r.RenderPrometheus().find("live{tier=\"0\"} 2\n"), std::string::npos);
  one.reset();
  EXPECT_EQ(r.RenderPrometheus(), "");
}

TEST(MetricsTest, ConcurrentAddsAreAllCounted) {
  MetricsRegistry r;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        r.GetCounter("n_total", "h").Add();
        r.GetHistogram("s", "h", {1}).Observe(0.5);
      }
    });
  }
  // Scrapes meanwhile must not disturb anything.
  for (int i = 0; i < 50; ++i) (void)r.RenderPrometheus();
  for (auto& t : threads) t.join();
  EXPECT_EQ(r.GetCounter("n_total", "h").value(), 40000);
  EXPECT_EQ(r.GetHistogram("s", "h", {1}).count(), 40000u);
}

}  // namespace
}  // namespace sluice
