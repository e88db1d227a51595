// verl's Gsm8kInteraction: the last assistant message, with "#### " put in front unless it
// starts so, scored by the flexible gsm8k rule (format score 0, score 1); 1.0 ends the trajectory
// with "Your response is correct!", anything else asks for another try.
#include "builtin_interactions.hpp"
#include "builtin_tools.hpp"

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
    const double score = score_gsm8k_answer(
        content, kwargs.is_object() ? kwargs.value("ground_truth", nlohmann::json()) : nlohmann::json());
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
