// Helpers shared by the decoder/weights tests: tiny configs of each family with awkward shapes,
// a scratch folder, and an element-wise closeness check that reports the worst error and the
// first bad index (never "mostly close").
#pragma once

#include <verlpp/model/model_config.hpp>

#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/argmax.h>
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <string>

namespace verlpp::model::testing {

// A tiny config of `arch` with shapes chosen to catch layout bugs: GQA groups > 1, head_dim
// not hidden/heads (Qwen3), a llama3 rope scaling whose thresholds split the frequencies into
// all three bands (Llama), and an init scale large enough for non-uniform attention.
inline nlohmann::json tiny_config_json(const std::string& arch) {
  nlohmann::json j = {{"architectures", {arch}},   {"vocab_size", 37},
                      {"hidden_size", 24},         {"intermediate_size", 40},
                      {"num_hidden_layers", 2},    {"num_attention_heads", 6},
                      {"num_key_value_heads", 2},  {"rms_norm_eps", 1e-6},
                      {"rope_theta", 10000.0},     {"max_position_embeddings", 128},
                      {"initializer_range", 0.25}, {"torch_dtype", "float32"},
                      {"bos_token_id", 1},         {"eos_token_id", 2}};
  if (arch.rfind("Qwen3", 0) == 0) {
    j["num_attention_heads"] = 4;
    j["head_dim"] = 10;
    j["tie_word_embeddings"] = true;
  }
  if (arch.rfind("Llama", 0) == 0) {
    j["hidden_size"] = 32;
    j["num_attention_heads"] = 4;
    j["num_key_value_heads"] = 1;  // head_dim 8: wavelengths 6.3 (kept), 63 (blended), 628, 6283 (scaled)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 100}};
    j["attention_bias"] = true;
    j["mlp_bias"] = true;
  }
  if (arch.find("Classification") != std::string::npos) j["id2label"] = {{"0", "LABEL_0"}};
  return j;
}

inline ModelConfig tiny_config(const std::string& arch) {
  return parse_model_config(tiny_config_json(arch), "tiny:" + arch);
}

// A fresh folder under /tmp, removed (with rm -rf: see docs/building.md) when it goes.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    char pattern[] = "/tmp/verlpp_model_test_XXXXXX";
    const char* made = ::mkdtemp(pattern);
    REQUIRE(made != nullptr);
    path = made;
  }
  ~ScratchDir() {
    if (std::system(("rm -rf '" + path + "'").c_str()) != 0) { /* leftovers under /tmp are harmless */
    }
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// |actual - expected| <= atol + rtol * |expected| everywhere; on failure says where and how bad.
inline void check_close(const at::Tensor& actual, const at::Tensor& expected, double atol, double rtol,
                        const std::string& what) {
  INFO(what);
  REQUIRE(actual.sizes() == expected.sizes());
  at::Tensor a = actual.detach().to(at::kDouble).reshape({-1}), e = expected.detach().to(at::kDouble).reshape({-1});
  if (a.numel() == 0) return;
  at::Tensor err = (a - e).abs();
  at::Tensor bad = err > (e.abs() * rtol + atol);
  const int64_t worst = err.argmax().item<int64_t>();
  const bool any_bad = bad.any().item<bool>();
  const int64_t first = any_bad ? bad.to(at::kLong).argmax().item<int64_t>() : -1;
  INFO(fmt::format("worst |error| {:.3g} at flat index {} (actual {:.8g}, expected {:.8g}); first bad index {}",
                   err[worst].item<double>(), worst, a[worst].item<double>(), e[worst].item<double>(), first));
  CHECK_FALSE(any_bad);
}

}  // namespace verlpp::model::testing
