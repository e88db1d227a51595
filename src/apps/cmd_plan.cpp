// `verlpp plan [CONFIG.json|CONFIG.yaml] [overrides ...] [--nproc N] [--device-memory-gib G]`:
// the memory plan of a run (controller/memory_plan.hpp) per rank and stage, and whether it fits
// the device: the one `verlpp train` would pick (trainer.device), or a device of G GiB.
// Without a config: the embedded default run (examples/arith/grpo_tiny.json).
#include "commands.hpp"
#include "run_setup.hpp"

#include "../core/util/files.hpp"

#include <verlpp/config/keys.hpp>
#include <verlpp/controller/device_choice.hpp>
#include <verlpp/controller/memory_plan.hpp>
#include <verlpp/config/run_settings.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/hw/device.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/model/model_config.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <iostream>

namespace verlpp::apps {
namespace {

void run_plan(const std::vector<std::string>& args, bool demo, int nproc, double device_gib) {
  if (nproc < 1) throw Error("--nproc", fmt::format("{} ranks: must be >= 1", nproc));
  if (device_gib < 0 || !std::isfinite(device_gib))
    throw Error("--device-memory-gib", fmt::format("{} GiB: must be a size > 0", device_gib));
  CommandConfig given = command_config(args, demo, /*embedded_when_empty=*/true, "examples/arith/grpo_tiny.json");
  const config::RunSettings rs = config::parse_run_settings(given.config, nproc, nproc);
  if (!rs.model.path)
    throw Error(config::keys::kModelPath, "no model folder given (a Hugging Face folder with config.json)");
  // The demo's model (verlpp.demo.enabled, as the embedded run and examples/arith have it) is
  // written at the start of its run; until then its shape is the embedded tiny config.
  const std::string config_file = *rs.model.path + "/config.json";
  const model::ModelConfig mc =
      (given.embedded || rs.demo.enabled) && !files::is_file(config_file)
          ? model::parse_model_config(nlohmann::json::parse(embedded_text("examples/tiny/config.json")),
                                      "the embedded tiny model")
          : model::load_model_config(*rs.model.path);

  std::string device_name;
  uint64_t total = 0;
  bool accelerator = true;
  if (device_gib > 0) {
    total = uint64_t(device_gib * double(uint64_t(1) << 30));
    device_name = fmt::format("a {:g} GiB device", device_gib);
    accelerator = rs.trainer.device != "cpu";
  } else {
    const controller::DeviceChoice choice =
        controller::choose_device(rs.trainer.device, 0, config::keys::kTrainerDevice);
    device_name = choice.device.str();
    accelerator = !choice.device.is_cpu();
    if (!choice.plugin.empty())
      total =
          hw::Device(hw::plugin_named(choice.plugin), int32_t(choice.device.has_index() ? choice.device.index() : 0))
              .memory_info()
              .second;
  }
  config::check_rollout_split(rs, mc);
  const controller::MemoryPlanInputs inputs = controller::plan_inputs(rs, mc, nproc, accelerator, total);
  const controller::MemoryPlan plan = controller::plan_memory(inputs);
  const int64_t tp = rs.rollout.tensor_model_parallel_size;
  // With resource pools the plan is the actor pool's (plan_inputs).
  const int64_t ranks = inputs.world_size;
  if (!rs.pools.colocated())
    std::cout << fmt::format("resource pools: {}; the plan below is the actor pool's ({} rank(s))\n",
                             rs.pools.describe(config::active_roles(given.config)), ranks);
  std::cout << fmt::format("model {} ({:.3f}B parameters), {} rank(s), ZeRO stage {}, param_dtype {}{}\n",
                           *rs.model.path, double(model::parameter_count(mc)) / 1e9, ranks,
                           ranks > 1 ? inputs.actor_layout.zero_stage : 0, model::dtype_name(inputs.param_dtype),
                           tp > 1 ? fmt::format(", {} rollout engine(s) of {} ranks", ranks / tp, tp) : std::string());
  std::cout << controller::format_memory_plan(plan, device_name);
  if (total > 0 && plan.peak_stage().total() > total) {
    const std::string hint = controller::memory_fix_hint(inputs);
    std::cout << (hint.empty()
                      ? std::string(
                            "no offload, micro-batch, KV budget, ZeRO-3 rank count or engine split makes it fit\n")
                      : "would fit with " + hint + "\n");
  }
}

}  // namespace

void register_plan_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan",
                                 "the memory a run needs per rank and stage (weights, gradients, optimizer states, "
                                 "activations, logits, KV pool) and whether it fits the device");
  auto args = std::make_shared<std::vector<std::string>>();
  auto nproc = std::make_shared<int>(1);
  auto gib = std::make_shared<double>(0.0);
  auto demo = std::make_shared<bool>(false);
  cmd->add_option("args", *args,
                  "a CONFIG.json or CONFIG.yaml, then overrides in Hydra's grammar (none: the embedded default run)");
  cmd->add_flag("--demo", *demo, "plan the embedded demo's run (overrides may follow), as `verlpp train --demo`");
  cmd->add_option("--nproc", *nproc, "data-parallel ranks to plan for");
  cmd->add_option("--device-memory-gib", *gib,
                  "plan for a device of this many GiB instead of the one trainer.device picks here");
  cmd->callback([=] { run_plan(*args, *demo, *nproc, *gib); });
}

}  // namespace verlpp::apps
