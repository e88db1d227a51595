// trim_metrics, the cut of metrics.jsonl back to a checkpoint on resume: the rows up to the
// checkpoint's step stay byte for byte, later rows and an unterminated last line go, missing or
// repeated steps are reported, and a line the trainer never writes stops it without a change.
#include <verlpp/tracking/metrics_log.hpp>
#include <verlpp/core/error.hpp>

#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using Catch::Contains;
using namespace verlpp::tracking;

namespace {

std::string fresh_file(const std::string& name) {
  const std::string dir = "/tmp/verlpp-metrics-log-test-" + std::to_string(getpid());
  REQUIRE(std::system(("mkdir -p '" + dir + "'").c_str()) == 0);
  const std::string path = dir + "/" + name;
  std::remove(path.c_str());
  return path;
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The row the trainer writes for `step` (one line), with a value that differs per step.
std::string row(int64_t step) {
  return "{\"actor/pg_loss\":" + std::to_string(0.5 / double(step + 1)) + ",\"step\":" + std::to_string(step) + "}\n";
}

std::string rows(int64_t first, int64_t last) {
  std::string out;
  for (int64_t s = first; s <= last; ++s) out += row(s);
  return out;
}

}  // namespace

TEST_CASE("trim_metrics: rows past the checkpoint and a torn last line are dropped", "[metrics]") {
  const std::string path = fresh_file("torn.jsonl");
  // Steps 0 (validation before training) to 5, then step 6 cut off mid-write.
  const std::string torn = row(6).substr(0, 9);
  write(path, rows(0, 5) + torn);
  const MetricsTrim trim = trim_metrics(path, 3);
  CHECK(read(path) == rows(0, 3));
  CHECK(trim.kept_steps == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(trim.dropped_steps == std::vector<int64_t>{4, 5});
  CHECK(trim.torn_last_line);
  CHECK(trim.missing_steps.empty());
  const auto notes = trim.notes(path, 3);
  REQUIRE(notes.size() == 2);
  CHECK_THAT(notes[0], Contains(path) && Contains("incomplete last line"));
  CHECK_THAT(notes[1], Contains("steps 4, 5") && Contains("step 3"));
  CHECK_FALSE(std::ifstream(path + ".tmp").good());  // the temporary file is renamed into place
}

TEST_CASE("trim_metrics: a torn line right after the checkpoint's row is the only change", "[metrics]") {
  const std::string path = fresh_file("torn-only.jsonl");
  write(path, rows(1, 3) + "{\"actor/pg");
  const MetricsTrim trim = trim_metrics(path, 3);
  CHECK(read(path) == rows(1, 3));
  CHECK(trim.torn_last_line);
  CHECK(trim.dropped_steps.empty());
}

TEST_CASE("trim_metrics: an exact file is left alone; an absent one is nothing to do", "[metrics]") {
  const std::string path = fresh_file("exact.jsonl");
  CHECK(trim_metrics(path, 4).kept_steps.empty());
  CHECK_FALSE(std::ifstream(path).good());
  write(path, rows(0, 4));
  const MetricsTrim trim = trim_metrics(path, 4);
  CHECK(read(path) == rows(0, 4));
  CHECK(trim.notes(path, 4).empty());
}

TEST_CASE("trim_metrics: missing and repeated steps are reported", "[metrics]") {
  const std::string path = fresh_file("gaps.jsonl");
  // What an interruption between a checkpoint and its row used to leave: step 3 lost.
  write(path, rows(1, 2) + rows(4, 5) + row(5));
  const MetricsTrim trim = trim_metrics(path, 5);
  CHECK(trim.missing_steps == std::vector<int64_t>{3});
  CHECK(trim.repeated_steps == std::vector<int64_t>{5});
  const auto notes = trim.notes(path, 5);
  REQUIRE(notes.size() == 2);
  CHECK_THAT(notes[0], Contains("no rows for steps 3") && Contains("step 2 or earlier"));
  CHECK_THAT(notes[1], Contains("more than one row for steps 5"));
}

TEST_CASE("trim_metrics: a malformed complete line is an error naming file:line, and nothing changes", "[metrics]") {
  const std::string path = fresh_file("bad.jsonl");
  const std::string text = rows(1, 2) + "not json\n" + rows(3, 5);
  write(path, text);
  CHECK_THROWS_WITH(trim_metrics(path, 2), Contains(path + ":3") && Contains("malformed"));
  CHECK(read(path) == text);
  write(path, rows(1, 2) + "{\"val/acc\": 0.5}\n");
  CHECK_THROWS_WITH(trim_metrics(path, 2), Contains(path + ":3") && Contains("\"step\""));
}

TEST_CASE("sync_file: an absent file is an error naming it", "[metrics]") {
  const std::string path = fresh_file("absent.jsonl");
  CHECK_THROWS_WITH(sync_file(path), Contains(path));
  write(path, row(1));
  CHECK_NOTHROW(sync_file(path));
}
