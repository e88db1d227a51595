// Generation dumps (verl's _dump_generations) and the choice of logged validation samples.
#include <verlpp/tracking/generation_dump.hpp>

#include "../util/files.hpp"

#include <algorithm>
#include <random>

namespace verlpp::tracking {

std::string dump_generations(const std::string& dir, int64_t step, const std::vector<GenerationRecord>& records) {
  files::make_dirs(dir);
  std::string text;
  for (const GenerationRecord& r : records) {
    nlohmann::ordered_json line = {
        {"input", r.input}, {"output", r.output}, {"gts", r.gts}, {"score", r.score}, {"step", step}};
    for (const auto& [key, value] : r.extra.items()) line[key] = value;
    text += line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  const std::string path = files::join(dir, std::to_string(step) + ".jsonl");
  files::write_text(path, text);
  return path;
}

std::vector<ValGeneration> pick_val_generations(std::vector<ValGeneration> samples, int64_t n) {
  if (n <= 0) return {};
  std::stable_sort(samples.begin(), samples.end(),
                   [](const ValGeneration& a, const ValGeneration& b) { return a.input < b.input; });
  // numpy's legacy RandomState(42): MT19937 seeded with init_genrand(42) (std::mt19937's seeding),
  // and shuffle's Fisher-Yates from the end, each j drawn in [0, i] by masking 32-bit outputs to
  // the smallest all-ones mask covering i and rejecting values above i.
  std::mt19937 mt(42);
  for (size_t i = samples.size(); i-- > 1;) {
    uint32_t mask = uint32_t(i);
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    uint32_t j = 0;
    do j = uint32_t(mt()) & mask;
    while (j > i);
    std::swap(samples[i], samples[j]);
  }
  if (int64_t(samples.size()) > n) samples.resize(size_t(n));
  return samples;
}

}  // namespace verlpp::tracking
