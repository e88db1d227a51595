// verlpp-bench-tokenizer TOKENIZER CORPUS.jsonl [PASSES]: load time, then the best of PASSES
// passes over the corpus for: encode with an empty word cache (cleared before each pass: cold),
// encode with the cache filled (warm), and decode; single-threaded. Best-of-N because the
// machines these run on are shared. Prints a table, then one JSON line for scripts.
// MB/s counts UTF-8 input bytes (encode) or output bytes (decode), 1 MB = 1e6 bytes.
#include <verlpp/model/tokenizer.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: verlpp-bench-tokenizer TOKENIZER CORPUS.jsonl [PASSES]\n";
    return 2;
  }
  const int passes = argc > 3 ? std::max(2, std::atoi(argv[3])) : 20;
  try {
    std::vector<std::string> corpus;
    std::ifstream in(argv[2]);
    if (!in) throw std::runtime_error(std::string("cannot open ") + argv[2]);
    size_t bytes = 0;
    for (std::string line; std::getline(in, line);) {
      corpus.push_back(nlohmann::json::parse(line).get<std::string>());
      bytes += corpus.back().size();
    }

    auto start = std::chrono::steady_clock::now();
    auto tokenizer = verlpp::model::Tokenizer::from_file(argv[1]);
    const double load_s = seconds_since(start);

    std::vector<verlpp::TokenIds> ids(corpus.size());
    auto encode_pass = [&](bool cold) {
      if (cold) tokenizer.clear_cache();
      auto t0 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < corpus.size(); ++i) ids[i] = tokenizer.encode(corpus[i]);
      return seconds_since(t0);
    };
    double cold_s = 1e30, warm_s = 1e30, dec_s = 1e30;
    for (int pass = 0; pass < passes; ++pass) cold_s = std::min(cold_s, encode_pass(true));
    for (int pass = 0; pass < passes; ++pass) warm_s = std::min(warm_s, encode_pass(false));
    size_t num_tokens = 0;
    for (const auto& v : ids) num_tokens += v.size();
    size_t decoded_bytes = 0;
    for (int pass = 0; pass < passes; ++pass) {
      decoded_bytes = 0;
      start = std::chrono::steady_clock::now();
      for (const auto& v : ids) decoded_bytes += tokenizer.decode(v).size();
      dec_s = std::min(dec_s, seconds_since(start));
    }

    const double mb = double(bytes) / 1e6;
    std::cout << fmt::format("tokenizer {}\ncorpus {} strings, {} bytes, {} tokens; {} passes\n", argv[1],
                             corpus.size(), bytes, num_tokens, passes);
    std::cout << fmt::format("  load            {:8.3f} s\n", load_s);
    std::cout << fmt::format("  encode (cold)   {:8.2f} MB/s\n", mb / cold_s);
    std::cout << fmt::format("  encode (warm)   {:8.2f} MB/s\n", mb / warm_s);
    std::cout << fmt::format("  decode          {:8.2f} MB/s\n", double(decoded_bytes) / 1e6 / dec_s);
    nlohmann::json out = {{"tokenizer", argv[1]},
                          {"strings", corpus.size()},
                          {"bytes", bytes},
                          {"tokens", num_tokens},
                          {"passes", passes},
                          {"load_s", load_s},
                          {"encode_cold_mb_s", mb / cold_s},
                          {"encode_warm_mb_s", mb / warm_s},
                          {"decode_mb_s", double(decoded_bytes) / 1e6 / dec_s}};
    std::cout << "JSON " << out.dump() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "verlpp-bench-tokenizer: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
