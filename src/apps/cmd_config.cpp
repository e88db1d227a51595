// `verlpp config [--print | --keys] [CONFIG.json|CONFIG.yaml] [overrides ...]`: loads the
// defaults (or a config file), applies the overrides (Hydra's grammar), resolves references,
// validates (the checks a run makes as it reads its settings, refused keys included), and prints
// the full tree as JSON with the no-effect keys it changes listed on stderr, or (--keys) one line
// per key marked with what it does in verlpp (config_key_states.hpp).
#include "commands.hpp"

#include <verlpp/config/keys.hpp>
#include <verlpp/config/config.hpp>
#include <verlpp/config/config_key_states.hpp>
#include <verlpp/config/run_settings.hpp>

#include <iostream>

namespace verlpp::apps {

void register_config_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("config", "Print the fully resolved run configuration (verl's keys and defaults)");
  auto print = std::make_shared<bool>(false);
  auto no_validate = std::make_shared<bool>(false);
  auto keys = std::make_shared<bool>(false);
  auto args = std::make_shared<std::vector<std::string>>();
  cmd->add_flag("--print", *print, "print the resolved configuration as JSON (the default action)");
  cmd->add_flag("--keys", *keys,
                "print one line per key, `key = value`, marked [no effect: why] or [refused unless left at its "
                "default: why]");
  cmd->add_flag("--no-validate", *no_validate, "skip the cross-field checks");
  cmd->add_option("args", *args,
                  "an optional CONFIG.json or CONFIG.yaml, then overrides (key=value, +key=value, ++key=value, ~key)");
  cmd->callback([=] {
    std::vector<std::string> overrides = *args;
    config::Config config = config::Config::defaults();
    if (!overrides.empty() && config::is_config_file_argument(overrides.front())) {
      config = config::Config::from_file(overrides.front());
      overrides.erase(overrides.begin());
    }
    config.apply_overrides(overrides);
    config.resolve();
    if (!*no_validate) {
      // The layout the config asks for (null: one machine, one rank), as a launch would give it.
      const int per_node = int(config.get_or<int64_t>(config::keys::kTrainerNGpusPerNode, 1));
      config::parse_run_settings(config, int(config.get_or<int64_t>(config::keys::kTrainerNnodes, 1)) * per_node,
                                 per_node);
    }
    if (*keys) {
      std::cout << config::describe_config_keys(config);
      return;
    }
    std::cerr << config::no_effect_notice(config);
    std::cout << config.dump() << "\n";
  });
}

}  // namespace verlpp::apps
