// The built-in tool classes (registered in tool_classes() by tool.cpp).
#pragma once

#include <verlpp/agent/tool.hpp>

namespace verlpp::agent {

// verl.tools.gsm8k_tool.Gsm8kTool: scores the answer it is given against the sample's
// create_kwargs.ground_truth with verl's flexible gsm8k rule.
std::unique_ptr<Tool> make_gsm8k_tool(const nlohmann::json& config, const nlohmann::ordered_json& schema,
                                      const std::string& where);
// verlpp.tools.Calculator: exact rational arithmetic on {"expression": "..."}.
std::unique_ptr<Tool> make_calculator_tool(const nlohmann::json& config, const nlohmann::ordered_json& schema,
                                           const std::string& where);
// verlpp.tools.Sandbox: the call's code run by a command in a child process with limits.
std::unique_ptr<Tool> make_sandbox_tool(const nlohmann::json& config, const nlohmann::ordered_json& schema,
                                        const std::string& where);
// verlpp.tools.SharedLibrary: a C function of a user's shared object (tool_abi.h).
std::unique_ptr<Tool> make_library_tool(const nlohmann::json& config, const nlohmann::ordered_json& schema,
                                        const std::string& where);
// verl's GSM8K grading of an answer as its Gsm8kTool and Gsm8kInteraction do it: "#### " put in
// front unless the answer starts so, then the flexible gsm8k rule (format score 0, score 1)
// against `ground_truth` (a non-string compared as Python's str() of it; null: never correct).
double score_gsm8k_answer(const std::string& answer, const nlohmann::json& ground_truth);
// The calculator's reply for `expression` (its digits, or "p/q"); Error as the tool raises it.
std::string calculate(const std::string& expression);

}  // namespace verlpp::agent
