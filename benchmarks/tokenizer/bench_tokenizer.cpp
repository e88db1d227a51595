// verlpp-bench-tokenizer TOKENIZER CORPUS.jsonl [PASSES]: load time, encode throughput on the
// first pass over the corpus (empty word cache) and the median of later passes (warm cache),
// and decode throughput, single-threaded. Prints a table, then one JSON line for scripts.
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

    std::vector<std::vector<int32_t>> ids(corpus.size());
    std::vector<double> encode_s;
    size_t num_tokens = 0;
    for (int pass = 0; pass < passes; ++pass) {
      start = std::chrono::steady_clock::now();
      for (size_t i = 0; i < corpus.size(); ++i) ids[i] = tokenizer.encode(corpus[i]);
      encode_s.push_back(seconds_since(start));
    }
    for (const auto& v : ids) num_tokens += v.size();
    const double cold_s = encode_s.front();
    std::vector<double> warm(encode_s.begin() + 1, encode_s.end());
    std::nth_element(warm.begin(), warm.begin() + long(warm.size() / 2), warm.end());
    const double warm_s = warm[warm.size() / 2];

    std::vector<double> decode_s;
    size_t decoded_bytes = 0;
    for (int pass = 0; pass < passes; ++pass) {
      decoded_bytes = 0;
      start = std::chrono::steady_clock::now();
      for (const auto& v : ids) decoded_bytes += tokenizer.decode(v).size();
      decode_s.push_back(seconds_since(start));
    }
    std::nth_element(decode_s.begin(), decode_s.begin() + long(decode_s.size() / 2), decode_s.end());
    const double dec_s = decode_s[decode_s.size() / 2];

    const double mb = double(bytes) / 1e6;
    std::cout << fmt::format("tokenizer {}\ncorpus {} strings, {} bytes, {} tokens; {} passes\n", argv[1],
                             corpus.size(), bytes, num_tokens, passes);
    std::cout << fmt::format("  load            {:8.3f} s\n", load_s);
    std::cout << fmt::format("  encode (cold)   {:8.2f} MB/s\n", mb / cold_s);
    std::cout << fmt::format("  encode (warm)   {:8.2f} MB/s  (median)\n", mb / warm_s);
    std::cout << fmt::format("  decode          {:8.2f} MB/s  (median)\n", double(decoded_bytes) / 1e6 / dec_s);
    nlohmann::json out = {{"tokenizer", argv[1]},     {"strings", corpus.size()},    {"bytes", bytes},
                          {"tokens", num_tokens},     {"passes", passes},            {"load_s", load_s},
                          {"encode_cold_mb_s", mb / cold_s}, {"encode_warm_mb_s", mb / warm_s},
                          {"decode_mb_s", double(decoded_bytes) / 1e6 / dec_s}};
    std::cout << "JSON " << out.dump() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "verlpp-bench-tokenizer: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
