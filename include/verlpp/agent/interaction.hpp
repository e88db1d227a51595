// Interactions: a simulated user that answers the model's turn (verl's BaseInteraction, named
// by actor_rollout_ref.rollout.multi_turn.interaction_config_path). After an assistant turn with
// no tool call, the trajectory's interaction reads the conversation so far and replies with a
// user message (appended with mask 0, as a tool segment), a turn score, and whether the
// trajectory ends. verl's config file is read as it is:
//   interaction:
//     - name: gsm8k
//       class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction
//       config: {}
// A row picks its interaction by extra_info.interaction_kwargs.name; the other interaction_kwargs
// (verl's ground_truth, query) reach the interaction with each reply it is asked for.
#pragma once

#include <verlpp/core/registry.hpp>

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace verlpp::agent {

// What an interaction answers (verl's generate_response tuple).
struct InteractionReply {
  bool terminate = false;        // should_terminate_sequence: the trajectory ends after this reply
  std::string content;           // the user message the model reads next
  std::optional<double> reward;  // the turn's score (verl's turn_scores), if the interaction gives one
};

class Interaction {
 public:
  virtual ~Interaction() = default;
  // The name rows pick it by (interaction_kwargs.name).
  const std::string& name() const { return name_; }
  // The reply to the conversation `messages` ([{"role", "content"}], the model's last turn
  // last, decoded without special tokens) for a row's `interaction_kwargs`. Called from several
  // threads at once; each call stands alone (verl's start_interaction state is the kwargs). An
  // exception ends the trajectory's loop as an Error naming the row.
  virtual InteractionReply respond(const nlohmann::json& messages, const nlohmann::json& interaction_kwargs) const = 0;

 protected:
  explicit Interaction(std::string name) : name_(std::move(name)) {}

 private:
  std::string name_;
};

// Builds an interaction named `name` from its config entry's `config` mapping; `where` names the
// entry in errors.
using InteractionClass = std::function<std::unique_ptr<Interaction>(
    const std::string& name, const nlohmann::json& config, const std::string& where)>;

// The interaction classes by class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction and
// what programs register.
Registry<InteractionClass>& interaction_classes();

// The interactions of one config, by name.
class InteractionSet {
 public:
  // Adds an interaction; a second one of the same name is an Error.
  void add(std::shared_ptr<const Interaction> interaction);
  // The interaction called `name`, or null.
  const Interaction* find(const std::string& name) const;
  std::vector<std::string> names() const;
  bool empty() const { return interactions_.empty(); }
  size_t size() const { return interactions_.size(); }

 private:
  std::vector<std::shared_ptr<const Interaction>> interactions_;
};

// verl's name for an entry without one: the class name's last part, less an "Interaction" suffix,
// lower-cased (Gsm8kInteraction -> gsm8k).
std::string default_interaction_name(const std::string& class_name);
// The interactions of a config file's text; `origin` names it in errors.
InteractionSet parse_interaction_config(const std::string& yaml_text, const std::string& origin);
// The interactions of the config file at `path`.
InteractionSet load_interaction_config(const std::string& path);

// The interaction a row's `interaction_kwargs` names in `interactions`; Error at `where` when the
// kwargs are not a mapping, have no string 'name', or name no configured interaction.
const Interaction& interaction_of(const InteractionSet& interactions, const nlohmann::json& interaction_kwargs,
                                  const std::string& where);

}  // namespace verlpp::agent
