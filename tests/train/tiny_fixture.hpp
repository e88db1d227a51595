// The train tests' shared fixture: the embedded tiny model (examples/tiny) with seeded weights.
#pragma once

#include <verlpp/model/decoder.hpp>
#include <verlpp/model/model_config.hpp>

#include <string>

namespace verlpp::test {

inline model::DecoderLM tiny_model(uint64_t seed) {
  model::DecoderLM m(model::load_model_config(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/config.json"));
  m.init_weights(seed);
  return m;
}

}  // namespace verlpp::test
