// The built-in interaction classes (registered in interaction_classes() by interaction.cpp).
#pragma once

#include <verlpp/agent/interaction.hpp>

namespace verlpp::agent {

// verl.interactions.gsm8k_interaction.Gsm8kInteraction: scores the model's last turn against
// interaction_kwargs.ground_truth with verl's flexible gsm8k rule; a correct answer ends the
// trajectory, a wrong one asks the model to try again.
std::unique_ptr<Interaction> make_gsm8k_interaction(const std::string& name, const nlohmann::json& config,
                                                    const std::string& where);

}  // namespace verlpp::agent
