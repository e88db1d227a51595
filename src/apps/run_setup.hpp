// What `verlpp train` and `verlpp train-rm` share: the run config from the command line, the
// arithmetic demo's inputs, and `--nproc N`'s launch of N ranks running the same command.
#pragma once

#include <verlpp/config/config.hpp>
#include <verlpp/hw/world.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace verlpp::apps {

// A file compiled into the binary (cmake/EmbedFiles.cmake): the demo's configs and the tiny
// model's files. An Error naming it when this build lacks it.
std::string embedded_text(const std::string& name);

// A run's config from a command's arguments: [CONFIG.json|CONFIG.yaml] then overrides in Hydra's
// grammar. With `demo`, or without arguments when `embedded_config` is the command's default, the
// overrides apply to the embedded `embedded_config`; without a config file to verl's defaults.
// Resolved. `from_file` / `embedded` say which base was taken.
struct CommandConfig {
  config::Config config = config::Config::defaults();
  bool from_file = false;
  bool embedded = false;
};
CommandConfig command_config(std::vector<std::string> args, bool demo, bool embedded_when_empty,
                             const std::string& embedded_config);

// The arithmetic demo's inputs (verlpp.demo), written into trainer.default_local_dir: the tiny
// model (config, tokenizer, weights from verlpp.demo.init_seed) in tiny_init/, the arithmetic
// splits data.* and sft.* point at, and the preference pairs rm_train.* points at, in data/.
void write_demo_inputs(const config::Config& config);

// `--nproc N` against the launcher's environment: an Error when N < 1, or when N > 1 and this
// process is already a rank of a launched world. Returns that environment's world.
hw::WorldInfo check_nproc(int nproc);
// Starts `nproc` ranks on this machine, each running `verlpp <subcommand> <args>`, and waits for
// them; an Error with the launcher's summary when one fails. `grace`: how long the others may
// take to stop after the first failure.
void launch_command_ranks(const std::string& subcommand, const std::vector<std::string>& args, int nproc,
                          std::chrono::milliseconds grace);

// Prepares a command that may start ranks, once per launch (not again in the ranks it starts):
// checks --nproc against the launcher's world, prints the no-effect keys the config changes, runs
// `check` (refusals before any work), and writes the demo's inputs when verlpp.demo.enabled.
// With nproc > 1 it then starts the ranks (`verlpp <subcommand> [--demo] <given_args>`), waits
// for them and returns true; false means: run the command in this process.
bool launch_ranks_if_asked(const std::string& subcommand, const config::Config& config, int nproc, bool demo,
                           const std::vector<std::string>& given_args, const std::function<void()>& check);

}  // namespace verlpp::apps
