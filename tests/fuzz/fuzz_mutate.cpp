// The mutator (see fuzz_driver.hpp).
#include "fuzz_driver.hpp"

#include <algorithm>

namespace verlpp::fuzz {
namespace {

// splitmix64: a small, fast, reproducible generator (the run's seed is printed).
uint64_t next(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

size_t below(uint64_t& rng, size_t n) { return n == 0 ? 0 : size_t(next(rng) % n); }

// Values that sit on parsers' edges, whatever the format.
const std::vector<std::string>& edge_values() {
  static const std::vector<std::string> values = {"0",
                                                  "-1",
                                                  "1e309",
                                                  "-1e309",
                                                  "99999999999999999999",
                                                  "9223372036854775807",
                                                  "18446744073709551616",
                                                  "null",
                                                  "true",
                                                  "[]",
                                                  "{}",
                                                  "\"\"",
                                                  "\"\\u0000\"",
                                                  "\"\\ud800\"",
                                                  "NaN",
                                                  "1.5",
                                                  "\xff",
                                                  "\xc3",
                                                  "\n",
                                                  "\"\\\\\"",
                                                  "4294967296"};
  return values;
}

}  // namespace

void mutate(std::string& input, const std::vector<std::string>& others, const std::vector<std::string>& dictionary,
            uint64_t& rng) {
  const size_t edits = 1 + below(rng, 8);
  for (size_t e = 0; e < edits; ++e) {
    const size_t at = below(rng, input.size() + 1);
    switch (below(rng, 10)) {
      case 0:  // flip a bit
        if (!input.empty()) input[below(rng, input.size())] ^= char(1u << below(rng, 8));
        break;
      case 1:  // a random byte
        if (!input.empty()) input[below(rng, input.size())] = char(below(rng, 256));
        break;
      case 2:  // delete a range
        if (!input.empty()) input.erase(at, std::min(input.size() - std::min(at, input.size()), 1 + below(rng, 32)));
        break;
      case 3: {  // duplicate a range
        const size_t from = below(rng, input.size() + 1), len = std::min(input.size() - from, 1 + below(rng, 64));
        input.insert(at, input.substr(from, len));
        break;
      }
      case 4:  // splice a piece of another input
        if (!others.empty()) {
          const std::string& other = others[below(rng, others.size())];
          const size_t from = below(rng, other.size() + 1);
          input.insert(at, other.substr(from, std::min(other.size() - from, 1 + below(rng, 128))));
        }
        break;
      case 5:  // a format keyword
        if (!dictionary.empty()) input.insert(at, dictionary[below(rng, dictionary.size())]);
        break;
      case 6:  // an edge value
        input.insert(at, edge_values()[below(rng, edge_values().size())]);
        break;
      case 7:  // truncate
        input.resize(at);
        break;
      case 8: {  // deep nesting at one point (beyond the parsers' depth limit now and then)
        const size_t depth = 1 + below(rng, 2) * below(rng, 2000);
        input.insert(at, std::string(depth, below(rng, 2) ? '[' : '{'));
        break;
      }
      default:  // swap two bytes
        if (input.size() > 1) std::swap(input[below(rng, input.size())], input[below(rng, input.size())]);
        break;
    }
  }
}

}  // namespace verlpp::fuzz
