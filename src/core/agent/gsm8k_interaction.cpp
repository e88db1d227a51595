// verl's Gsm8kInteraction: the last assistant message, with "#### " put in front unless it
// starts so, scored by the flexible gsm8k rule (format score 0, score 1); 1.0 ends the trajectory
// with "Your response is correct!", anything else asks for another try.
#include "builtin_interactions.hpp"

#include <verlpp/agent/tool.hpp>
#include <verlpp/reward/reward.hpp>

namespace verlpp::agent {
namespace {

class Gsm8kInteraction : public Interaction {
 public:
  explicit Gsm8kInteraction(const std::string& name) : Interaction(name) {}

  InteractionReply respond(const nlohmann::json& messages, const nlohmann::json& kwargs) const override {
    std::string content;
    if (messages.is_array())
      for (auto it = messages.rbegin(); it != messages.rend(); ++it)
        if (it->is_object() && it->value("role", std::string()) == "assistant") {
          if ((*it)["content"].is_string()) content = (*it)["content"].get<std::string>();
          break;
        }
    const std::string response = content.rfind("#### ", 0) == 0 ? content : "#### " + content;
    double score = 0.0;  // verl compares against ground_truth=None: never correct
    if (kwargs.is_object() && kwargs.contains("ground_truth") && !kwargs["ground_truth"].is_null()) {
      const auto& truth = kwargs["ground_truth"];
      // A non-string ground truth is compared as Python's str() of it, as verl.tools' Gsm8kTool here.
      score = reward::rules::gsm8k(response, truth.is_string() ? truth.get<std::string>() : python_str(truth),
                                   /*flexible=*/true, /*format_score=*/0.0, /*score=*/1.0);
    }
    InteractionReply reply;
    reply.reward = score;
    reply.terminate = score == 1.0;
    reply.content = reply.terminate ? "Your response is correct!"
                                    : "Your response is incorrect! You need to reflect on your answer and try again.";
    return reply;
  }
};

}  // namespace

std::unique_ptr<Interaction> make_gsm8k_interaction(const std::string& name, const nlohmann::json&,
                                                    const std::string&) {
  return std::make_unique<Gsm8kInteraction>(name);
}

}  // namespace verlpp::agent
