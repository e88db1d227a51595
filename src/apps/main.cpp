// The `verlpp` command: one binary, one subcommand per job. Errors end the program with a
// single line naming what failed and a non-zero exit; nothing is allowed to crash it. Standard
// output is checked like every file: `verlpp ... > /dev/full` ends with
// "verlpp: error: writing standard output: No space left on device" and exit 1.
#include "checked_stdout.hpp"
#include "commands.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/core/error_text.hpp>
#include <verlpp/tasks/arith_task.hpp>
#include <verlpp/tasks/multiply_tool_task.hpp>

#include <malloc.h>

#include <iostream>

int main(int argc, char** argv) {
  // glibc serves every block above its mmap threshold (128 KiB at first, raised only as large
  // blocks are freed) with fresh pages, so each step's activations page-fault anew; a fixed high
  // threshold keeps them in the heap for reuse. Measured with verlpp-bench-dist: the tiny model's
  // actor update 0.58 s -> 0.24 s on the 2-core CPU (docs/benchmarks.md). The math is unchanged.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  // The embedded demo's reward source (tasks/), for its data and any dataset naming "arith".
  verlpp::tasks::register_arith_reward();
  verlpp::tasks::register_multiply_tool_reward();
  CLI::App app{"verlpp: reinforcement-learning post-training of LLMs on LibTorch"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("verlpp ") + VERLPP_VERSION_STRING);
  verlpp::apps::register_plugins_command(app);
  verlpp::apps::register_demo_command(app);
  verlpp::apps::register_model_command(app);
  verlpp::apps::register_tokenize_command(app);
  verlpp::apps::register_config_command(app);
  verlpp::apps::register_data_command(app);
  verlpp::apps::register_generate_command(app);
  verlpp::apps::register_train_command(app);
  verlpp::apps::register_train_rm_command(app);
  verlpp::apps::register_plan_command(app);
  verlpp::apps::CheckedStdout standard_output;
  int status = 0;
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      status = app.exit(e);  // --help and --version print here, through the same checks
    }
    standard_output.finish();
  } catch (const std::exception& e) {
    try {
      standard_output.finish();  // what the command printed before it failed
    } catch (const std::exception&) {
      // the first error is the one to report
    }
    if (dynamic_cast<const verlpp::Error*>(&e) != nullptr) {
      std::cerr << "verlpp: error: " << e.what() << "\n";  // names its own where
      return 1;
    }
    // A library's exception (LibTorch, JSON, the standard library) does not say where it came
    // from: name the command ("model logits: LibTorch: index out of range in self").
    std::string command;
    for (const CLI::App* sub = &app; !sub->get_subcommands().empty();) {
      sub = sub->get_subcommands().front();
      command += (command.empty() ? "" : " ") + sub->get_name();
    }
    std::cerr << "verlpp: error: " << command << ": " << verlpp::error_text(e) << "\n";
    return 1;
  }
  return status;
}
