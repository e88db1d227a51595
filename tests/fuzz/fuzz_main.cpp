// verlpp_fuzz <target> [--seconds S] [--seed N]: runs one fuzz target (fuzz_driver.hpp) for S
// seconds (VERLPP_FUZZ_SECONDS, default 3), first over its seeds (each must be accepted), then
// over mutations of them and of accepted mutants. Exit 0 with the counts when every input was
// accepted or refused with verlpp::Error; 1 with the input kept on disk when another exception
// escaped; a crash or a hang (30 s per input) names the file holding the input that caused it.
#include "fuzz_driver.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/core/log.hpp>

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <set>
#include <unistd.h>

using namespace verlpp;

namespace {

std::string g_input_path;  // where the input being run lies, for the crash handlers

void on_fatal_signal(int signal) {
  const std::string text = fmt::format("verlpp_fuzz: {} on the input kept in {}\n",
                                       signal == SIGALRM ? "a hang (30 s)" : strsignal(signal), g_input_path);
  (void)!::write(2, text.data(), text.size());
  if (signal == SIGALRM) ::_exit(3);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

void write_input(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  out.close();
  if (!out) throw std::runtime_error("cannot write the fuzz input " + path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: verlpp_fuzz <target> [--seconds S] [--seed N]; targets:";
    for (const auto& t : fuzz::all_targets()) std::cerr << " " << t.name;
    std::cerr << "\n";
    return 2;
  }
  const std::string wanted = argv[1];
  double seconds = std::getenv("VERLPP_FUZZ_SECONDS") ? std::atof(std::getenv("VERLPP_FUZZ_SECONDS")) : 3.0;
  uint64_t rng = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--seconds") seconds = std::atof(argv[i + 1]);
    if (std::string(argv[i]) == "--seed") rng = std::strtoull(argv[i + 1], nullptr, 10);
  }
  const uint64_t seed = rng;
  std::vector<fuzz::Target> targets = fuzz::all_targets();
  auto it = std::find_if(targets.begin(), targets.end(), [&](const fuzz::Target& t) { return t.name == wanted; });
  if (it == targets.end()) {
    std::cerr << "verlpp_fuzz: no target '" << wanted << "'\n";
    return 2;
  }
  const fuzz::Target& target = *it;
  // Accepted inputs may warn (a dataset row without a ground truth); thousands of such lines
  // would bury the summary.
  set_log_threshold(LogLevel::error);

  char folder_template[] = "/tmp/verlpp-fuzz-XXXXXX";
  const std::string folder = ::mkdtemp(folder_template);
  g_input_path = folder + "/" + target.file_name;
  for (int s : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGALRM}) std::signal(s, on_fatal_signal);

  size_t inputs = 0, accepted = 0, refused = 0;
  std::set<std::string> messages;  // distinct refusals, a rough measure of paths reached
  std::vector<std::string> pool = target.seeds();
  const size_t seed_count = pool.size();
  // Returns false (after reporting) when an input ended in something other than Error.
  auto run = [&](const std::string& input, bool must_accept) {
    write_input(g_input_path, input);
    ++inputs;
    ::alarm(30);
    try {
      target.run_one(folder);
      ::alarm(0);
      ++accepted;
      return true;
    } catch (const Error& e) {
      ::alarm(0);
      ++refused;
      messages.insert(std::string(e.message()).substr(0, 40));
      if (!must_accept) return true;
      std::cerr << fmt::format("verlpp_fuzz {}: a seed was refused: {}\n", target.name, e.what());
    } catch (const std::exception& e) {
      ::alarm(0);
      std::cerr << fmt::format("verlpp_fuzz {}: an exception other than verlpp::Error escaped: {}\n", target.name,
                               e.what());
    }
    std::cerr << fmt::format("the input is kept in {} (run seed {})\n", g_input_path, seed);
    return false;
  };
  for (const std::string& s : pool)
    if (!run(s, /*must_accept=*/true)) return 1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    std::string input = pool[size_t(rng % pool.size())];
    fuzz::mutate(input, pool, target.dictionary, rng);
    const size_t before = accepted;
    if (!run(input, /*must_accept=*/false)) return 1;
    // Accepted mutants become parents too (a few, so the pool stays near the seeds' shapes).
    if (accepted > before && pool.size() < seed_count + 64) pool.push_back(std::move(input));
  }
  std::cout << fmt::format(
      "verlpp_fuzz {}: {} inputs in {:.1f} s ({} accepted, {} refused with an error, {} distinct "
      "messages), no crash; run seed {}\n",
      target.name, inputs, seconds, accepted, refused, messages.size(), seed);
  std::system(("rm -rf " + folder).c_str());
  return 0;
}
