// LoRA adapters in the decoder: PEFT's module matching and initialisation, the adapted forward
// against the merged model W + s·B·A (padded, packed, checkpointed and engine paths), the
// gradients of A and B against autograd through the merged formula (fp64), dropout only while
// training, the base model as a copy without adapters, and PEFT's folder read back and refused.
#include "model_test_util.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/model/kv_cache.hpp>
#include <verlpp/model/lora.hpp>
#include <verlpp/model/lora_files.hpp>
#include <verlpp/model/safetensors.hpp>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <fstream>
#include <memory>

using namespace verlpp::model;
using namespace verlpp::model::testing;

namespace {

const char* const kArchs[] = {"Qwen2ForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLM"};

// The error text of f(), or "" when it returns.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const verlpp::Error& e) {
    return e.what();
  }
  return "";
}

DecoderLM make_model(const std::string& arch, at::ScalarType dtype, uint64_t seed) {
  DecoderLM init(tiny_config(arch));
  init.init_weights(seed);
  if (dtype != at::kFloat) init.to(dtype, c10::Device(c10::kCPU));
  return init;
}

// Adapters with B drawn too (PEFT's B = 0 would make every check below vacuous).
std::shared_ptr<LoraAdapters> random_adapters(const DecoderLM& m, LoraConfig config, uint64_t seed) {
  auto adapters = std::make_shared<LoraAdapters>(m.config(), std::move(config), m.options().dtype);
  adapters->init(seed);
  at::NoGradGuard no_grad;
  for (const auto& [name, t] : adapters->named_parameters())
    if (name.find("lora_B") != std::string::npos) t.copy_(at::randn(t.sizes(), at::kDouble) * 0.3);
  return adapters;
}

// The merged model: a DecoderLM over W + s·B·A (computed from `adapters`' tensors, so autograd
// differentiates the merged formula back to them) and the other weights as they are.
DecoderLM merged_model(const DecoderLM& base, const LoraAdapters& adapters) {
  std::vector<at::Tensor> params;
  for (const auto& [name, p] : base.named_parameters()) params.push_back(p);
  const auto& named = base.named_parameters();
  for (int64_t l = 0; l < base.config().num_hidden_layers; ++l)
    for (int k = 0; k < kLoraProjections; ++k) {
      const LoraPair* pair = adapters.find(l, LoraProjection(k));
      if (pair == nullptr) continue;
      const std::string weight = lora_base_weight_name(l, LoraProjection(k));
      for (size_t i = 0; i < named.size(); ++i)
        if (named[i].first == weight) params[i] = named[i].second + pair->b.matmul(pair->a) * adapters.config().scale();
    }
  ModelOptions options = base.options();
  return DecoderLM::over(base.config(), options, params);
}

at::Tensor ids_2x5() {
  return at::tensor(std::vector<int64_t>{3, 9, 1, 30, 7, 2, 2, 5, 11, 4}, at::kLong).view({2, 5});
}
at::Tensor mask_2x5() { return at::tensor(std::vector<int64_t>{1, 1, 1, 1, 1, 0, 1, 1, 1, 1}, at::kLong).view({2, 5}); }

// One engine step over all of `ids` [T] (a prefill) through a paged cache, on `m` fused as the engine fuses it.
at::Tensor prefill(const DecoderLM& m, const at::Tensor& ids) {
  const int64_t T = ids.size(0), block = 4, blocks = (T + block - 1) / block;
  PagedKvCache cache(m.config(), blocks, block, m.options().dtype, c10::Device(c10::kCPU));
  PagedStep step{at::arange(T, at::kLong), at::tensor(std::vector<int64_t>{0, T}, at::kLong),
                 at::tensor(std::vector<int64_t>{T}, at::kLong), at::arange(blocks, at::kLong).view({1, blocks})};
  PagedAttention backend(cache, step);
  return m.forward_cached(ids, at::arange(T, at::kLong), backend);
}

}  // namespace

TEST_CASE("lora: PEFT's target and exclude rules", "[model][lora]") {
  const ModelConfig c = tiny_config("Qwen2ForCausalLM");
  auto count = [&](const LoraConfig& config) {
    LoraAdapters a(c, config);
    return int64_t(a.named_parameters().size() / 2);
  };
  LoraConfig all;
  CHECK(count(all) == 7 * c.num_hidden_layers);
  LoraConfig qv;
  qv.target_modules = {"q_proj", "v_proj"};
  CHECK(count(qv) == 2 * c.num_hidden_layers);
  LoraConfig dotted = qv;
  dotted.target_modules = {"self_attn.q_proj"};  // a suffix of dotted components
  CHECK(count(dotted) == c.num_hidden_layers);
  LoraConfig excluded = all;
  excluded.exclude_modules = {"model.layers.0.self_attn.q_proj", "down_proj"};
  CHECK(count(excluded) == 7 * c.num_hidden_layers - 1 - c.num_hidden_layers);
  LoraAdapters ex(c, excluded);
  CHECK(ex.find(0, LoraProjection::kQ) == nullptr);
  CHECK(ex.find(1, LoraProjection::kQ) != nullptr);
  CHECK(ex.find(1, LoraProjection::kDown) == nullptr);
  LoraConfig regex;
  regex.target_regex = R"(model\.layers\.1\..*_proj)";  // full match, as PEFT's re.fullmatch
  LoraAdapters re(c, regex);
  CHECK(re.find(0, LoraProjection::kO) == nullptr);
  CHECK(re.find(1, LoraProjection::kO) != nullptr);
  LoraConfig partial;
  partial.target_regex = "q_proj";  // a full match, not a search: matches nothing
  CHECK_THAT(error_of([&] { LoraAdapters a(c, partial); }), Catch::Contains("leave no projection"));
  // Names as PEFT saves them.
  CHECK(ex.named_parameters().front().first == "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight");
  CHECK(ex.named_parameters()[1].first == "base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight");

  LoraConfig typo;
  typo.target_modules = {"qproj"};
  CHECK_THAT(error_of([&] { LoraAdapters a(c, typo); }), Catch::Contains("'qproj' is no projection"));
  LoraConfig rank0;
  rank0.rank = 0;
  CHECK_THAT(error_of([&] { LoraAdapters a(c, rank0); }), Catch::Contains("lora_rank 0"));
  LoraConfig bad_regex;
  bad_regex.target_regex = "(q_proj";
  CHECK_THAT(error_of([&] { LoraAdapters a(c, bad_regex); }), Catch::Contains("not a regular expression"));
  LoraConfig dropout;
  dropout.dropout = 1.0;
  CHECK_THAT(error_of([&] { LoraAdapters a(c, dropout); }), Catch::Contains("lora_dropout 1"));
}

TEST_CASE("lora: PEFT's initialisation changes nothing and draws A in +-1/sqrt(in)", "[model][lora]") {
  at::NoGradGuard no_grad;
  DecoderLM base = make_model("Qwen2ForCausalLM", at::kFloat, 4);
  auto adapters = std::make_shared<LoraAdapters>(base.config(), LoraConfig{});
  adapters->init(7);
  for (const auto& [name, t] : adapters->named_parameters()) {
    INFO(name);
    if (name.find("lora_B") != std::string::npos) {
      CHECK(t.abs().max().item<double>() == 0);
    } else {
      const double bound = 1.0 / std::sqrt(double(t.size(1)));
      CHECK(t.abs().max().item<double>() <= bound);
      CHECK(t.abs().max().item<double>() > 0.8 * bound);  // uniform over the whole interval
    }
  }
  DecoderLM adapted = base;
  adapted.set_lora(adapters);
  CHECK(at::equal(adapted.forward_padded(ids_2x5(), mask_2x5()), base.forward_padded(ids_2x5(), mask_2x5())));
  // The same seed draws the same adapters.
  LoraAdapters again(base.config(), LoraConfig{});
  again.init(7);
  for (size_t i = 0; i < again.named_parameters().size(); ++i)
    CHECK(at::equal(again.named_parameters()[i].second, adapters->named_parameters()[i].second));
}

TEST_CASE("lora: the adapted forward equals the merged model's; a copy without adapters is the base", "[model][lora]") {
  at::NoGradGuard no_grad;
  for (const char* arch : kArchs) {
    INFO(arch);
    DecoderLM base = make_model(arch, at::kDouble, 5);
    LoraConfig config;
    config.rank = 3;
    config.alpha = 5;
    config.exclude_modules = {"model.layers.1.mlp.up_proj"};  // gate adapted, up not: the split MLP path
    auto adapters = random_adapters(base, config, 11);
    DecoderLM adapted = base;
    adapted.set_lora(adapters);
    const DecoderLM merged = merged_model(base, *adapters);
    const at::Tensor ids = ids_2x5(), mask = mask_2x5();
    const at::Tensor want = merged.logits(merged.forward_padded(ids, mask));
    check_close(adapted.logits(adapted.forward_padded(ids, mask)), want, 1e-10, 1e-10, "padded");
    // Packed: the two rows as segments (row 1 without its padding).
    const at::Tensor packed_ids = at::tensor(std::vector<int64_t>{3, 9, 1, 30, 7, 2, 5, 11, 4}, at::kLong);
    const at::Tensor pos = at::tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3}, at::kLong);
    const at::Tensor cu = at::tensor(std::vector<int64_t>{0, 5, 9}, at::kLong);
    check_close(adapted.forward_packed(packed_ids, pos, cu), merged.forward_packed(packed_ids, pos, cu), 1e-10, 1e-10,
                "packed");
    // The engine's path: fused q/k/v and gate/up, one cached step.
    DecoderLM engine = base;
    engine.to(at::kDouble, c10::Device(c10::kCPU));  // its own tensors, as an engine's copy
    engine.fuse_projections();
    engine.set_lora(adapters);
    const at::Tensor row = ids[0];
    check_close(prefill(engine, row), merged.forward_padded(row.unsqueeze(0)).squeeze(0), 1e-10, 1e-10,
                "cached, fused");
    // The base model: the same weights (no copy), no adapters.
    DecoderLM reference = adapted;
    reference.set_lora(nullptr);
    CHECK(reference.named_parameters()[1].second.data_ptr() == base.named_parameters()[1].second.data_ptr());
    CHECK(at::equal(reference.forward_padded(ids, mask), base.forward_padded(ids, mask)));
    CHECK(!at::allclose(adapted.forward_padded(ids, mask), base.forward_padded(ids, mask)));
  }
}

TEST_CASE("lora: gradients of A and B equal autograd through the merged formula (fp64)", "[model][lora][grad]") {
  for (const char* arch : kArchs) {
    for (bool checkpointing : {false, true}) {
      INFO(arch << (checkpointing ? ", gradient checkpointing" : ""));
      DecoderLM base = make_model(arch, at::kDouble, 6);  // frozen: requires_grad stays off
      LoraConfig config;
      config.rank = 2;
      config.alpha = 3;
      auto adapters = random_adapters(base, config, 12);
      adapters->set_requires_grad(true);
      // The reference's own leaves with the same values.
      auto twin = std::make_shared<LoraAdapters>(adapters->copy_to(at::kDouble, c10::Device(c10::kCPU)));
      twin->set_requires_grad(true);
      DecoderLM adapted = base;
      adapted.set_lora(adapters);
      adapted.set_gradient_checkpointing(checkpointing);
      const at::Tensor ids = ids_2x5(), mask = mask_2x5();
      const at::Tensor w = at::randn({2, 5, base.config().vocab_size}, at::kDouble);
      (adapted.logits(adapted.forward_padded(ids, mask)) * w * mask.unsqueeze(-1)).sum().backward();
      const DecoderLM merged = merged_model(base, *twin);
      (merged.logits(merged.forward_padded(ids, mask)) * w * mask.unsqueeze(-1)).sum().backward();
      for (size_t i = 0; i < adapters->named_parameters().size(); ++i) {
        const auto& [name, t] = adapters->named_parameters()[i];
        INFO(name);
        REQUIRE(t.grad().defined());
        CHECK(t.grad().abs().max().item<double>() > 0);
        check_close(t.grad(), twin->named_parameters()[i].second.grad(), 1e-10, 1e-9, name);
      }
      for (const auto& [name, p] : base.named_parameters()) {
        INFO(name);
        CHECK(!p.grad().defined());  // the base gets no gradient
      }
    }
  }
}

TEST_CASE("lora: dropout acts only while autograd records, and not with gradient checkpointing", "[model][lora]") {
  DecoderLM base = make_model("Qwen2ForCausalLM", at::kFloat, 8);
  LoraConfig config;
  config.dropout = 0.5;
  auto adapters = random_adapters(base, config, 13);
  LoraConfig no_dropout = config;
  no_dropout.dropout = 0;
  auto plain = std::make_shared<LoraAdapters>(base.config(), no_dropout);
  plain->copy_from(*adapters);
  DecoderLM dropped = base, kept = base;
  dropped.set_lora(adapters);
  kept.set_lora(plain);
  const at::Tensor ids = ids_2x5(), mask = mask_2x5();
  {
    at::NoGradGuard no_grad;  // inference: dropout off, the model of the same adapters without it
    CHECK(at::equal(dropped.forward_padded(ids, mask), kept.forward_padded(ids, mask)));
  }
  adapters->set_requires_grad(true);
  CHECK(!at::allclose(dropped.forward_padded(ids, mask), kept.forward_padded(ids, mask)));
  dropped.set_gradient_checkpointing(true);
  CHECK_THAT(error_of([&] { (void)dropped.forward_padded(ids, mask); }),
             Catch::Contains("LoRA dropout (0.5) with gradient checkpointing"));
}

TEST_CASE("lora: a PEFT folder written and read back; what PEFT means otherwise is refused", "[model][lora][files]") {
  at::NoGradGuard no_grad;
  DecoderLM base = make_model("Qwen3ForCausalLM", at::kFloat, 9);
  LoraConfig config;
  config.rank = 4;
  config.alpha = 8;
  config.exclude_modules = {"model.layers.0.mlp.down_proj"};
  auto adapters = random_adapters(base, config, 14);
  ScratchDir dir;
  save_lora_adapter(*adapters, dir.path, LoraSaveOptions{std::nullopt, "Qwen/Qwen3-0.6B"});
  const nlohmann::json written = nlohmann::json::parse(std::ifstream(dir / kLoraConfigFile));
  CHECK(written.at("peft_type") == "LORA");
  CHECK(written.at("r") == 4);
  CHECK(written.at("lora_alpha") == 8.0);
  CHECK(written.at("target_modules") ==
        nlohmann::json({"down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"}));
  CHECK(written.at("exclude_modules") == nlohmann::json({"model.layers.0.mlp.down_proj"}));
  CHECK(written.at("base_model_name_or_path") == "Qwen/Qwen3-0.6B");
  // The tensors under PEFT's names, and nothing else.
  SafetensorsFile file(dir / kLoraWeightsFile);
  CHECK(file.entries().size() == adapters->named_parameters().size());
  for (const auto& [name, t] : adapters->named_parameters()) CHECK(at::equal(file.tensor(name), t));

  const LoraAdapters back = read_lora_adapter(base.config(), dir.path);
  CHECK(back.config().scale() == config.scale());
  CHECK(back.find(0, LoraProjection::kDown) == nullptr);
  REQUIRE(back.named_parameters().size() == adapters->named_parameters().size());
  for (size_t i = 0; i < back.named_parameters().size(); ++i)
    CHECK(at::equal(back.named_parameters()[i].second, adapters->named_parameters()[i].second));

  auto rewrite = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = written;
    edit(j);
    std::ofstream(dir / kLoraConfigFile) << j.dump();
  };
  auto load_error = [&] {
    LoraAdapters target(base.config(), config);
    target.init(1);
    const at::Tensor before = target.named_parameters().front().second.clone();
    std::string e = error_of([&] { load_lora_adapter(target, dir.path); });
    CHECK(at::equal(target.named_parameters().front().second, before));  // all or nothing
    return e;
  };
  rewrite([](nlohmann::json& j) { j["use_dora"] = true; });
  CHECK_THAT(load_error(), Catch::Contains("use_dora"));
  rewrite([](nlohmann::json& j) { j["bias"] = "all"; });
  CHECK_THAT(load_error(), Catch::Contains("bias \"all\""));
  rewrite([](nlohmann::json& j) { j["rank_pattern"] = {{"q_proj", 16}}; });
  CHECK_THAT(load_error(), Catch::Contains("rank_pattern"));
  rewrite([](nlohmann::json& j) { j["peft_type"] = "IA3"; });
  CHECK_THAT(load_error(), Catch::Contains("peft_type is 'IA3'"));
  rewrite([](nlohmann::json& j) { j["lora_alpha"] = 16; });
  CHECK_THAT(load_error(), Catch::Contains("another scale"));
  rewrite([](nlohmann::json&) {});
  // A tensor missing, one of another shape, one the model has no place for.
  std::vector<NamedTensor> tensors;
  for (const auto& [name, t] : adapters->named_parameters()) tensors.emplace_back(name, t);
  write_safetensors(dir / kLoraWeightsFile, {tensors.begin() + 1, tensors.end()});
  CHECK_THAT(load_error(), Catch::Contains("lora_A.weight is missing"));
  tensors[0].second = at::zeros({5, tensors[0].second.size(1)});
  write_safetensors(dir / kLoraWeightsFile, tensors);
  CHECK_THAT(load_error(), Catch::Contains("has shape 5x"));
  tensors[0].second = adapters->named_parameters()[0].second;
  tensors.emplace_back("base_model.model.model.layers.0.mlp.down_proj.lora_A.weight", at::zeros({4, 40}));
  write_safetensors(dir / kLoraWeightsFile, tensors);
  CHECK_THAT(load_error(), Catch::Contains("down_proj.lora_A.weight is not an adapter"));
}
