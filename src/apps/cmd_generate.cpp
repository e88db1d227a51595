// `verlpp generate --model DIR --prompts F.jsonl [...]`: sample completions with the rollout
// engine. Prompts in verl's schema ("prompt": chat messages, rendered with DIR's chat
// template) or plain "text"; one JSON line per sample out, written and flushed as each sample
// finishes (a killed run keeps every finished row; no sample is kept in memory). A folder
// without weights (e.g. examples/tiny) needs --init-seed, which initialises the model from that
// seed. The output path is checked before the model loads; a run where every prompt is refused
// fails. The device and plugin are chosen as `train` chooses them.
//
// `--nproc N --tensor-parallel-size t` starts N ranks (or runs as one rank of a launcher's world):
// N / t engines, each split over t ranks (rollout/tensor_parallel.hpp). Prompt i goes to engine
// i mod (N / t), seeded as with one process, so the lines are those of a one-process run (in
// another order). Rank 0 writes them: its engine's as they finish, the other engines' when all
// are done (their first ranks send them).
#include "commands.hpp"
#include "run_setup.hpp"

#include "../core/util/input_file.hpp"
#include "../core/util/output_file.hpp"

#include <verlpp/controller/device_choice.hpp>
#include <verlpp/controller/launcher.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/json_limits.hpp>
#include <verlpp/core/strings.hpp>
#include <verlpp/hw/kernels.hpp>
#include <verlpp/hw/process_group.hpp>
#include <verlpp/hw/world.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/model/chat_template.hpp>
#include <verlpp/model/checkpoint.hpp>
#include <verlpp/model/tensor_parallel.hpp>
#include <verlpp/model/tokenizer.hpp>
#include <verlpp/rollout/engine.hpp>
#include <verlpp/rollout/tensor_parallel.hpp>

#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <sys/stat.h>

namespace verlpp::apps {
namespace {

struct GenerateArgs {
  std::string model_dir, prompts, output, device = "auto", dtype = "float32";
  int64_t n = 1, max_new_tokens = 64, top_k = 0, init_seed = -1, block_size = 16, kv_tokens = 0;
  double temperature = 1.0, top_p = 1.0;
  uint64_t seed = 0;
  bool ignore_eos = false;
  int nproc = 1;                  // ranks to start (1: this process alone, or a launcher's world)
  int64_t tensor_parallel = 1;    // ranks per engine
  std::vector<std::string> argv;  // the command line after `generate`, for the ranks --nproc starts
};

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Every rank's `text` on rank 0 of `group`, in rank order (collective; empty elsewhere). The
// bytes travel as int32 words: communicators move numbers, not bytes.
std::vector<std::string> gather_texts(const hw::ProcessGroup& group, const std::string& text, c10::Device device) {
  const at::Tensor lengths =
      group.all_gather(at::full({1}, double(text.size()), at::TensorOptions().dtype(at::kDouble).device(device))).cpu();
  int64_t longest = 4;
  for (int64_t r = 0; r < lengths.numel(); ++r) longest = std::max(longest, int64_t(lengths[r].item<double>()));
  const int64_t words = (longest + 3) / 4;
  at::Tensor mine = at::zeros({words}, at::TensorOptions().dtype(at::kInt));
  std::memcpy(mine.data_ptr<int32_t>(), text.data(), text.size());
  const at::Tensor all = group.all_gather(mine.to(device)).cpu().contiguous();
  std::vector<std::string> out;
  if (group.rank() != 0) return out;
  const char* bytes = reinterpret_cast<const char*>(all.data_ptr<int32_t>());
  for (int64_t r = 0; r < lengths.numel(); ++r)
    out.emplace_back(bytes + r * words * 4, size_t(lengths[r].item<double>()));
  return out;
}

void run_generate(const GenerateArgs& a) {
  const std::string output = a.output.empty() ? "-" : a.output;
  files::require_output(output, "--output");  // before any work: a bad path costs nothing
  if (!exists(a.model_dir + "/config.json")) throw Error("--model " + a.model_dir, "no config.json in this folder");
  if (!exists(a.model_dir + "/tokenizer.json"))
    throw Error("--model " + a.model_dir, "no tokenizer.json in this folder");
  model::ModelConfig config = model::load_model_config(a.model_dir);
  const bool has_weights =
      exists(a.model_dir + "/model.safetensors") || exists(a.model_dir + "/model.safetensors.index.json");
  if (a.init_seed < 0 && !has_weights)
    throw Error("--model " + a.model_dir, "no model.safetensors (pass --init-seed S to initialise from a seed)");
  // The layout, before any rank starts: t ranks per engine, dividing the ranks and the model.
  const hw::WorldInfo world = check_nproc(a.nproc);
  const int32_t ranks = a.nproc > 1 ? a.nproc : world.world_size;
  const int64_t tp = a.tensor_parallel;
  if (tp < 1 || ranks % tp != 0)
    throw Error("--tensor-parallel-size",
                fmt::format("engines of {} ranks do not fit the {} rank(s) launched ({}): the ranks must be a "
                            "multiple of the tensor-parallel size",
                            tp, ranks,
                            a.nproc > 1              ? "--nproc"
                            : world.is_distributed() ? "the launcher's world"
                                                     : "this process alone; --nproc N starts N"));
  model::tensor_parallel_layout(config, tp);  // an Error naming what does not split
  if (a.nproc > 1) return launch_command_ranks("generate", a.argv, a.nproc, controller::LaunchOptions().grace);
  const int64_t engines = ranks / tp, engine_index = world.rank / tp;
  const bool writes = world.rank == 0, leads_engine = world.rank % tp == 0;

  // The device as `train` picks it (VERL_HARDWARE_PLUGIN, the plugin folders), and that plugin's
  // kernels unless they are a reference implementation.
  const controller::DeviceChoice choice = controller::choose_device(a.device, world.local_rank, "--device");
  std::unique_ptr<hw::Kernels> kernels;
  if (!choice.plugin.empty() && hw::run_uses_kernels(hw::plugin_named(choice.plugin)))
    kernels = std::make_unique<hw::Kernels>(hw::plugin_named(choice.plugin));
  std::unique_ptr<hw::ProcessGroup> group, tp_group;
  if (world.is_distributed()) {
    if (choice.plugin.empty())
      throw Error("--device", fmt::format("{} ranks need a plugin communicator, but no hardware plugin is loaded for "
                                          "{} (VERL_HARDWARE_PLUGIN, `verlpp plugins`)",
                                          world.world_size, choice.device.str()));
    group = hw::ProcessGroup::create(world, hw::Device(hw::plugin_named(choice.plugin),
                                                       int32_t(choice.device.has_index() ? choice.device.index() : 0)));
    tp_group = rollout::engine_group(*group, tp, "generate");
  }
  model::ModelOptions model_options;
  model_options.device = choice.device;
  model_options.dtype = model::dtype_from_name(a.dtype);
  // Split engines read the whole model into host memory and keep their slice on the device.
  model::ModelOptions whole_options = model_options;
  if (tp > 1) whole_options.device = c10::Device(c10::kCPU);
  model::DecoderLM lm = [&] {
    model::DecoderLM whole = [&] {
      if (a.init_seed >= 0) {
        model::DecoderLM m(config, whole_options);
        m.init_weights(uint64_t(a.init_seed));
        return m;
      }
      return model::load_pretrained(a.model_dir, whole_options);
    }();
    if (tp == 1) return whole;
    model::DecoderLM part = rollout::tensor_parallel_engine_model(whole, *tp_group);
    part.to(model_options.dtype, model_options.device);
    return part;
  }();
  model::Tokenizer tokenizer = model::Tokenizer::from_file(a.model_dir);
  std::optional<model::ChatTemplate> chat;

  rollout::SamplingParams params;
  params.n = a.n;
  params.max_new_tokens = a.max_new_tokens;
  params.temperature = a.temperature;
  params.top_k = a.top_k;
  params.top_p = a.top_p;
  params.seed = a.seed;
  params.ignore_eos = a.ignore_eos;
  rollout::validate(params);  // n, top-p, ... are the whole run's: fail before any work

  std::ifstream in = files::open_input(a.prompts, "prompts file (--prompts)");
  std::vector<rollout::GenerateRequest> requests;
  std::vector<int64_t> prompt_index;  // each of this engine's requests' index in the file's prompts
  int64_t prompts = 0;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", a.prompts, number);
    nlohmann::json row;
    check_json_depth(line, where);
    try {
      row = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      throw Error(where, fmt::format("not JSON: {}", e.what()));
    }
    std::string text;
    if (row.contains("prompt") && row["prompt"].is_array()) {
      std::vector<model::ChatMessage> messages;
      for (const auto& m : row["prompt"]) {
        if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["role"].is_string() ||
            !m["content"].is_string())
          throw Error(where, "each prompt message must be {\"role\": string, \"content\": string}");
        messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      }
      if (!chat) chat = model::ChatTemplate::from_config_file(a.model_dir);
      if (!messages.empty()) text = chat->render(messages);
    } else if (row.contains("text") && row["text"].is_string()) {
      text = row["text"].get<std::string>();
    } else {
      throw Error(where, "a row needs \"prompt\" (chat messages) or \"text\" (a string)");
    }
    const int64_t index = prompts++;
    if (index % engines != engine_index) continue;
    rollout::GenerateRequest r;
    r.prompt_ids = tokenizer.encode(text);
    r.sampling = params;
    r.sampling.seed = a.seed + uint64_t(index);  // one seed per prompt, reproducible
    requests.push_back(std::move(r));
    prompt_index.push_back(index);
  }
  if (prompts == 0) throw Error("--prompts " + a.prompts, "the file holds no prompt rows");

  rollout::EngineOptions options;
  options.block_size = a.block_size;
  options.kv_token_budget = a.kv_tokens;
  options.kernels = kernels.get();
  rollout::RolloutEngine engine(std::move(lm), options);
  if (writes) {
    std::cerr << fmt::format(
        "generate: {} prompts x {} samples, {} ({} layers), KV pool {} blocks of {} ({:.1f} MiB{})\n", prompts, a.n,
        config.architecture, config.num_hidden_layers, engine.num_blocks(), engine.block_size(),
        double(engine.pool_bytes()) / (1 << 20), tp > 1 ? " a rank" : "");
    std::cerr << fmt::format("generate: device {} ({}), {}\n", choice.device.str(),
                             choice.plugin.empty() ? "no plugin" : "plugin " + choice.plugin,
                             kernels ? "kernels: " + join(kernels->available(), ", ")
                                     : std::string("no plugin kernels (LibTorch runs every operation)"));
    if (ranks > 1)
      std::cerr << fmt::format(
          "generate: {} ranks as {} engine(s) of {} rank(s) (tensor parallel {}); prompt i on "
          "engine i mod {}\n",
          ranks, engines, tp, tp, engines);
  }
  std::optional<files::OutputFile> out;
  if (writes) out.emplace(output, files::OutputFile::Mode::kStream);
  std::string kept;  // another engine's first rank: its lines, for rank 0 to write at the end
  int64_t refused = 0;
  auto write_row = [&](rollout::GenerateOutput&& o) {
    if (!leads_engine) return;  // the engine's other ranks hold the same outputs
    nlohmann::json j = {{"prompt_index", prompt_index[size_t(o.request_index)]},
                        {"sample_index", o.sample_index},
                        {"text", tokenizer.decode(o.token_ids, /*skip_special_tokens=*/true)},
                        {"token_ids", o.token_ids},
                        {"logprobs", o.logprobs},
                        {"finish_reason", rollout::finish_reason_name(o.finish_reason)}};
    if (!o.error.empty()) {
      j["error"] = o.error;
      ++refused;
      std::cerr << fmt::format("generate: prompt {}: {}\n", prompt_index[size_t(o.request_index)], o.error);
    }
    const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    if (!writes) {
      kept += text;
      return;
    }
    out->write(text);
    out->flush();  // on disk as it finishes: a killed run keeps every finished row
  };
  engine.generate(
      requests,
      [writes](int64_t done, int64_t total) {
        if (writes) std::cerr << fmt::format("\rgenerate: {}/{} samples done", done, total) << std::flush;
      },
      write_row);
  if (group && engines > 1) {
    // The other engines' lines and refusals, to rank 0.
    const std::vector<std::string> texts = gather_texts(*group, kept, choice.device);
    at::Tensor counts = at::full({1}, double(refused), at::TensorOptions().dtype(at::kDouble).device(choice.device));
    group->all_reduce_sum(counts);
    refused = int64_t(counts.item<double>());
    for (size_t r = 1; r < texts.size(); ++r) out->write(texts[r]);
  }
  if (!writes) return;
  out->commit();
  const auto& st = engine.last_stats();
  std::cerr << fmt::format(
      "\ngenerate: {} tokens in {:.2f} s ({:.1f} tokens/s{}), {} prefill + {} decode steps, {} preemptions\n",
      st.num_generated_tokens, st.seconds, double(st.num_generated_tokens) / std::max(st.seconds, 1e-9),
      engines > 1 ? ", this rank's engine" : "", st.num_prefill_steps, st.num_decode_steps, st.num_preemptions);
  if (st.num_graph_steps > 0)
    std::cerr << fmt::format(
        "generate: {} decode steps replayed from CUDA graphs ({} captured in {:.2f} s), {} of them "
        "queued while the step before ran ({} queued steps discarded)\n",
        st.num_graph_steps, st.num_graph_captures, st.graph_capture_seconds, st.num_overlapped_steps,
        st.num_discarded_steps);
  if (refused == prompts)
    throw Error("verlpp generate", fmt::format("every prompt was refused ({} of {}; the reasons are above and in "
                                               "the \"error\" field of each row): nothing was generated",
                                               refused, prompts));
  if (refused > 0) std::cerr << fmt::format("generate: {} prompt(s) refused (see \"error\" in their lines)\n", refused);
}

}  // namespace

void register_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "sample completions of JSONL prompts with the rollout engine");
  cmd->add_option("--model", args->model_dir, "Hugging Face model folder (config.json, tokenizer.json, weights)")
      ->required();
  cmd->add_option("--prompts", args->prompts, "JSONL: {\"prompt\": [chat messages]} (verl) or {\"text\": \"...\"}")
      ->required();
  cmd->add_option("--output", args->output,
                  "output JSONL, one row per sample as it finishes (default or -: stdout; a device or FIFO is "
                  "written in place)");
  cmd->add_option("--n", args->n, "samples per prompt")->capture_default_str();
  cmd->add_option("--max-new-tokens", args->max_new_tokens, "generated tokens at most")->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-p", args->top_p, "nucleus mass in (0, 1]")->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "0 = all tokens")->capture_default_str();
  cmd->add_option("--seed", args->seed, "prompt i is seeded seed + i")->capture_default_str();
  cmd->add_option("--init-seed", args->init_seed, "initialise the weights from this seed instead of loading them");
  cmd->add_option("--block-size", args->block_size, "KV cache block size (tokens)")->capture_default_str();
  cmd->add_option("--kv-tokens", args->kv_tokens, "KV pool size in tokens (default 16384)");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "do not stop at the model's EOS ids");
  cmd->add_option("--device", args->device, "auto, cpu, cuda, privateuseone (optionally :index), as trainer.device")
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "the engine's weights and KV cache: float32, bfloat16, float16")
      ->capture_default_str();
  cmd->add_option("--nproc", args->nproc,
                  "start this many ranks on this machine (one per device; leave it out under mpirun, srun or "
                  "torchrun: the launcher's environment gives the ranks)")
      ->capture_default_str();
  cmd->add_option("--tensor-parallel-size", args->tensor_parallel,
                  "ranks each engine is split over (rollout.tensor_model_parallel_size); it divides the ranks")
      ->capture_default_str();
  cmd->callback([args, cmd] {
    // The ranks --nproc starts run this command line less --nproc.
    args->argv.clear();
    for (const CLI::Option* opt : cmd->get_options()) {
      if (opt->count() == 0 || opt->get_lnames().empty() || opt->get_lnames().front() == "nproc" ||
          opt->get_lnames().front() == "help")
        continue;
      const std::string flag = "--" + opt->get_lnames().front();
      if (opt->get_expected_min() == 0) {
        args->argv.push_back(flag);
        continue;
      }
      for (const std::string& value : opt->results()) args->argv.insert(args->argv.end(), {flag, value});
    }
    run_generate(*args);
  });
}

}  // namespace verlpp::apps
