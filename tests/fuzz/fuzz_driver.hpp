// A time-bounded mutation fuzzer for the parsers of user files. Each target takes one input (the
// bytes of a file a user could give) and must either accept it or refuse it with verlpp::Error;
// a crash, a hang or any other exception escaping is a finding. libFuzzer would guide mutations
// by coverage, but it needs clang's instrumentation of the whole library and this project builds
// with GCC; a blind mutator over good seeds (structural JSON tokens, splices, truncations, deep
// nesting) still reaches the error paths that matter, within the seconds CI can give it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace verlpp::fuzz {

// One parser under test. The driver writes each input to `folder`/`file_name` and calls
// run_one(folder), which reads it through the parser's real entry point (as a user's file).
struct Target {
  std::string name;                                        // the ctest name's suffix (fuzz_<name>)
  std::string file_name;                                   // what the input is called on disk
  std::function<std::vector<std::string>()> seeds;         // valid inputs to start from
  std::function<void(const std::string& folder)> run_one;  // throws verlpp::Error to refuse
  std::vector<std::string> dictionary;                     // tokens worth splicing in (format keywords)
};

// Every target (fuzz_targets.cpp).
std::vector<Target> all_targets();

// Mutates `input` in place with 1..8 random edits (flips, inserts, deletes, splices from
// `others`, dictionary tokens, truncation, deep nesting).
void mutate(std::string& input, const std::vector<std::string>& others, const std::vector<std::string>& dictionary,
            uint64_t& rng);

}  // namespace verlpp::fuzz
