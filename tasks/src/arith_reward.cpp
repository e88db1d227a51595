// The arithmetic task's reward source, registered in libverlpp's reward registry like any
// user's source.
#include <verlpp/reward/reward.hpp>
#include <verlpp/tasks/arith_task.hpp>

namespace verlpp::tasks {

double arith_reward(const std::string& response, const std::string& ground_truth) {
  // The last run of digits, with a '-' directly before it.
  const size_t end = response.find_last_of("0123456789");
  if (end == std::string::npos) return 0.0;
  size_t begin = end;
  while (begin > 0 && response[begin - 1] >= '0' && response[begin - 1] <= '9') --begin;
  if (begin > 0 && response[begin - 1] == '-') --begin;
  const std::string answer = response.substr(begin, end - begin + 1);
  std::string truth = ground_truth;
  truth.erase(0, truth.find_first_not_of(" \t\n"));
  truth.erase(truth.find_last_not_of(" \t\n") + 1);
  // Compare as integers written canonically: the model must write the number.
  return answer == truth ? 1.0 : 0.0;
}

void register_arith_reward() {
  // A function-local static: registered once however many times a program asks.
  static const bool registered = reward::reward_sources().add("arith", [](const reward::RewardInput& in) {
    const std::string truth = in.ground_truth.is_null()     ? std::string()
                              : in.ground_truth.is_string() ? in.ground_truth.get<std::string>()
                                                            : in.ground_truth.dump();
    return reward::RewardResult{arith_reward(in.response, truth)};
  });
  (void)registered;
}

ArithTaskOptions arith_task_options(const config::DemoSettings& demo) {
  ArithTaskOptions o;
  o.max_operand = demo.max_operand;
  o.operators = demo.operators;
  o.seed = demo.seed;
  o.sft_count = demo.sft_count;
  o.train_count = demo.train_count;
  o.val_count = demo.val_count;
  o.sft_carry_error = demo.sft_carry_error;
  return o;
}

}  // namespace verlpp::tasks
