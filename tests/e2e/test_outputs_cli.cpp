// The `verlpp` command's outputs as a user points them: a character device made with mknod and a
// FIFO with a reader (written in place, still a device or a FIFO afterwards), an existing
// folder or a missing parent (refused with the option and path named, before the model loads),
// /dev/full as a file and as standard output (exit 1, the file and "No space left on device"
// named), a training run whose metrics.jsonl cannot be written (stops with the file named, its
// checkpoints complete), and `verlpp generate` streaming its rows (a killed run keeps the
// finished ones) and failing when every prompt is refused.
#include "e2e_util.hpp"

#include <verlpp/model/safetensors.hpp>

#include <sys/sysmacros.h>

#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <utility>

using namespace verlpp;
using namespace verlpp::e2e;

namespace {

struct Run {
  int status = 0;      // the exit code (-1: killed by a signal)
  std::string output;  // stderr, and stdout unless the command redirects it
};

// `verlpp <args>` through the shell; `redirect` is appended after "2>&1" (e.g. ">/dev/full").
Run cli(const std::string& args, const std::string& redirect = "") {
  Run run;
  const std::string command = std::string(VERLPP_CLI) + " " + args + " 2>&1 " + redirect;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  REQUIRE(pipe);
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe.get())) run.output.append(buffer, n);
  const int status = ::pclose(pipe.release());
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

mode_t type_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & S_IFMT;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  std::unique_ptr<FILE, int (*)(FILE*)> ls(::popen(("ls -A " + dir).c_str(), "r"), ::pclose);
  char line[4096];
  while (std::fgets(line, sizeof line, ls.get())) {
    std::string name = line;
    if (!name.empty() && name.back() == '\n') name.pop_back();
    names.push_back(name);
  }
  return names;
}

std::vector<json> jsonl(const std::string& text) {
  std::vector<json> rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(json::parse(line));
  return rows;
}

// (prompt_index, sample_index) -> row.
std::map<std::pair<int64_t, int64_t>, json> by_sample(const std::vector<json>& rows) {
  std::map<std::pair<int64_t, int64_t>, json> out;
  for (const json& r : rows) out[{r["prompt_index"].get<int64_t>(), r["sample_index"].get<int64_t>()}] = r;
  return out;
}

// A folder with the tiny model (seeded weights), prompts, a mknod'd null device and a FIFO.
struct Fixture {
  std::string dir, model, prompts, device, fifo;
  Fixture() {
    dir = make_fixture("outputs");
    model = dir + "/model";
    prompts = dir + "/prompts.jsonl";
    std::ofstream(prompts) << R"({"text": "12+34="})"
                           << "\n"
                           << R"({"prompt": [{"role": "user", "content": "7+8="}]})"
                           << "\n";
    REQUIRE(::mkdir((dir + "/out").c_str(), 0755) == 0);
    device = dir + "/out/null";
    REQUIRE(::mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0);
    fifo = dir + "/out/fifo";
    REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  }
  std::string logits(const std::string& out) const { return "model logits " + model + " --ids 1,2,3 --out " + out; }
  std::string generate(const std::string& prompts_file, const std::string& rest) const {
    return "generate --model " + model + " --prompts " + prompts_file + " --max-new-tokens 4 --n 2 " + rest;
  }
  void expect_out_folder_unchanged() const {
    CHECK(entries(dir + "/out") == std::vector<std::string>{"fifo", "null"});
    CHECK(type_of(device) == S_IFCHR);
    CHECK(type_of(fifo) == S_IFIFO);
  }
};

// Runs `args` while a thread reads `fifo` to its end; returns the run and what the reader got.
std::pair<Run, std::string> with_fifo_reader(const std::string& fifo, const std::string& args) {
  std::string received;
  std::thread reader([&] { received = read_file(fifo); });
  Run run = cli(args);
  reader.join();
  return {run, received};
}

}  // namespace

TEST_CASE("verlpp model logits --out: a device and a FIFO are written in place", "[e2e][outputs]") {
  const Fixture f;
  Run regular = cli(f.logits(f.dir + "/logits.safetensors"));
  INFO(regular.output);
  REQUIRE(regular.status == 0);
  const std::string expected = read_file(f.dir + "/logits.safetensors");
  model::SafetensorsFile check(f.dir + "/logits.safetensors");
  REQUIRE(check.tensor("logits").size(0) == 1);

  Run device = cli(f.logits(f.device));
  INFO(device.output);
  CHECK(device.status == 0);
  CHECK_THAT(device.output, Catch::Contains("-> " + f.device));

  auto [fifo_run, received] = with_fifo_reader(f.fifo, f.logits(f.fifo));
  INFO(fifo_run.output);
  CHECK(fifo_run.status == 0);
  CHECK(received == expected);  // the reader got the whole file, byte for byte
  f.expect_out_folder_unchanged();
}

TEST_CASE("verlpp generate --output: a device and a FIFO are written in place", "[e2e][outputs]") {
  const Fixture f;
  Run regular = cli(f.generate(f.prompts, "--output " + f.dir + "/rows.jsonl"));
  INFO(regular.output);
  REQUIRE(regular.status == 0);
  const std::vector<json> expected = jsonl(read_file(f.dir + "/rows.jsonl"));
  REQUIRE(expected.size() == 4);  // 2 prompts x 2 samples

  Run device = cli(f.generate(f.prompts, "--output " + f.device));
  INFO(device.output);
  CHECK(device.status == 0);

  auto [fifo_run, received] = with_fifo_reader(f.fifo, f.generate(f.prompts, "--output " + f.fifo));
  INFO(fifo_run.output);
  CHECK(fifo_run.status == 0);
  CHECK(by_sample(jsonl(received)) == by_sample(expected));
  f.expect_out_folder_unchanged();
}

TEST_CASE("an output that is a folder or under a missing folder is refused before any work", "[e2e][outputs]") {
  const Fixture f;
  // The model folder does not exist: had the model been loaded first, that would be the error.
  const std::string no_model = f.dir + "/no-model";
  const std::string folder = f.dir + "/out", missing = f.dir + "/absent/sub/x.out";
  for (const std::string& model_args : {"model logits " + no_model + " --ids 1,2,3 --out ",
                                        "generate --model " + no_model + " --prompts " + f.prompts + " --output "}) {
    const std::string option = model_args.find("--out ") != std::string::npos ? "--out " : "--output ";
    Run into_folder = cli(model_args + folder);
    INFO(into_folder.output);
    CHECK(into_folder.status == 1);
    CHECK_THAT(into_folder.output, Catch::Contains("verlpp: error: " + option + folder + ": is an existing folder"));
    CHECK_THAT(into_folder.output, !Catch::Contains("no-model"));

    Run under_missing = cli(model_args + missing);
    INFO(under_missing.output);
    CHECK(under_missing.status == 1);
    CHECK_THAT(under_missing.output, Catch::Contains("verlpp: error: " + option + missing) &&
                                         Catch::Contains("the folder " + f.dir + "/absent/sub does not exist"));
    CHECK_THAT(under_missing.output, !Catch::Contains("no-model"));
  }
  CHECK_FALSE(exists(f.dir + "/absent"));
  f.expect_out_folder_unchanged();

  // model save: DST that exists as a file is refused before loading; the file is untouched.
  std::ofstream(f.dir + "/a-file") << "keep";
  Run save = cli("model save " + no_model + " " + f.dir + "/a-file");
  CHECK(save.status == 1);
  CHECK_THAT(save.output, Catch::Contains("DST " + f.dir + "/a-file") && Catch::Contains("not a folder"));
  CHECK(read_file(f.dir + "/a-file") == "keep");
}

TEST_CASE("a full device as the output file or as standard output fails with the reason", "[e2e][outputs]") {
  const Fixture f;
  const std::string full = "verlpp: error: writing /dev/full: No space left on device";
  const std::string full_stdout = "verlpp: error: writing standard output: No space left on device";

  Run logits = cli(f.logits("/dev/full"));
  CHECK(logits.status == 1);
  CHECK_THAT(logits.output, Catch::Contains(full));
  Run generate = cli(f.generate(f.prompts, "--output /dev/full"));
  CHECK(generate.status == 1);
  CHECK_THAT(generate.output, Catch::Contains(full));
  CHECK(type_of("/dev/full") == S_IFCHR);

  // Standard output on /dev/full, for commands that print a little and commands that print a lot.
  std::ofstream(f.dir + "/strings.jsonl") << "\"hello world\"\n\"12+34=46\"\n";
  std::string many;
  for (int i = 0; i < 20000; ++i) many += "\"line " + std::to_string(i) + "\"\n";
  std::ofstream(f.dir + "/many.jsonl") << many;
  for (const std::string& args :
       {"tokenize --tokenizer " + f.model + " --file " + f.dir + "/strings.jsonl",
        "tokenize --tokenizer " + f.model + " --file " + f.dir + "/many.jsonl",
        std::string("config --print --no-validate"), std::string("plugins"), std::string("--help"),
        f.generate(f.prompts, ""), f.generate(f.prompts, "--output -")}) {
    // The same command succeeds with a working standard output.
    Run fine = cli(args, ">/dev/null");
    INFO(args << "\n" << fine.output);
    CHECK(fine.status == 0);
    Run failed = cli(args, ">/dev/full");
    INFO(failed.output);
    CHECK(failed.status == 1);
    CHECK_THAT(failed.output, Catch::Contains(full_stdout));
  }
}

TEST_CASE("verlpp generate streams rows as samples finish; a killed run keeps them", "[e2e][outputs][generate]") {
  const Fixture f;
  // Many prompts and a KV pool for a few sequences at a time: samples finish in waves.
  std::string prompts;
  for (int i = 0; i < 48; ++i) prompts += "{\"text\": \"" + std::to_string(i) + "+" + std::to_string(i * 7) + "=\"}\n";
  std::ofstream(f.dir + "/many_prompts.jsonl") << prompts;
  const std::string args = "generate --model " + f.model + " --prompts " + f.dir +
                           "/many_prompts.jsonl --n 2 --max-new-tokens 32 --ignore-eos --kv-tokens 128 --seed 3 ";
  Run whole = cli(args + "--output " + f.dir + "/whole.jsonl");
  INFO(whole.output);
  REQUIRE(whole.status == 0);
  const auto expected = by_sample(jsonl(read_file(f.dir + "/whole.jsonl")));
  REQUIRE(expected.size() == 96);

  // The same run, killed once some rows are on disk.
  const std::string out = f.dir + "/killed.jsonl";
  std::vector<std::string> argv_text = {VERLPP_CLI};
  std::istringstream words(args + "--output " + out);
  for (std::string w; words >> w;) argv_text.push_back(w);
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, VERLPP_CLI, &actions, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&actions);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(3);
  while (jsonl(read_file(out)).size() < 4) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGKILL);
  const int status = wait_for(pid);
  CHECK(WIFSIGNALED(status));
  const std::string text = read_file(out);
  CHECK((text.empty() || text.back() == '\n'));  // whole rows only
  const std::vector<json> kept = jsonl(text);
  INFO(kept.size() << " rows on disk");
  CHECK(kept.size() >= 4);
  CHECK(kept.size() < expected.size());  // killed before the end
  for (const json& row : kept) {
    const auto key = std::make_pair(row["prompt_index"].get<int64_t>(), row["sample_index"].get<int64_t>());
    REQUIRE(expected.count(key) == 1);
    CHECK(row == expected.at(key));  // a finished row is the row the whole run wrote
  }
  CHECK(by_sample(kept).size() == kept.size());  // no row twice
}

TEST_CASE("verlpp generate: every prompt refused is an error; some refused is not", "[e2e][outputs][generate]") {
  const Fixture f;
  // An empty prompt and one longer than the tiny model's context (max_position_embeddings).
  std::string long_text;
  for (int i = 0; i < 6000; ++i) long_text += "1+";
  std::ofstream(f.dir + "/refused.jsonl") << R"({"text": ""})"
                                          << "\n"
                                          << "{\"text\": \"" << long_text << "\"}\n";
  Run all = cli(f.generate(f.dir + "/refused.jsonl", "--output " + f.dir + "/refused_rows.jsonl"));
  INFO(all.output);
  CHECK(all.status == 1);
  CHECK_THAT(all.output, Catch::Contains("verlpp: error: verlpp generate: every prompt was refused (2 of 2"));
  CHECK_THAT(all.output, Catch::Contains("generate: prompt 0: the prompt is empty"));
  const std::vector<json> rows = jsonl(read_file(f.dir + "/refused_rows.jsonl"));
  REQUIRE(rows.size() == 2);  // the refusals are on record
  for (const json& row : rows) {
    CHECK(row["finish_reason"] == "aborted");
    CHECK(row.contains("error"));
    CHECK(row["token_ids"].empty());
  }

  std::ofstream(f.dir + "/mixed.jsonl") << R"({"text": ""})"
                                        << "\n"
                                        << R"({"text": "12+34="})"
                                        << "\n";
  Run some = cli(f.generate(f.dir + "/mixed.jsonl", "--output " + f.dir + "/mixed_rows.jsonl"));
  INFO(some.output);
  CHECK(some.status == 0);
  CHECK_THAT(some.output, Catch::Contains("1 prompt(s) refused"));
  const auto mixed = by_sample(jsonl(read_file(f.dir + "/mixed_rows.jsonl")));
  CHECK(mixed.size() == 3);  // the refused prompt's row and the other prompt's 2 samples
  CHECK(mixed.at({0, 0}).contains("error"));
  CHECK(mixed.at({1, 1})["token_ids"].size() == 4);

  std::ofstream(f.dir + "/empty.jsonl") << "\n";
  Run none = cli(f.generate(f.dir + "/empty.jsonl", "--output " + f.dir + "/none.jsonl"));
  CHECK(none.status == 1);
  CHECK_THAT(none.output, Catch::Contains("--prompts " + f.dir + "/empty.jsonl: the file holds no prompt rows"));
  CHECK_FALSE(exists(f.dir + "/none.jsonl"));
}

TEST_CASE("verlpp train: a metrics.jsonl that cannot be written stops the run, checkpoints complete",
          "[e2e][outputs][train]") {
  const std::string dir = make_fixture("metrics-full");
  const std::string run = dir + "/grpo", config = write_config(dir, run, "grpo");
  run_to_end(config, run + "-first.log", {"trainer.total_training_steps=2"});
  REQUIRE(exists(run + "/global_step_2/trainer_state.json"));
  const std::vector<std::string> step2_files = entries(run + "/global_step_2/actor");

  // The disk under metrics.jsonl is full from here on; the run resumes from step 2.
  REQUIRE(::unlink((run + "/metrics.jsonl").c_str()) == 0);
  REQUIRE(::symlink("/dev/full", (run + "/metrics.jsonl").c_str()) == 0);
  const std::string log = run + "-full.log";
  const int status = wait_for(start_train(config, log));
  const std::string output = read_file(log);
  INFO(output);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK_THAT(output, Catch::Contains("verlpp: error: writing " + run + "/metrics.jsonl: No space left on device"));
  // It stopped at the first row it could not write (step 3 at the latest) ...
  CHECK_FALSE(exists(run + "/global_step_4"));
  CHECK(type_of(run + "/metrics.jsonl") == S_IFLNK);
  // ... and every checkpoint on disk is complete: the tracker's, and step 2's as it was.
  std::string latest = read_file(run + "/latest_checkpointed_iteration.txt");
  latest.erase(latest.find_last_not_of(" \n") + 1);
  for (const std::string& step : std::set<std::string>{"2", latest}) {
    const std::string folder = run + "/global_step_" + step;
    const json state = json::parse(read_file(folder + "/trainer_state.json"));
    CHECK(state["global_step"] == std::stoll(step));
    CHECK(entries(folder + "/actor") == step2_files);
    model::DecoderLM saved = model::load_pretrained(folder + "/actor");
    CHECK(saved.config().vocab_size == 384);
  }
  for (const std::string& name : entries(run)) CHECK(name.rfind(".incomplete_", 0) == std::string::npos);
}
