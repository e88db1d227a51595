// The `verlpp` command: one binary, one subcommand per job. Errors end the program with a
// single line naming what failed and a non-zero exit; nothing is allowed to crash it.
#include "commands.hpp"

#include <verlpp/core/error.hpp>

#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"verlpp: reinforcement-learning post-training of LLMs on LibTorch"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("verlpp ") + VERLPP_VERSION_STRING);
  verlpp::apps::register_plugins_command(app);
  verlpp::apps::register_demo_command(app);
  verlpp::apps::register_model_command(app);
  verlpp::apps::register_tokenize_command(app);
  verlpp::apps::register_config_command(app);
  verlpp::apps::register_generate_command(app);
  verlpp::apps::register_train_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "verlpp: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
