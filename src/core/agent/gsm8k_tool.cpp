// verl's Gsm8kTool as its agent loop calls it: each call is a fresh instance (previous reward
// 0), so the reply is "Current parsed answer=<repr> reward=<score>" and the call's tool reward
// is 0.0 for a correct answer and -0.05 otherwise.
#include "builtin_tools.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/reward/reward.hpp>

namespace verlpp::agent {
namespace {

// Python's type name of a JSON value, for the AttributeError text verl's tool would raise.
const char* python_type(const nlohmann::ordered_json& value) {
  if (value.is_string()) return "str";
  if (value.is_array()) return "list";
  if (value.is_boolean()) return "bool";
  if (value.is_null()) return "NoneType";
  if (value.is_number_float()) return "float";
  return "int";
}

class Gsm8kTool : public Tool {
 public:
  Gsm8kTool(const nlohmann::ordered_json& schema, const std::string& where) : Tool(schema, where) {}

  ToolResult call(const nlohmann::ordered_json& arguments, const nlohmann::json& create_kwargs) const override {
    if (!arguments.is_object())
      throw Error("gsm8k tool", fmt::format("'{}' object has no attribute 'get'", python_type(arguments)));
    const std::string answer = arguments.contains("answer") ? python_str(arguments["answer"]) : std::string();
    const double score = score_gsm8k_answer(
        answer, create_kwargs.is_object() ? create_kwargs.value("ground_truth", nlohmann::json()) : nlohmann::json());
    ToolResult result;
    result.reward = score > 0.0 ? 0.0 : -0.05;
    result.text = "Current parsed answer=" + python_repr(answer) + " reward=" + python_str(score);
    return result;
  }
};

}  // namespace

double score_gsm8k_answer(const std::string& answer, const nlohmann::json& ground_truth) {
  if (ground_truth.is_null()) return 0.0;  // verl compares against None
  const std::string response = answer.rfind("#### ", 0) == 0 ? answer : "#### " + answer;
  return reward::rules::gsm8k(response,
                              ground_truth.is_string() ? ground_truth.get<std::string>() : python_str(ground_truth),
                              /*flexible=*/true, /*format_score=*/0.0, /*score=*/1.0);
}

std::unique_ptr<Tool> make_gsm8k_tool(const nlohmann::json&, const nlohmann::ordered_json& schema,
                                      const std::string& where) {
  return std::make_unique<Gsm8kTool>(schema, where);
}

}  // namespace verlpp::agent
