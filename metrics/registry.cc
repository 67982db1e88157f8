#include "metrics/registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>

namespace gpupack {

namespace {

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }

// ValidMetricName: [a-zA-Z_:][a-zA-Z0-9_:]*.
bool ValidMetricName(std::string_view name) {
  if (name.empty() || !(IsNameStart(name[0]) || name[0] == ':')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return IsNameChar(c) || c == ':'; });
}

// ValidLabelName: [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved for Prometheus itself).
bool ValidLabelName(std::string_view name) {
  if (name.empty() || !IsNameStart(name[0]) || name.substr(0, 2) == "__") return false;
  return std::all_of(name.begin(), name.end(), IsNameChar);
}

// ValidLabels: every name valid and none given twice.
bool ValidLabels(const MetricLabels& labels) {
  for (size_t i = 0; i < labels.size(); ++i) {
    if (!ValidLabelName(labels[i].first)) return false;
    for (size_t j = 0; j < i; ++j)
      if (labels[j].first == labels[i].first) return false;
  }
  return true;
}

bool HasLabel(const MetricLabels& labels, std::string_view name) {
  return std::any_of(labels.begin(), labels.end(), [&](const auto& l) { return l.first == name; });
}

std::string LabelsDescription(const MetricLabels& labels) {
  std::string s = "{";
  for (const auto& [name, value] : labels) s += (s.size() > 1 ? "," : "") + name + "=\"" + value.substr(0, 60) + "\"";
  return s + "}";
}

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

// EscapeHelp escapes \ and newline for a HELP line.
std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// AppendSample appends `<name><suffix>{labels[,le="..."]} value\n`; `le` is left out when empty.
void AppendSample(std::string& out, std::string_view name, std::string_view suffix, const MetricLabels& labels,
                  std::string_view le, double value) {
  out += name;
  out += suffix;
  if (!labels.empty() || !le.empty()) {
    out += '{';
    bool first = true;
    for (const auto& [label, v] : labels) {
      if (!first) out += ',';
      first = false;
      out += label;
      out += "=\"";
      out += EscapeLabelValue(v);
      out += '"';
    }
    if (!le.empty()) {
      if (!first) out += ',';
      out += "le=\"";
      out += le;
      out += '"';
    }
    out += '}';
  }
  out += ' ';
  out += FormatMetricValue(value);
  out += '\n';
}

// CollectedSampleFits: whether a collected sample may be rendered in a family of `type`.
bool CollectedSampleFits(MetricType type, const MetricSample& s) {
  if (!ValidLabels(s.labels)) return false;
  if (type != MetricType::kHistogram) return s.suffix.empty();
  if (s.suffix == "_bucket") return HasLabel(s.labels, "le");
  return (s.suffix == "_sum" || s.suffix == "_count") && !HasLabel(s.labels, "le");
}

}  // namespace

std::string FormatMetricValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::to_chars_result r;
  // 2^63 is the first integral double an int64_t cannot hold; below it every integral double is exact.
  if (v == std::trunc(v) && std::fabs(v) < 9223372036854775808.0) {
    r = std::to_chars(buf, buf + sizeof buf, static_cast<int64_t>(v));
  } else if (std::fabs(v) >= 1e-4 && std::fabs(v) < 1e15) {
    // Plain decimals where printf's %g would print them so (0.0005, not 5e-04): bucket bounds are label values,
    // and dashboards match them as text.
    r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);  // shortest that reads back exactly
  } else {
    r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  }
  return std::string(buf, r.ptr);
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// Family: one registered family; immutable once registered (its Counter or Histogram has its own lock).
struct MetricsRegistry::Family {
  std::string name;
  std::string help;
  MetricType type = MetricType::kGauge;
  std::function<void(std::vector<MetricSample>&)> collect;  // set for a collected family
  std::unique_ptr<Counter> counter;                          // set for an owned counter
  std::unique_ptr<Histogram> histogram;                      // set for an owned histogram
};

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

// Publish validates the family's name and appends it. The family is complete before it is published, so a
// concurrent Render never sees it half built.
void MetricsRegistry::Publish(std::unique_ptr<Family> family) {
  if (!ValidMetricName(family->name))
    throw std::invalid_argument("metrics: '" + family->name + "' is not a valid metric name");
  std::lock_guard lock(mu_);
  for (const auto& f : families_) {
    if (f->name == family->name) throw std::invalid_argument("metrics: family '" + f->name + "' registered twice");
  }
  families_.push_back(std::move(family));
}

void MetricsRegistry::AddCollected(std::string name, std::string help, MetricType type,
                                   std::function<void(std::vector<MetricSample>& out)> collect) {
  if (!collect) throw std::invalid_argument("metrics: family '" + name + "' has no collect callback");
  auto family = std::make_unique<Family>();
  family->name = std::move(name);
  family->help = std::move(help);
  family->type = type;
  family->collect = std::move(collect);
  Publish(std::move(family));
}

MetricsRegistry::Counter& MetricsRegistry::AddCounter(std::string name, std::string help) {
  auto family = std::make_unique<Family>();
  family->name = std::move(name);
  family->help = std::move(help);
  family->type = MetricType::kCounter;
  family->counter = std::unique_ptr<Counter>(new Counter());
  Counter& counter = *family->counter;
  Publish(std::move(family));
  return counter;
}

MetricsRegistry::Histogram& MetricsRegistry::AddHistogram(std::string name, std::string help,
                                                          std::vector<double> buckets) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (double b : buckets) {
    if (std::isnan(b) || b == -kInf)
      throw std::invalid_argument("metrics: histogram '" + name + "' has a NaN or -Inf bucket");
  }
  buckets.erase(std::remove(buckets.begin(), buckets.end(), kInf), buckets.end());
  std::sort(buckets.begin(), buckets.end());
  buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
  auto family = std::make_unique<Family>();
  family->name = std::move(name);
  family->help = std::move(help);
  family->type = MetricType::kHistogram;
  family->histogram = std::unique_ptr<Histogram>(new Histogram(std::move(buckets)));
  Histogram& histogram = *family->histogram;
  Publish(std::move(family));
  return histogram;
}

std::string MetricsRegistry::Render() const {
  std::vector<const Family*> families;
  {
    std::lock_guard lock(mu_);
    families.reserve(families_.size());
    for (const auto& f : families_) families.push_back(f.get());
  }
  std::string out;
  std::vector<MetricSample> samples;
  for (const Family* f : families) {
    out += "# HELP " + f->name + " " + EscapeHelp(f->help) + "\n";
    out += "# TYPE " + f->name + " " + TypeName(f->type) + "\n";
    if (f->counter) {
      f->counter->Render(f->name, out);
    } else if (f->histogram) {
      f->histogram->Render(f->name, out);
    } else if (f->collect) {
      samples.clear();
      f->collect(samples);
      for (const MetricSample& s : samples) {
        if (CollectedSampleFits(f->type, s)) AppendSample(out, f->name, s.suffix, s.labels, "", s.value);
      }
    }
  }
  return out;
}

// ---- Counter ------------------------------------------------------------------------------------------------

void MetricsRegistry::Counter::Inc(const MetricLabels& labels, double by) {
  if (!(by >= 0)) return;  // negative or NaN
  std::lock_guard lock(mu_);
  auto it = values_.find(labels);
  if (it == values_.end()) {
    if (!ValidLabels(labels)) throw std::invalid_argument("metrics: invalid label set " + LabelsDescription(labels));
    it = values_.emplace(labels, 0.0).first;
  }
  it->second += by;
}

double MetricsRegistry::Counter::Value(const MetricLabels& labels) const {
  std::lock_guard lock(mu_);
  auto it = values_.find(labels);
  return it == values_.end() ? 0 : it->second;
}

void MetricsRegistry::Counter::Render(std::string_view name, std::string& out) const {
  std::lock_guard lock(mu_);
  for (const auto& [labels, value] : values_) AppendSample(out, name, "", labels, "", value);
}

// ---- Histogram ----------------------------------------------------------------------------------------------

void MetricsRegistry::Histogram::Observe(const MetricLabels& labels, double value) {
  // The bucket index: the first bound >= value; buckets_.size() means +Inf only (also for NaN).
  const size_t index = std::isnan(value) ? buckets_.size()
                                         : static_cast<size_t>(std::lower_bound(buckets_.begin(), buckets_.end(), value) -
                                                               buckets_.begin());
  std::lock_guard lock(mu_);
  auto it = series_.find(labels);
  if (it == series_.end()) {
    if (!ValidLabels(labels) || HasLabel(labels, "le"))
      throw std::invalid_argument("metrics: invalid histogram label set " + LabelsDescription(labels));
    Series series;
    series.per_bucket.assign(buckets_.size() + 1, 0);
    it = series_.emplace(labels, std::move(series)).first;
  }
  ++it->second.per_bucket[index];
  ++it->second.count;
  it->second.sum += value;
}

uint64_t MetricsRegistry::Histogram::Count(const MetricLabels& labels) const {
  std::lock_guard lock(mu_);
  auto it = series_.find(labels);
  return it == series_.end() ? 0 : it->second.count;
}

void MetricsRegistry::Histogram::Render(std::string_view name, std::string& out) const {
  std::vector<std::string> bounds;
  bounds.reserve(buckets_.size());
  for (double b : buckets_) bounds.push_back(FormatMetricValue(b));
  std::lock_guard lock(mu_);
  for (const auto& [labels, series] : series_) {
    uint64_t cumulative = 0;
    for (size_t i = 0; i < buckets_.size(); ++i) {
      cumulative += series.per_bucket[i];
      AppendSample(out, name, "_bucket", labels, bounds[i], static_cast<double>(cumulative));
    }
    AppendSample(out, name, "_bucket", labels, "+Inf", static_cast<double>(series.count));
    AppendSample(out, name, "_sum", labels, "", series.sum);
    AppendSample(out, name, "_count", labels, "", static_cast<double>(series.count));
  }
}

}  // namespace gpupack
