// DecodeInputLayout (the decode graphs' static inputs): offsets, sizes and views against a plain
// recount of the documented layout (7 int64 rows, 2 float rows, then the [B, W] int64 tables),
// and host writes read back through the typed views of the same bytes.
#include "../../src/core/rollout/decode_inputs.hpp"

#include <catch2/catch.hpp>

#include <ATen/ops/empty.h>

#include <cstring>

using verlpp::rollout::detail::DecodeInput;
using verlpp::rollout::detail::DecodeInputLayout;

TEST_CASE("decode inputs: offsets and sizes follow the documented order", "[rollout][decode_inputs]") {
  for (int64_t B : {1, 3, 32, 257}) {
    for (int64_t W : {1, 7, 64}) {
      const DecodeInputLayout layout(B, W);
      // The plain recount: int64 fields of B rows, float fields of B rows, int64 tables [B, W].
      const DecodeInput int64_fields[] = {DecodeInput::ids,          DecodeInput::positions, DecodeInput::slots,
                                          DecodeInput::context_lens, DecodeInput::top_k,     DecodeInput::seeds,
                                          DecodeInput::source_rows};
      int64_t expect = 0;
      for (DecodeInput f : int64_fields) {
        CHECK(layout.offset(f) == expect);
        CHECK(layout.bytes(f) == 8 * B);
        expect += 8 * B;
      }
      for (DecodeInput f : {DecodeInput::temperature, DecodeInput::top_p}) {
        CHECK(layout.offset(f) == expect);
        CHECK(layout.bytes(f) == 4 * B);
        expect += 4 * B;
      }
      CHECK(layout.head_bytes() == expect);
      CHECK(layout.offset(DecodeInput::block_tables) == expect);
      CHECK(layout.bytes(DecodeInput::block_tables) == 8 * B * W);
      CHECK(layout.total_bytes() == expect + 8 * B * W);
    }
  }
}

TEST_CASE("decode inputs: host writes read back through the views of the same bytes", "[rollout][decode_inputs]") {
  const int64_t B = 5, W = 3;
  const DecodeInputLayout layout(B, W);
  at::Tensor bytes = at::empty({layout.total_bytes()}, at::TensorOptions().dtype(at::kByte));
  std::memset(bytes.data_ptr(), 0xAB, size_t(layout.total_bytes()));
  void* base = bytes.data_ptr();
  for (int f = 0; f < verlpp::rollout::detail::kNumDecodeInputs; ++f) {
    const auto field = DecodeInput(f);
    const int64_t n = layout.count(field);
    if (DecodeInputLayout::field(field).dtype == at::kFloat) {
      float* p = layout.host<float>(base, field);
      for (int64_t i = 0; i < n; ++i) p[i] = float(f * 1000 + i) + 0.5f;
    } else {
      int64_t* p = layout.host<int64_t>(base, field);
      for (int64_t i = 0; i < n; ++i) p[i] = int64_t(f) * 1000 + i;
    }
  }
  for (int f = 0; f < verlpp::rollout::detail::kNumDecodeInputs; ++f) {
    const auto field = DecodeInput(f);
    const at::Tensor v = layout.view(bytes, field);
    INFO("field " << DecodeInputLayout::field(field).name);
    if (field == DecodeInput::block_tables) {
      REQUIRE(v.dim() == 2);
      CHECK(v.size(0) == B);
      CHECK(v.size(1) == W);
    } else {
      REQUIRE(v.dim() == 1);
      CHECK(v.size(0) == B);
    }
    const at::Tensor flat = v.reshape({-1});
    for (int64_t i = 0; i < layout.count(field); ++i) {
      if (v.scalar_type() == at::kFloat)
        CHECK(flat.data_ptr<float>()[i] == float(f * 1000 + i) + 0.5f);
      else
        CHECK(flat.data_ptr<int64_t>()[i] == int64_t(f) * 1000 + i);
    }
  }
  // view_rows: the first rows of a per-row field, and refused for the tables or too many rows.
  CHECK(layout.view_rows(bytes, DecodeInput::source_rows, 2).data_ptr<int64_t>()[1] ==
        int64_t(DecodeInput::source_rows) * 1000 + 1);
  CHECK_THROWS_AS(layout.view_rows(bytes, DecodeInput::block_tables, 1), verlpp::Error);
  CHECK_THROWS_AS(layout.view_rows(bytes, DecodeInput::ids, B + 1), verlpp::Error);
  // A host pointer of the wrong element size is refused.
  CHECK_THROWS_AS(layout.host<float>(base, DecodeInput::ids), verlpp::Error);
}
