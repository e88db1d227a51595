// Validation metrics as verl computes them (verl commit b178a3cd, metric_utils.py's
// process_validation_metrics / bootstrap_metric / calc_maj_val and ray_trainer.py's
// _val_metrics_update): the responses are grouped by data source and prompt; for each reward
// variable ("reward" and every numeric reward extra such as "acc") a prompt's N responses give
// mean@N and std@N, and bootstrapped subsets of n = 2, 4, 8, ..., N give best@n, worst@n and
// (with a "pred" variable to vote on) maj@n; each figure is averaged over the source's prompts
// and named val-core/<source>/<var>/<metric> or val-aux/<source>/<var>/<metric>.
//
// The bootstrap draws the same indices as verl: numpy's legacy RandomState re-seeded with 42 at
// every call (MT19937, init_genrand seeding, randint's masked rejection), and sums run in numpy's
// pairwise order. What can still differ from verl's figures is the last bits of a sum where
// numpy's build adds in another order (docs/training.md, "Validation").
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace verlpp::tracking {

// One evaluation's scored responses, one entry per response in every list (verl's
// data_sources, sample_uids and reward_extra_infos_dict). A variable's value is a number or a
// boolean (a numeric variable), a string (a vote, such as "pred"), or null (not reported for
// that response).
struct ValidationSamples {
  std::vector<std::string> data_sources;
  std::vector<std::string> uids;  // the prompt each response answers
  std::map<std::string, std::vector<nlohmann::json>> vars;
};

// data source -> variable -> metric name ("mean@4", "best@2/std", ...) -> value.
using ValidationTable = std::map<std::string, std::map<std::string, std::map<std::string, double>>>;

// The bootstrap's size and seed (verl: 1000 subsets, seed 42).
struct BootstrapOptions {
  int64_t n_bootstrap = 1000;
  uint32_t seed = 42;
};

// A statistic's mean and (population) standard deviation over the bootstrap subsets.
struct MeanStd {
  double mean = 0, std = 0;
};

// numpy's np.random.seed(seed); np.random.choice(n_data, size=(rows, cols), replace=True), row
// after row: rows * cols indices in [0, n_data). Error for n_data < 1 or a negative size.
std::vector<int64_t> numpy_choice_indices(int64_t n_data, int64_t rows, int64_t cols, uint32_t seed);

// numpy's float64 sum (np.sum / np.mean's reduction): pairwise, in blocks of 8 partial sums.
double numpy_sum(const double* values, int64_t count);

// verl's subset sizes for N responses: 2, 4, 8, ... while below N, then N; none for N <= 1.
std::vector<int64_t> bootstrap_subset_sizes(int64_t n);

// verl's calc_maj_val over one subset (votes[k] with values[k]): the value of the first response
// that cast the most frequent vote; a tie goes to the vote that appeared first.
double majority_value(const std::vector<const nlohmann::json*>& votes, const std::vector<double>& values);

// verl's bootstrap_metric for one statistic: `reduce` maps a subset (indices into the data,
// `count` of them) to a number, over the subsets of numpy_choice_indices(n_data, n_bootstrap,
// subset_size, seed).
MeanStd bootstrap_metric(int64_t n_data, int64_t subset_size,
                         const std::function<double(const int64_t* subset, int64_t count)>& reduce,
                         const BootstrapOptions& options = {});

// verl's process_validation_metrics. A variable counts for a prompt when all of that prompt's
// values are numbers or booleans (verl skips string variables; nulls, as from a source whose
// scorer does not report the variable, leave it out for that prompt). maj@n votes on "pred"
// when the prompt has a value of it for every response. Error when the lists differ in length.
ValidationTable process_validation_metrics(const ValidationSamples& samples, const BootstrapOptions& options = {});

// verl's _val_metrics_update naming: for each source the core variable is "acc" when the source
// has it, else "reward"; its mean@N, best@N/{mean,std} and maj@N/{mean,std} at the largest N go
// to val-core/<source>/<var>/<metric>, everything else to val-aux/<source>/<var>/<metric>.
nlohmann::json validation_metric_names(const ValidationTable& table);

}  // namespace verlpp::tracking
