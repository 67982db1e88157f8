// MetricsRegistry: every family that /metrics shows, with its HELP and TYPE, rendered as Prometheus text
// (exposition format 0.0.4) in one place, so no component writes the text format by hand.
//
// Two kinds of family:
// - collected: a callback computes the samples at scrape time (from a read view, from atomics, from stats());
// - owned: a labelled Counter or Histogram that the registry keeps, updated from any thread.
//
// Example:
//   MetricsRegistry metrics;
//   auto& requests = metrics.AddCounter("gpupack_requests_total", "ECS API responses by operation and status.");
//   metrics.AddCollected("gpupack_agents_connected", "Agents connected now.", MetricType::kGauge,
//                        [&](std::vector<MetricSample>& out) { out.push_back({{}, double(channel.connected())}); });
//   requests.Inc({{"operation", "RunTask"}, {"code", "200"}});
//   std::string text = metrics.Render();  // the /metrics body
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpupack {

enum class MetricType { kCounter, kGauge, kHistogram };

// MetricLabels: label name → value pairs, rendered in this order. Names must be Prometheus label names
// ([a-zA-Z_][a-zA-Z0-9_]*, not starting with "__"); values are any text (escaped when rendered).
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// MetricSample is one line of a collected family: `<family name><suffix>{labels} value`. The suffix is empty
// for counters and gauges; a collected histogram gives each of its lines one of "_bucket" (with an "le" label),
// "_sum" or "_count".
// (A constructor rather than an aggregate, so `{labels, value}` needs no suffix and draws no warning.)
struct MetricSample {
  MetricSample() = default;
  MetricSample(MetricLabels l, double v, std::string s = {}) : labels(std::move(l)), value(v), suffix(std::move(s)) {}

  MetricLabels labels;
  double value = 0;
  std::string suffix;
};

// MetricsRegistry holds the families of one /metrics endpoint and renders them in registration order.
//
// Thread-safety: every member function may be called from any thread at any time. Register the families
// before serving (a family registered during a scrape may or may not be in it). Counter and Histogram
// references stay valid for the registry's lifetime. A collect callback runs on the thread that calls
// Render, with no registry lock held, so it may take its own locks; it must not call Render itself.
//
// Programming errors throw std::invalid_argument: a family name registered twice, a name or label name that
// Prometheus would refuse, a histogram bucket that is NaN or -Inf, an owned histogram's label named "le".
class MetricsRegistry {
 public:
  class Counter;
  class Histogram;

  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // AddCollected registers a family whose samples `collect` appends to `out` at every Render.
  void AddCollected(std::string name, std::string help, MetricType type,
                    std::function<void(std::vector<MetricSample>& out)> collect);

  // AddCounter registers an owned labelled counter family (see Counter).
  Counter& AddCounter(std::string name, std::string help);

  // AddHistogram registers an owned labelled histogram family with fixed bucket upper bounds (see Histogram).
  // The bounds are sorted and deduplicated; +Inf is implicit (one given is dropped); NaN or -Inf is refused.
  Histogram& AddHistogram(std::string name, std::string help, std::vector<double> buckets);

  // Render is the whole exposition: per family `# HELP` and `# TYPE` (also with no samples yet), then its
  // samples; owned families' label sets in sorted order, collected ones in the order the callback gave them.
  // Label values are escaped (\\, \", \n); integral values print as integers (1234567, not 1.23457e+06); NaN
  // and infinities as NaN, +Inf, -Inf (see FormatMetricValue). A collected sample with an invalid label name, or a suffix its type
  // does not have, is left out (the rest of the exposition stays parseable).
  std::string Render() const;

  // Counter is a labelled counter family: one value per label set, created at its first Inc.
  // Thread-safety: all members may be called from any thread (one mutex per family).
  class Counter {
   public:
    // Inc adds `by` (>= 0; a negative or NaN `by` is ignored: counters only go up) to the label set's value.
    // A label set that is new and has an invalid label name throws std::invalid_argument.
    void Inc(const MetricLabels& labels, double by = 1);
    // Value is the label set's current value (0 if it was never incremented).
    double Value(const MetricLabels& labels) const;

   private:
    friend class MetricsRegistry;
    Counter() = default;
    void Render(std::string_view name, std::string& out) const;

    mutable std::mutex mu_;
    std::map<MetricLabels, double> values_;  // guarded by mu_
  };

  // Histogram is a labelled histogram family with fixed buckets: per label set, a count per bucket, a sum
  // and a total count, created at its first Observe. Rendered cumulatively, as Prometheus expects.
  // Thread-safety: all members may be called from any thread (one mutex per family).
  class Histogram {
   public:
    // Observe records `value` in the smallest bucket whose bound is >= value (NaN: only in +Inf, and in the
    // sum). A label set that is new and has an invalid label name, or a label named "le", throws
    // std::invalid_argument.
    void Observe(const MetricLabels& labels, double value);
    // Count is the number of observations of the label set (0 if none).
    uint64_t Count(const MetricLabels& labels) const;
    const std::vector<double>& buckets() const { return buckets_; }

   private:
    friend class MetricsRegistry;
    explicit Histogram(std::vector<double> buckets) : buckets_(std::move(buckets)) {}
    void Render(std::string_view name, std::string& out) const;

    struct Series {
      std::vector<uint64_t> per_bucket;  // non-cumulative; one more than buckets_ (the last is +Inf only)
      uint64_t count = 0;
      double sum = 0;
    };
    const std::vector<double> buckets_;  // ascending, finite, no duplicates
    mutable std::mutex mu_;
    std::map<MetricLabels, Series> series_;  // guarded by mu_
  };

 private:
  struct Family;
  void Publish(std::unique_ptr<Family> family);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Family>> families_;  // registration order; guarded by mu_ (Family is immutable)
};

// FormatMetricValue prints `v` as the text format wants it: integral values as integers (below 2^63), others
// with the fewest digits that read back exactly, as a plain decimal from 0.0001 up (0.0005) and with an
// exponent below that or from 1e15 up (1e-05), and NaN, +Inf, -Inf.
std::string FormatMetricValue(double v);

// EscapeLabelValue escapes \, " and newline for a label value in the text format.
std::string EscapeLabelValue(std::string_view value);

}  // namespace gpupack
