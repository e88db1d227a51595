// The static inputs of a captured decode step, described once: each field's name, element type
// and row count, in the order they sit in the one byte buffer a graph reads. Offsets, sizes,
// host pointers into the pinned staging bytes and typed device views all derive from this
// table, so adding or reordering a field is one edit here. The block tables are last so that
// a step whose tables did not change copies only the head (every field before them).
#pragma once

#include <verlpp/core/error.hpp>

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>

namespace verlpp::rollout::detail {

// The fields, in buffer order. B = the bucket's rows, W = the block tables' width.
enum class DecodeInput : int {
  ids,           // [B] int64: the token each row feeds
  positions,     // [B] int64: its position
  slots,         // [B] int64: the KV-cache row it writes (block * block_size + position % block_size)
  context_lens,  // [B] int64: position + 1 (converted to int32 by the attention kernels' caller)
  top_k,         // [B] int64: 0 = all
  seeds,         // [B] int64: the sampler's per-row seed for this step
  source_rows,   // [B] int64: not read by the graph; where a queued step's ids come from
  temperature,   // [B] float
  top_p,         // [B] float
  block_tables,  // [B, W] int64: padded with the scratch block
};
constexpr int kNumDecodeInputs = int(DecodeInput::block_tables) + 1;

struct DecodeInputField {
  DecodeInput field;
  const char* name;
  at::ScalarType dtype;
  int64_t element_bytes;
  bool per_table_column;  // W elements a row (the block tables) instead of one
};

constexpr std::array<DecodeInputField, kNumDecodeInputs> kDecodeInputFields = {{
    {DecodeInput::ids, "ids", at::kLong, 8, false},
    {DecodeInput::positions, "positions", at::kLong, 8, false},
    {DecodeInput::slots, "slots", at::kLong, 8, false},
    {DecodeInput::context_lens, "context_lens", at::kLong, 8, false},
    {DecodeInput::top_k, "top_k", at::kLong, 8, false},
    {DecodeInput::seeds, "seeds", at::kLong, 8, false},
    {DecodeInput::source_rows, "source_rows", at::kLong, 8, false},
    {DecodeInput::temperature, "temperature", at::kFloat, 4, false},
    {DecodeInput::top_p, "top_p", at::kFloat, 4, false},
    {DecodeInput::block_tables, "block_tables", at::kLong, 8, true},
}};

namespace decode_inputs_check {
constexpr bool in_enum_order() {
  for (int i = 0; i < kNumDecodeInputs; ++i)
    if (int(kDecodeInputFields[size_t(i)].field) != i) return false;
  return true;
}
static_assert(in_enum_order(), "kDecodeInputFields must list the fields in DecodeInput's order");
static_assert(kDecodeInputFields[kNumDecodeInputs - 1].per_table_column,
              "the block tables must come last: a step copies the head alone when they did not change");
}  // namespace decode_inputs_check

// Where each field of a bucket of `rows` rows and `table_width`-wide block tables lies.
class DecodeInputLayout {
 public:
  DecodeInputLayout(int64_t rows, int64_t table_width) : rows_(rows), table_width_(table_width) {
    int64_t at = 0;
    for (const DecodeInputField& f : kDecodeInputFields) {
      offsets_[size_t(f.field)] = at;
      at += count(f.field) * f.element_bytes;
    }
    total_bytes_ = at;
  }

  int64_t rows() const { return rows_; }
  int64_t table_width() const { return table_width_; }
  // Elements of field `f`: rows, or rows * table_width for the block tables.
  int64_t count(DecodeInput f) const { return field(f).per_table_column ? rows_ * table_width_ : rows_; }
  int64_t offset(DecodeInput f) const { return offsets_[size_t(f)]; }
  int64_t bytes(DecodeInput f) const { return count(f) * field(f).element_bytes; }
  // Every field before the block tables.
  int64_t head_bytes() const { return offset(DecodeInput::block_tables); }
  int64_t total_bytes() const { return total_bytes_; }

  // Field `f` inside host bytes laid out by this layout (the pinned staging buffer), as T.
  template <typename T>
  T* host(void* base, DecodeInput f) const {
    VERLPP_CHECK(int64_t(sizeof(T)) == field(f).element_bytes, "decode input {}: {}-byte elements read as {} bytes",
                 field(f).name, field(f).element_bytes, sizeof(T));
    return reinterpret_cast<T*>(static_cast<uint8_t*>(base) + offset(f));
  }
  // Field `f` of `buffer` (uint8 bytes laid out by this layout) as a typed view: [rows], or
  // [rows, table_width] for the block tables.
  at::Tensor view(const at::Tensor& buffer, DecodeInput f) const {
    at::Tensor flat = buffer.narrow(0, offset(f), bytes(f)).view(field(f).dtype);
    return field(f).per_table_column ? flat.view({rows_, table_width_}) : flat;
  }
  // The first `n` rows of a one-per-row field.
  at::Tensor view_rows(const at::Tensor& buffer, DecodeInput f, int64_t n) const {
    VERLPP_CHECK(!field(f).per_table_column && n <= rows_, "decode input {}: {} rows of {}", field(f).name, n, rows_);
    return buffer.narrow(0, offset(f), n * field(f).element_bytes).view(field(f).dtype);
  }

  static const DecodeInputField& field(DecodeInput f) { return kDecodeInputFields[size_t(f)]; }

 private:
  int64_t rows_, table_width_;
  std::array<int64_t, kNumDecodeInputs> offsets_{};
  int64_t total_bytes_ = 0;
};

}  // namespace verlpp::rollout::detail
