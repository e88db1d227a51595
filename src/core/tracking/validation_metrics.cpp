// verl's validation metrics (validation_metrics.hpp): the grouping by source and prompt, the
// per-prompt statistics with numpy's bootstrap draws, the mean over prompts and the names.
#include <verlpp/tracking/validation_metrics.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <unordered_map>
#include <utility>

namespace verlpp::tracking {
namespace {

using json = nlohmann::json;

double numpy_mean(const std::vector<double>& v) { return numpy_sum(v.data(), int64_t(v.size())) / double(v.size()); }

// np.std (ddof 0): the mean, the squared deviations, their sum over the count, the root.
double numpy_std(const std::vector<double>& v) {
  const double mean = numpy_mean(v);
  std::vector<double> sq(v.size());
  for (size_t i = 0; i < v.size(); ++i) sq[i] = (v[i] - mean) * (v[i] - mean);
  return std::sqrt(numpy_sum(sq.data(), int64_t(sq.size())) / double(sq.size()));
}

MeanStd mean_std(const std::vector<double>& v) { return {numpy_mean(v), numpy_std(v)}; }

bool is_numeric(const json& v) { return v.is_number() || v.is_boolean(); }
double as_double(const json& v) { return v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>(); }

// The N of a metric name: the digits after its last '@' ("best@4/mean" -> 4).
int64_t metric_n(const std::string& name) {
  const size_t at = name.rfind('@');
  if (at == std::string::npos) return 0;
  return std::stoll(name.substr(at + 1, name.find('/', at) - at - 1));
}

// The prompts of one data source in order of first appearance, each with its response rows.
struct SourceGroups {
  std::vector<std::vector<size_t>> rows;
  std::unordered_map<std::string, size_t> index_of_uid;
};

}  // namespace

std::vector<int64_t> numpy_choice_indices(int64_t n_data, int64_t rows, int64_t cols, uint32_t seed) {
  if (n_data < 1) throw Error("validation bootstrap", fmt::format("cannot draw from {} responses", n_data));
  if (rows < 0 || cols < 0) throw Error("validation bootstrap", fmt::format("a draw of size ({}, {})", rows, cols));
  // RandomState.seed(int) is MT19937's init_genrand, which std::mt19937's seeding is; choice with
  // replacement is randint(0, n_data): 32-bit outputs masked to the smallest all-ones mask that
  // covers n_data - 1, values above it rejected (a single value needs no draw).
  std::mt19937 mt(seed);
  const uint32_t top = uint32_t(n_data - 1);
  uint32_t mask = top;
  for (int shift : {1, 2, 4, 8, 16}) mask |= mask >> shift;
  std::vector<int64_t> out(size_t(rows * cols), 0);
  if (top == 0) return out;
  for (int64_t& index : out) {
    uint32_t v = 0;
    do v = uint32_t(mt()) & mask;
    while (v > top);
    index = int64_t(v);
  }
  return out;
}

double numpy_sum(const double* values, int64_t count) {
  // numpy's pairwise_sum: short runs in order, up to 128 in eight interleaved partial sums, longer
  // ones split in two at a multiple of 8.
  if (count < 8) {
    double sum = 0.0;
    for (int64_t i = 0; i < count; ++i) sum += values[i];
    return sum;
  }
  if (count <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = values[j];
    int64_t i = 8;
    for (; i < count - count % 8; i += 8)
      for (int j = 0; j < 8; ++j) r[j] += values[i + j];
    double sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < count; ++i) sum += values[i];
    return sum;
  }
  int64_t half = count / 2;
  half -= half % 8;
  return numpy_sum(values, half) + numpy_sum(values + half, count - half);
}

std::vector<int64_t> bootstrap_subset_sizes(int64_t n) {
  std::vector<int64_t> sizes;
  if (n <= 1) return sizes;
  for (int64_t k = 2; k < n; k *= 2) sizes.push_back(k);
  sizes.push_back(n);
  return sizes;
}

double majority_value(const std::vector<const json*>& votes, const std::vector<double>& values) {
  if (votes.empty() || votes.size() != values.size())
    throw Error("validation majority vote", fmt::format("{} votes for {} values", votes.size(), values.size()));
  // The distinct votes in order of first appearance, with their counts and first values.
  std::vector<const json*> distinct;
  std::vector<int64_t> counts;
  std::vector<double> first_value;
  for (size_t k = 0; k < votes.size(); ++k) {
    size_t d = 0;
    while (d < distinct.size() && !(*distinct[d] == *votes[k])) ++d;
    if (d == distinct.size()) {
      distinct.push_back(votes[k]);
      counts.push_back(0);
      first_value.push_back(values[k]);
    }
    ++counts[d];
  }
  // Python's max over a dict returns the first key (in insertion order) of the largest count.
  const size_t best = size_t(std::max_element(counts.begin(), counts.end()) - counts.begin());
  return first_value[best];
}

MeanStd bootstrap_metric(int64_t n_data, int64_t subset_size,
                         const std::function<double(const int64_t* subset, int64_t count)>& reduce,
                         const BootstrapOptions& options) {
  const std::vector<int64_t> idx = numpy_choice_indices(n_data, options.n_bootstrap, subset_size, options.seed);
  std::vector<double> results(size_t(options.n_bootstrap));
  for (int64_t b = 0; b < options.n_bootstrap; ++b)
    results[size_t(b)] = reduce(idx.data() + b * subset_size, subset_size);
  return mean_std(results);
}

ValidationTable process_validation_metrics(const ValidationSamples& samples, const BootstrapOptions& options) {
  const size_t total = samples.data_sources.size();
  if (samples.uids.size() != total)
    throw Error("validation metrics", fmt::format("{} uids for {} responses", samples.uids.size(), total));
  for (const auto& [name, values] : samples.vars)
    if (values.size() != total)
      throw Error("validation metrics",
                  fmt::format("the variable '{}' has {} values for {} responses", name, values.size(), total));
  if (options.n_bootstrap < 1)
    throw Error("validation metrics", fmt::format("n_bootstrap = {} must be >= 1", options.n_bootstrap));

  std::map<std::string, SourceGroups> sources;
  for (size_t i = 0; i < total; ++i) {
    SourceGroups& g = sources[samples.data_sources[i]];
    const auto [it, fresh] = g.index_of_uid.emplace(samples.uids[i], g.rows.size());
    if (fresh) g.rows.emplace_back();
    g.rows[it->second].push_back(i);
  }
  const auto pred_it = samples.vars.find("pred");
  // verl re-seeds before every bootstrap, so the draws depend only on (N, n): drawn once each.
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> draws;
  auto draws_for = [&](int64_t n_data, int64_t subset) -> const std::vector<int64_t>& {
    auto it = draws.find({n_data, subset});
    if (it == draws.end())
      it = draws
               .emplace(std::make_pair(n_data, subset),
                        numpy_choice_indices(n_data, options.n_bootstrap, subset, options.seed))
               .first;
    return it->second;
  };

  // source -> var -> metric -> the per-prompt values, in prompt order.
  std::map<std::string, std::map<std::string, std::map<std::string, std::vector<double>>>> per_prompt;
  for (const auto& [source, groups] : sources) {
    for (const std::vector<size_t>& rows : groups.rows) {
      const int64_t n = int64_t(rows.size());
      std::vector<const json*> votes;
      if (pred_it != samples.vars.end())
        for (size_t row : rows)
          if (!pred_it->second[row].is_null()) votes.push_back(&pred_it->second[row]);
      const bool has_pred = int64_t(votes.size()) == n;
      for (const auto& [var, column] : samples.vars) {
        std::vector<double> values;
        for (size_t row : rows)
          if (is_numeric(column[row])) values.push_back(as_double(column[row]));
        if (int64_t(values.size()) != n) continue;  // a string, a null or another non-number
        auto& out = per_prompt[source][var];
        out[fmt::format("mean@{}", n)].push_back(numpy_mean(values));
        if (n <= 1) continue;
        out[fmt::format("std@{}", n)].push_back(numpy_std(values));
        for (int64_t k : bootstrap_subset_sizes(n)) {
          const std::vector<int64_t>& idx = draws_for(n, k);
          std::vector<double> best(size_t(options.n_bootstrap)), worst(best.size()), maj(best.size());
          std::vector<const json*> subset_votes(static_cast<size_t>(k));
          std::vector<double> subset_values(static_cast<size_t>(k));
          for (int64_t b = 0; b < options.n_bootstrap; ++b) {
            const int64_t* subset = idx.data() + b * k;
            double hi = values[size_t(subset[0])], lo = hi;
            for (int64_t j = 0; j < k; ++j) {
              const double v = values[size_t(subset[j])];
              hi = std::max(hi, v);
              lo = std::min(lo, v);
              subset_values[size_t(j)] = v;
              if (has_pred) subset_votes[size_t(j)] = votes[size_t(subset[j])];
            }
            best[size_t(b)] = hi;
            worst[size_t(b)] = lo;
            if (has_pred) maj[size_t(b)] = majority_value(subset_votes, subset_values);
          }
          const MeanStd bon = mean_std(best), won = mean_std(worst);
          out[fmt::format("best@{}/mean", k)].push_back(bon.mean);
          out[fmt::format("best@{}/std", k)].push_back(bon.std);
          out[fmt::format("worst@{}/mean", k)].push_back(won.mean);
          out[fmt::format("worst@{}/std", k)].push_back(won.std);
          if (has_pred) {
            const MeanStd mon = mean_std(maj);
            out[fmt::format("maj@{}/mean", k)].push_back(mon.mean);
            out[fmt::format("maj@{}/std", k)].push_back(mon.std);
          }
        }
      }
    }
  }
  ValidationTable table;
  for (const auto& [source, vars] : per_prompt)
    for (const auto& [var, metrics] : vars)
      for (const auto& [metric, values] : metrics) table[source][var][metric] = numpy_mean(values);
  return table;
}

json validation_metric_names(const ValidationTable& table) {
  json out = json::object();
  for (const auto& [source, vars] : table) {
    const std::string core = vars.count("acc") ? "acc" : "reward";
    for (const auto& [var, metrics] : vars) {
      int64_t n_max = 0;
      for (const auto& [metric, value] : metrics) n_max = std::max(n_max, metric_n(metric));
      for (const auto& [metric, value] : metrics) {
        // verl tests `f"@{n_max}" in name`; with every N <= n_max that holds exactly when N == n_max.
        const bool is_core = var == core && metric_n(metric) == n_max &&
                             (starts_with(metric, "mean") || starts_with(metric, "maj") || starts_with(metric, "best"));
        out[fmt::format("{}/{}/{}/{}", is_core ? "val-core" : "val-aux", source, var, metric)] = value;
      }
    }
  }
  return out;
}

}  // namespace verlpp::tracking
