// `verlpp train` with a plugin whose devices are torch privateuseone (tests/hw/plugins' acme):
// trainer.device=auto and =privateuseone refuse, naming the plugin and why this LibTorch cannot use
// its devices: no PrivateUse1 backend, or one that cannot compute (a device guard alone). The
// run on a plugin's own working backend is in test_vendor_plugin_e2e.cpp. Neither ever trains on
// the CPU in its place, although cpu_ref is loaded too.
#include "e2e_util.hpp"

using namespace verlpp;
using namespace verlpp::e2e;

namespace {

// A one-step run without the SFT warm start.
std::string one_step_config(const std::string& dir, const std::string& run) {
  const std::string path = write_config(dir, run, "grpo");
  json c = json::parse(read_file(path));
  c["sft"]["enable"] = false;
  c["trainer"]["total_training_steps"] = 1;
  std::ofstream(path) << c.dump(2);
  return path;
}

struct Outcome {
  int exit_code = -1;
  std::string log;
};

Outcome train_with_acme(const std::string& config, const std::string& log, const std::string& device,
                        std::vector<std::string> env) {
  // acme and cpu_ref (found beside the executable), and no other plugin a GPU host may have built.
  env.push_back(std::string("VERL_HARDWARE_PLUGIN=") + VERLPP_PRIVATEUSE_PLUGIN + ",cpu_ref");
  const int status = wait_for(start_train(config, log, {"trainer.device=" + device}, env));
  Outcome out;
  out.log = read_file(log);
  if (WIFEXITED(status)) out.exit_code = WEXITSTATUS(status);
  return out;
}

}  // namespace

TEST_CASE("verlpp train: a plugin's privateuseone devices without a PrivateUse1 backend are refused, naming the plugin",
          "[e2e][device]") {
  const std::string dir = make_fixture("device-refused");
  for (const std::string device : {"auto", "privateuseone"}) {
    INFO("trainer.device=" << device);
    const std::string run = dir + "/run-" + device;
    const Outcome out = train_with_acme(one_step_config(dir, run), run + ".log", device, {});
    INFO(out.log);
    CHECK(out.exit_code == 1);
    CHECK(out.log.find("verlpp: error: trainer.device: ") != std::string::npos);
    CHECK(
        out.log.find("chose plugin acme, whose devices are privateuseone, but this LibTorch has no PrivateUse1 backend "
                     "registered") != std::string::npos);
    CHECK(out.log.find("trainer.device=cpu runs on the host without it") != std::string::npos);
    // Refused before any work: no device line, no metrics.
    CHECK(out.log.find("device cpu") == std::string::npos);
    CHECK_FALSE(exists(run + "/metrics.jsonl"));
  }
}

TEST_CASE("verlpp train: a registered PrivateUse1 backend that cannot compute is refused before any work",
          "[e2e][device]") {
  // The stand-in backend preloaded here registers only a device guard: LibTorch counts the
  // backend as registered, so the run chooses the plugin's privateuseone:0, and the check that
  // LibTorch can compute there refuses it before anything is loaded or trained.
  const std::string dir = make_fixture("device-privateuse1");
  for (const std::string device : {"auto", "privateuseone"}) {
    INFO("trainer.device=" << device);
    const std::string run = dir + "/run-" + device;
    const Outcome out = train_with_acme(one_step_config(dir, run), run + ".log", device,
                                        {std::string("LD_PRELOAD=") + VERLPP_FAKE_PRIVATEUSE1});
    INFO(out.log);
    CHECK(out.exit_code == 1);
    CHECK(out.log.find("verlpp: error: trainer.device: plugin acme's device privateuseone:0 cannot be used: LibTorch "
                       "cannot compute on privateuseone:0: ") != std::string::npos);
    CHECK(out.log.find("trainer.device=cpu runs on the host without it") != std::string::npos);
    CHECK(out.log.find("no PrivateUse1 backend registered") == std::string::npos);
    CHECK(out.log.find("device cpu") == std::string::npos);
    CHECK_FALSE(exists(run + "/metrics.jsonl"));
  }
}

TEST_CASE("verlpp train: trainer.device=cpu beside a privateuseone plugin trains on the host", "[e2e][device]") {
  const std::string dir = make_fixture("device-cpu");
  const std::string run = dir + "/run";
  const Outcome out = train_with_acme(one_step_config(dir, run), run + ".log", "cpu", {});
  INFO(out.log);
  CHECK(out.exit_code == 0);
  CHECK(out.log.find("device cpu (plugin cpu_ref)") != std::string::npos);
  CHECK(exists(run + "/metrics.jsonl"));
}
