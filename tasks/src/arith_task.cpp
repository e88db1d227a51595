// The arithmetic demo task (see arith_task.hpp).
#include <verlpp/tasks/arith_task.hpp>
#include <verlpp/core/error.hpp>

#include <cinttypes>
#include <cstdio>
#include <random>
#include <tuple>

namespace verlpp::tasks {

nlohmann::json arith_row(int64_t a, char op, int64_t b, const std::string& split, int64_t index) {
  int64_t answer = 0;
  switch (op) {
    case '+':
      answer = a + b;
      break;
    case '-':
      answer = a - b;
      break;
    case '*':
      answer = a * b;
      break;
    default:
      throw Error("arith task", fmt::format("unknown operator '{}' (use + - *)", op));
  }
  const std::string truth = std::to_string(answer);
  return {{"data_source", "arith"},
          {"prompt", nlohmann::json::array({{{"role", "user"}, {"content", fmt::format("{}{}{}=", a, op, b)}}})},
          {"ability", "arithmetic"},
          {"reward_model", {{"style", "rule"}, {"ground_truth", truth}}},
          {"extra_info", {{"split", split}, {"index", index}}},
          {"response", truth}};
}

ArithSplits make_arith_splits(const ArithTaskOptions& o) {
  if (o.max_operand < 1) throw Error("arith task", fmt::format("max_operand {} must be >= 1", o.max_operand));
  if (o.operators.empty()) throw Error("arith task", "no operators");
  if (o.sft_count < 0 || o.train_count < 0 || o.val_count < 0)
    throw Error("arith task", fmt::format("split sizes must be >= 0 (sft {}, train {}, val {})", o.sft_count,
                                          o.train_count, o.val_count));
  std::vector<std::tuple<int64_t, char, int64_t>> problems;
  for (char op : o.operators)
    for (int64_t a = 0; a <= o.max_operand; ++a)
      for (int64_t b = 0; b <= o.max_operand; ++b) problems.emplace_back(a, op, b);
  const int64_t wanted = o.sft_count + o.train_count + o.val_count;
  if (wanted > int64_t(problems.size()))
    throw Error(
        "arith task",
        fmt::format("{} problems asked for (sft {} + train {} + val {}) but operands 0..{} with '{}' "
                    "give only {}",
                    wanted, o.sft_count, o.train_count, o.val_count, o.max_operand, o.operators, problems.size()));
  // Our own Fisher-Yates over mt19937_64: std::shuffle's algorithm is unspecified, and the
  // splits must be the same with every standard library.
  std::mt19937_64 rng(o.seed * 7919ULL + 17ULL);
  for (size_t i = problems.size(); i > 1; --i) std::swap(problems[i - 1], problems[rng() % i]);
  ArithSplits out;
  size_t next = 0;
  auto take = [&](int64_t count, const char* split, std::vector<nlohmann::json>& rows) {
    for (int64_t i = 0; i < count; ++i, ++next) {
      const auto& [a, op, b] = problems[next];
      rows.push_back(arith_row(a, op, b, split, i));
    }
  };
  take(o.val_count, "val", out.val);  // val first: its problems stay the same when the others grow
  take(o.train_count, "train", out.train);
  take(o.sft_count, "sft", out.sft);
  if (o.sft_carry_error < 0 || o.sft_carry_error > 1)
    throw Error("arith task", fmt::format("sft_carry_error {} must be in [0, 1]", o.sft_carry_error));
  // The coin is 53 bits of mt19937_64 (uniform_real_distribution's algorithm is unspecified).
  std::mt19937_64 teacher(o.teacher_seed);
  auto coin = [&teacher] { return double(teacher() >> 11) * 0x1.0p-53; };
  for (size_t i = 0; i < out.sft.size(); ++i) {
    const auto& [a, op, b] = problems[size_t(o.val_count + o.train_count) + i];
    const bool carries = op == '+' && (a % 10) + (b % 10) >= 10;
    if (carries && coin() < o.sft_carry_error) {
      out.sft[i]["response"] = std::to_string(sum_without_carry(a, b));
      out.sft[i]["extra_info"]["teacher"] = "dropped the carry";
    }
  }
  return out;
}

std::vector<nlohmann::json> make_arith_preference_pairs(const std::vector<nlohmann::json>& rows, uint64_t seed) {
  std::mt19937_64 rng(seed * 104729ULL + 3ULL);
  std::vector<nlohmann::json> out;
  for (const nlohmann::json& row : rows) {
    const std::string truth = row.at("reward_model").at("ground_truth").get<std::string>();
    const int64_t answer = std::stoll(truth);
    const std::string problem = row.at("prompt").at(0).at("content").get<std::string>();
    // "<a>+<b>=": the carry mistake needs both operands.
    int64_t a = -1, b = -1;
    char op = 0;
    if (std::sscanf(problem.c_str(), "%" SCNd64 "%c%" SCNd64 "=", &a, &op, &b) != 3) op = 0;
    // One wrong answer of each kind that applies (a sign drawn where there are two).
    std::vector<std::pair<int64_t, const char*>> wrong;
    if (op == '+' && a >= 0 && b >= 0 && (a % 10) + (b % 10) >= 10)
      wrong.push_back({sum_without_carry(a, b), "dropped the carry"});
    const bool down = (rng() & 1) == 0;
    wrong.push_back({down && answer >= 1 ? answer - 1 : answer + 1, "off by one"});
    const bool down_ten = (rng() & 1) == 0;
    wrong.push_back({down_ten && answer >= 10 ? answer - 10 : answer + 10, "off by ten"});
    if (answer >= 10) {
      std::string swapped = std::to_string(answer);
      std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
      if (swapped.front() != '0' && std::stoll(swapped) != answer)
        wrong.push_back({std::stoll(swapped), "digits swapped"});
    }
    for (const auto& [value, mistake] : wrong) {
      nlohmann::json extra = row.value("extra_info", nlohmann::json::object());
      if (!extra.is_object()) extra = nlohmann::json::object();
      extra["mistake"] = mistake;
      out.push_back({{"data_source", row.value("data_source", "arith")},
                     {"prompt", row.at("prompt")},
                     {"chosen", truth},
                     {"rejected", std::to_string(value)},
                     {"extra_info", extra}});
    }
  }
  return out;
}

int64_t sum_without_carry(int64_t a, int64_t b) { return (a % 10) + (b % 10) >= 10 ? a + b - 10 : a + b; }

}  // namespace verlpp::tasks
