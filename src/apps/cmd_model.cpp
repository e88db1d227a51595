// `verlpp model ...`: look at and move Hugging Face checkpoints.
//   info DIR                     architecture, parameter count, dtype, shapes (config only)
//   logits DIR --ids 1,2,3 ...   run the model, write logits (or scores) to a safetensors file;
//                                --mode padded|packed|cached picks the forward (the parity
//                                script compares all three with transformers)
//   save SRC DST                 load (or --init-seed: initialise) and write a complete HF folder
#include "commands.hpp"

#include "../core/util/output_file.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>
#include <verlpp/controller/device_choice.hpp>
#include <verlpp/model/checkpoint.hpp>
#include <verlpp/model/kv_cache.hpp>
#include <verlpp/model/safetensors.hpp>

#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <fmt/format.h>

#include <iostream>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace verlpp::apps {
namespace {

using namespace verlpp::model;

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

void run_info(const std::string& dir) {
  ModelConfig c = load_model_config(dir);
  // A folder without weight files is a config-only model; weights that are there but unreadable
  // (truncated, corrupt header) are an error, not "none found".
  std::string weights = "none found (no model.safetensors or model.safetensors.index.json)";
  const bool has_weights = !is_dir(dir) || ::access((dir + "/model.safetensors").c_str(), F_OK) == 0 ||
                           ::access((dir + "/model.safetensors.index.json").c_str(), F_OK) == 0;
  if (has_weights) {
    SafetensorsStore store(dir);
    std::set<std::string> dtypes;
    for (const auto& name : store.names()) dtypes.insert(safetensors_dtype_name(store.entry(name).dtype));
    weights = fmt::format("{} tensors in {} file(s), {}", store.names().size(), store.files().size(),
                          join(std::vector<std::string>(dtypes.begin(), dtypes.end()), "/"));
  }
  std::cout << fmt::format("{:<16}{}\n", "architecture", c.architecture);
  std::cout << fmt::format("{:<16}{}{}\n", "parameters", with_commas(parameter_count(c)),
                           c.tie_word_embeddings ? " (embeddings tied to lm_head)" : "");
  std::cout << fmt::format("{:<16}{} (config)\n", "dtype", c.torch_dtype);
  std::cout << fmt::format("{:<16}{}\n", "weights", weights);
  std::cout << fmt::format("{:<16}{}\n", "layers", c.num_hidden_layers);
  std::cout << fmt::format("{:<16}{} (intermediate {})\n", "hidden", c.hidden_size, c.intermediate_size);
  std::cout << fmt::format("{:<16}{} query, {} key/value, head_dim {}\n", "heads", c.num_attention_heads,
                           c.num_key_value_heads, c.head_dim);
  std::cout << fmt::format("{:<16}{}\n", "vocab", c.vocab_size);
  std::string rope = fmt::format("theta {}, {}", c.rope_theta, rope_type_name(c.rope_scaling.type));
  if (c.rope_scaling.type != RopeType::kDefault) rope += fmt::format(" (factor {})", c.rope_scaling.factor);
  std::cout << fmt::format("{:<16}{}\n", "rope", rope);
  std::cout << fmt::format("{:<16}{}\n", "max positions", c.max_position_embeddings);
}

// "1,2,3" -> {1, 2, 3}.
std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  for (const std::string& piece : split(text, ',')) {
    try {
      size_t used = 0;
      ids.push_back(std::stoll(piece, &used));
      if (used != piece.size()) throw std::invalid_argument(piece);
    } catch (const std::exception&) {
      throw Error("--ids", fmt::format("'{}' is not an integer (in '{}')", piece, text));
    }
  }
  if (ids.empty()) throw Error("--ids", fmt::format("no ids in '{}'", text));
  return ids;
}

// The head's output for final hidden states.
at::Tensor head(const DecoderLM& model, const at::Tensor& hidden) {
  return model.config().head == ModelHead::kCausalLM ? model.logits(hidden) : model.scores(hidden);
}

// Runs the sequences as prefill of the first half, then one decode step per remaining token,
// all sequences together in each step, over a paged cache with blocks of 3 (odd on purpose).
at::Tensor cached_hidden(const DecoderLM& model, const std::vector<std::vector<int64_t>>& seqs, int64_t T,
                         c10::Device device) {
  const int64_t S = int64_t(seqs.size()), block = 3, blocks_per_seq = (T + block - 1) / block;
  PagedKvCache cache(model.config(), S * blocks_per_seq, block, model.options().dtype, device);
  auto i64 = at::TensorOptions().dtype(at::kLong);
  at::Tensor tables = at::arange(S * blocks_per_seq, i64).view({S, blocks_per_seq}).flip({0}).contiguous().to(device);
  std::vector<int64_t> done(size_t(S), 0);
  at::Tensor out =
      at::zeros({S, T, model.config().hidden_size}, at::TensorOptions().dtype(model.options().dtype).device(device));
  for (bool first = true;; first = false) {
    std::vector<int64_t> ids, pos, slots, cu{0}, lens;
    std::vector<std::pair<int64_t, int64_t>> where;  // (sequence, position) of each new token
    at::Tensor table_host = tables.to(at::kCPU);
    for (int64_t s = 0; s < S; ++s) {
      const int64_t len = int64_t(seqs[size_t(s)].size());
      int64_t take = first ? (len + 1) / 2 : std::min<int64_t>(1, len - done[size_t(s)]);
      for (int64_t p = done[size_t(s)]; p < done[size_t(s)] + take; ++p) {
        ids.push_back(seqs[size_t(s)][size_t(p)]);
        pos.push_back(p);
        slots.push_back(table_host[s][p / block].item<int64_t>() * block + p % block);
        where.emplace_back(s, p);
      }
      done[size_t(s)] += take;
      cu.push_back(cu.back() + take);
      lens.push_back(done[size_t(s)]);
    }
    if (ids.empty()) break;
    PagedStep step{at::tensor(slots, i64).to(device), at::tensor(cu, i64).to(device), at::tensor(lens, i64).to(device),
                   tables};
    PagedAttention backend(cache, step, model.options().forward.attention);
    at::Tensor hidden = model.forward_cached(at::tensor(ids, i64).to(device), at::tensor(pos, i64).to(device), backend);
    for (size_t i = 0; i < where.size(); ++i) out[where[i].first][where[i].second].copy_(hidden[int64_t(i)]);
  }
  return out;
}

void run_logits(const std::string& dir, const std::vector<std::string>& id_lists, const std::string& out_path,
                const std::string& mode, const std::string& device_name, const std::string& dtype) {
  files::require_output(out_path, "--out");  // before the model loads: a bad path costs nothing
  at::NoGradGuard no_grad;
  const c10::Device device = controller::choose_device(device_name, /*local_rank=*/0, "--device").device;
  ModelOptions options;
  options.dtype = dtype_from_name(dtype);
  options.device = device;
  std::vector<std::vector<int64_t>> seqs;
  for (const std::string& text : id_lists) seqs.push_back(parse_ids(text));
  const ModelConfig config = load_model_config(dir);
  const int64_t vocab = config.vocab_size;
  for (size_t b = 0; b < seqs.size(); ++b)
    for (size_t t = 0; t < seqs[b].size(); ++t)
      if (seqs[b][t] < 0 || seqs[b][t] >= vocab)
        throw Error("--ids", fmt::format("id {} (sequence {}, position {}) is outside the vocabulary of {} (0..{})",
                                         seqs[b][t], b + 1, t + 1, dir, vocab - 1));
  for (size_t b = 0; b < seqs.size(); ++b)
    if (int64_t(seqs[b].size()) > config.max_position_embeddings)
      throw Error("--ids", fmt::format("sequence {} has {} ids, more than max_position_embeddings = {} of {}", b + 1,
                                       seqs[b].size(), config.max_position_embeddings, dir));
  DecoderLM model = load_pretrained(dir, options);
  const int64_t B = int64_t(seqs.size());
  int64_t T = 0;
  for (const auto& s : seqs) T = std::max<int64_t>(T, int64_t(s.size()));
  auto i64 = at::TensorOptions().dtype(at::kLong);
  at::Tensor ids = at::zeros({B, T}, i64), mask = at::zeros({B, T}, i64);
  for (int64_t b = 0; b < B; ++b)
    for (size_t t = 0; t < seqs[size_t(b)].size(); ++t) {
      ids[b][int64_t(t)] = seqs[size_t(b)][t];
      mask[b][int64_t(t)] = 1;
    }
  at::Tensor hidden;  // [B, T, C]
  if (mode == "padded") {
    hidden = model.forward_padded(ids.to(device), mask.to(device));
  } else if (mode == "packed") {
    std::vector<int64_t> flat, pos, cu{0};
    for (const auto& s : seqs) {
      for (size_t t = 0; t < s.size(); ++t) flat.push_back(s[t]), pos.push_back(int64_t(t));
      cu.push_back(int64_t(flat.size()));
    }
    at::Tensor packed = model.forward_packed(at::tensor(flat, i64).to(device), at::tensor(pos, i64).to(device),
                                             at::tensor(cu, i64).to(device));
    hidden = at::zeros({B, T, packed.size(1)}, packed.options());
    for (int64_t b = 0; b < B; ++b)
      hidden[b]
          .narrow(0, 0, cu[size_t(b) + 1] - cu[size_t(b)])
          .copy_(packed.narrow(0, cu[size_t(b)], cu[size_t(b) + 1] - cu[size_t(b)]));
  } else if (mode == "cached") {
    hidden = cached_hidden(model, seqs, T, device);
  } else {
    throw Error("--mode", fmt::format("unknown mode '{}' (padded, packed, cached)", mode));
  }
  at::Tensor result = head(model, hidden).to(at::kFloat).to(at::kCPU).contiguous();
  const char* key = model.config().head == ModelHead::kCausalLM ? "logits" : "scores";
  write_safetensors(out_path, {{key, result}, {"attention_mask", mask}});
  // With --out - the tensors are standard output; the summary goes beside them, to stderr.
  std::ostream& summary = out_path == "-" ? std::cerr : std::cout;
  summary << fmt::format("{} {} [{}, {}, {}] ({}, {}, {}) -> {}\n", model.config().architecture, key, B, T,
                         result.size(2), mode, device.str(), dtype, files::output_display_name(out_path));
}

void run_save(const std::string& src, const std::string& dst, const std::string& dtype, double max_shard_mb,
              int64_t init_seed) {
  // DST is a folder (made with its parents when missing); anything else there is refused up front.
  struct stat st {};
  if (::stat(dst.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    throw Error("DST " + dst, "exists and is not a folder (the model is saved as a folder of files)");
  at::NoGradGuard no_grad;
  ModelConfig config = load_model_config(src);
  ModelOptions options;  // fp32 unless the checkpoint is bf16/fp16: loading then copies bit for bit
  if (init_seed < 0 && (config.torch_dtype == "bfloat16" || config.torch_dtype == "float16"))
    options.dtype = dtype_from_name(config.torch_dtype);
  DecoderLM model(config, options);
  std::string what;
  if (init_seed >= 0) {
    model.init_weights(uint64_t(init_seed));
    what = fmt::format("initialised from seed {}", init_seed);
  } else {
    LoadReport report = load_weights(model, src);
    what = fmt::format("loaded {} tensors from {}{}", report.loaded.size(), src,
                       report.unexpected.empty() ? "" : fmt::format(" (ignored: {})", join(report.unexpected, ", ")));
  }
  SaveOptions save;
  if (!dtype.empty()) save.dtype = dtype_from_name(dtype);
  save.max_shard_bytes = uint64_t(max_shard_mb * 1024 * 1024);
  if (is_dir(src)) save.source_dir = src;
  auto written = save_pretrained(model, dst, save);
  std::cout << fmt::format("{}; wrote {}: {}\n", what, dst, join(written, ", "));
}

}  // namespace

void register_model_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("model", "Inspect, run and save Hugging Face decoder checkpoints");
  cmd->require_subcommand(1);

  auto dir = std::make_shared<std::string>();
  CLI::App* info = cmd->add_subcommand("info", "Architecture, parameter count, dtype and shapes of a model folder");
  info->add_option("DIR", *dir, "model folder (or config.json)")->required();
  info->callback([dir] { run_info(*dir); });

  struct LogitsArgs {
    std::string dir, out, mode = "padded", device = "cpu", dtype = "float32";
    std::vector<std::string> ids;
  };
  auto la = std::make_shared<LogitsArgs>();
  CLI::App* logits = cmd->add_subcommand("logits", "Run a model on token ids; write logits to a safetensors file");
  logits->add_option("DIR", la->dir, "HF model folder")->required();
  logits->add_option("--ids", la->ids, "comma-separated token ids; repeat for a batch")->required();
  logits
      ->add_option("--out", la->out,
                   "output .safetensors (logits or scores [B, T, V] f32, attention_mask); a device, a FIFO or - "
                   "(stdout) is written in place")
      ->required();
  logits->add_option("--mode", la->mode, "padded, packed or cached (prefill + decode over a paged KV cache)");
  logits->add_option("--device", la->device, "auto (a loaded plugin's device), cpu, cuda, cuda:1, privateuseone, ...");
  logits->add_option("--dtype", la->dtype, "float32, bfloat16 or float16");
  logits->callback([la] { run_logits(la->dir, la->ids, la->out, la->mode, la->device, la->dtype); });

  struct SaveArgs {
    std::string src, dst, dtype;
    double max_shard_mb = 5 * 1024;
    int64_t init_seed = -1;
  };
  auto sa = std::make_shared<SaveArgs>();
  CLI::App* save =
      cmd->add_subcommand("save", "Load a model folder (or initialise one) and write a complete HF folder");
  save->add_option("SRC", sa->src, "HF model folder (config.json + weights; tokenizer files are copied)")->required();
  save->add_option("DST", sa->dst, "output folder")->required();
  save->add_option("--dtype", sa->dtype, "dtype to write (default: the checkpoint's)");
  save->add_option("--max-shard-mb", sa->max_shard_mb, "shard above this size in MiB (default 5120)");
  save->add_option("--init-seed", sa->init_seed, "ignore weights in SRC; initialise from this seed (HF-style init)");
  save->callback([sa] { run_save(sa->src, sa->dst, sa->dtype, sa->max_shard_mb, sa->init_seed); });
}

}  // namespace verlpp::apps
