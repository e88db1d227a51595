// verlpp-plugin-check, group "kernels": rotary_paged_attention_decode (ABI 1.5), a decode step's
// RoPE, paged-cache stores and attention in one call. Checked here:
//  - the stored k rows against rotary_cases.cpp's fp64 RoPE reference (check_rotated), v rows
//    bit for bit, every other cache row byte for byte; q, k, v (read only) keep their bytes;
//  - out against softmax(q' . k * scale) v in fp64 over the caches as the call left them, with q'
//    rotated by the roundings the ABI models (cos/sin, each product and the sum rounded to the
//    dtype), at paged_attention_decode's tolerance plus a little for q' rounded the other way;
//  - where the plugin offers rotary_kv_store and paged_attention_decode, out and both caches
//    equal, bit for bit, what those two entries compute from the same inputs (the ABI defines the
//    fused entry as exactly that sequence).
// Shapes reach the paths a fast plugin has: Qwen2.5-0.5B's decode step (14 over 2 heads, head 64)
// at batch 8 and 256 with ragged lengths around block boundaries (and 1), long contexts that a
// kernel splits into partitions, a GQA group of 32 (two head blocks per KV head), head 128, rows
// off the 4-byte grid, f32 and a head of 20 (what a tensor-core kernel leaves to a fallback).
#include "check_context.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>

namespace verlpp::conformance {
namespace {

struct AttnShape {
  int64_t h, kv, s, block_size, spare_blocks;  // query heads, KV heads, head size, cache blocks beyond the tables'
  std::vector<int32_t> lens;                   // context lengths (the new token is the last position)
  DLDataType dtype;
  bool fused;             // q, k, v as views of one [B, (H + 2K) S + pad] buffer
  int64_t pad;            // extra elements per fused row
  int64_t position_base;  // positions[b] = position_base + lens[b] - 1
};

void need_slot(const CheckContext& ctx) {
  const auto& table = ctx.appended_kernels(
      "rotary_paged_attention_decode", 5, offsetof(verlpp_kernel_table, rotary_paged_attention_decode) + sizeof(void*));
  CheckContext::need(reinterpret_cast<const void*>(table.rotary_paged_attention_decode),
                     "kernel rotary_paged_attention_decode");
}

// The modelled RoPE of one pair (a, b) = (x_j, x_{j+S/2}) in dtype d: cos/sin of the fp32 angle
// rounded to d, each product and the difference / sum rounded to d.
void modelled_rotation(double a, double b, float angle, DLDataType d, double& lo, double& hi) {
  const double c = round_as(d, std::cos(double(angle))), sn = round_as(d, std::sin(double(angle)));
  auto prod = [&](double x, double y) { return round_as(d, double(float(x) * float(y))); };
  lo = round_as(d, double(float(prod(a, c)) - float(prod(b, sn))));
  hi = round_as(d, double(float(prod(b, c)) + float(prod(a, sn))));
}

// One call's operands: inputs in one flat buffer, each cache in its own tensor, scrambled
// distinct blocks per sequence, the new token's slot the row of its last position.
class AttnFixture {
 public:
  AttnFixture(const hw::Device& device, const AttnShape& sh, std::mt19937& rng)
      : device_(device), sh_(sh), b_(int64_t(sh.lens.size())), elem_(size_t(sh.dtype.bits / 8)), row_(sh.kv * sh.s) {
    max_blocks_ = 1;
    for (int32_t len : sh.lens) max_blocks_ = std::max<int64_t>(max_blocks_, (len + sh.block_size - 1) / sh.block_size);
    int64_t used = 0;
    for (int32_t len : sh.lens) used += (len + sh.block_size - 1) / sh.block_size;
    num_blocks_ = used + sh.spare_blocks;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto values = [&](int64_t count) {
      std::vector<float> v(static_cast<size_t>(count));
      for (auto& x : v) x = normal(rng);
      return v;
    };
    const int64_t cache_elems = num_blocks_ * sh.block_size * row_;
    // DeviceTensor keeps a pointer to its device: the fixture's own copy outlives them.
    in_ = std::make_unique<DeviceTensor>(device_, std::vector<int64_t>{input_elements()}, sh.dtype);
    k_cache_ = std::make_unique<DeviceTensor>(device_, cache_shape(), sh.dtype);
    v_cache_ = std::make_unique<DeviceTensor>(device_, cache_shape(), sh.dtype);
    in_raw_ = encode_as(values(input_elements()), sh.dtype, in_seen_);
    std::vector<double> unused;
    k_raw_ = encode_as(values(cache_elems), sh.dtype, unused);
    v_raw_ = encode_as(values(cache_elems), sh.dtype, unused);
    std::vector<int32_t> physical(static_cast<size_t>(num_blocks_));
    std::iota(physical.begin(), physical.end(), 0);
    std::shuffle(physical.begin(), physical.end(), rng);
    tables_.assign(size_t(b_ * max_blocks_), 0);  // unused entries point at block 0, as an engine's padding does
    size_t next = 0;
    for (int64_t b = 0; b < b_; ++b) {
      const int64_t len = sh.lens[size_t(b)];
      for (int64_t i = 0; i < (len + sh.block_size - 1) / sh.block_size; ++i)
        tables_[size_t(b * max_blocks_ + i)] = physical[next++];
      const int64_t last = len - 1;
      slots_.push_back(int64_t(tables_[size_t(b * max_blocks_ + last / sh.block_size)]) * sh.block_size +
                       last % sh.block_size);
      pos_.push_back(sh.position_base + last);
    }
    inv_freq_ = inverse_frequencies(sh.s, 1e6);
    const int64_t fused_row = (sh.h + 2 * sh.kv) * sh.s + sh.pad;
    const int64_t offsets[3] = {0, sh.fused ? sh.h * sh.s : b_ * sh.h * sh.s,
                                sh.fused ? (sh.h + sh.kv) * sh.s : b_ * (sh.h + sh.kv) * sh.s};
    const int64_t heads[3] = {sh.h, sh.kv, sh.kv};
    for (int o = 0; o < 3; ++o) {
      offset_[o] = offsets[o];
      stride_[o] = sh.fused ? fused_row : heads[o] * sh.s;
      shape_[o] = {b_, heads[o], sh.s};
      strides_[o] = {stride_[o], sh.s, 1};
    }
  }

  // Fresh device operands (caches as first uploaded) and one call of `entry` ("fused": the 1.5
  // entry; "pair": rotary_kv_store then paged_attention_decode). Returns out's and both caches' bytes.
  struct Result {
    std::vector<uint8_t> out, k_cache, v_cache, inputs;
  };
  Result run(const CheckContext& ctx, bool fused_entry) {
    const verlpp_kernel_table& table = *ctx.api().kernels;
    hw::Device d = ctx.device();
    in_->upload(in_raw_.data());
    k_cache_->upload(k_raw_.data());
    v_cache_->upload(v_raw_.data());
    DeviceTensor pos(d, {b_}, dl_i64()), freq(d, {sh_.s / 2}, dl_f32()), slots(d, {b_}, dl_i64()),
        tables(d, {b_, max_blocks_}, dl_i32()), lens(d, {b_}, dl_i32()), out(d, {b_, sh_.h, sh_.s}, sh_.dtype);
    pos.upload(pos_.data());
    freq.upload(inv_freq_.data());
    slots.upload(slots_.data());
    tables.upload(tables_.data());
    lens.upload(sh_.lens.data());
    DLTensor view[3];
    for (int o = 0; o < 3; ++o) {
      view[o] = in_->dl();
      view[o].ndim = 3;
      view[o].shape = shape_[o].data();
      view[o].strides = strides_[o].data();
      view[o].byte_offset = uint64_t(offset_[o]) * elem_;
    }
    const float scale = 1.0f / std::sqrt(float(sh_.s));
    if (fused_entry) {
      ctx.expect_ok(table.rotary_paged_attention_decode(&view[0], &view[1], &view[2], &pos.dl(), &freq.dl(),
                                                        &slots.dl(), &k_cache_->dl(), &v_cache_->dl(), &tables.dl(),
                                                        &lens.dl(), scale, &out.dl(), nullptr),
                    "rotary_paged_attention_decode");
    } else {
      DeviceTensor q_rot(d, {b_, sh_.h, sh_.s}, sh_.dtype);
      ctx.expect_ok(table.rotary_kv_store(&view[0], &view[1], &view[2], &pos.dl(), &freq.dl(), &slots.dl(), &q_rot.dl(),
                                          &k_cache_->dl(), &v_cache_->dl(), nullptr),
                    "rotary_kv_store");
      ctx.expect_ok(table.paged_attention_decode(&q_rot.dl(), &k_cache_->dl(), &v_cache_->dl(), &tables.dl(),
                                                 &lens.dl(), scale, &out.dl(), nullptr),
                    "paged_attention_decode");
    }
    return {out.to_host<uint8_t>(), k_cache_->to_host<uint8_t>(), v_cache_->to_host<uint8_t>(),
            in_->to_host<uint8_t>()};
  }

  // Every check of the file header but the comparison with the plugin's own pair of entries.
  void check(const Result& r) const {
    CHECK_THAT(r.inputs == in_raw_, "rotary_paged_attention_decode wrote to q, k or v (inputs)");
    std::vector<bool> written(k_raw_.size() / elem_, false);
    std::vector<float> k_seen, k_got;
    for (int64_t b = 0; b < b_; ++b) {
      const int64_t row = slots_[size_t(b)] * row_;
      for (int64_t e = 0; e < row_; ++e) {
        k_seen.push_back(float(in_seen_[size_t(offset_[1] + b * stride_[1] + e)]));
        k_got.push_back(float(decode_as(r.k_cache, sh_.dtype, size_t(row + e))));
        const size_t v_src = size_t(offset_[2] + b * stride_[2] + e);
        CHECK_THAT(std::memcmp(r.v_cache.data() + size_t(row + e) * elem_, in_raw_.data() + v_src * elem_, elem_) == 0,
                   "v_cache row {} (sequence {}) element {} is not v's value", slots_[size_t(b)], b, e);
        written[size_t(row + e)] = true;
      }
    }
    for (size_t i = 0; i < written.size(); ++i) {
      CHECK_THAT(written[i] || std::memcmp(r.k_cache.data() + i * elem_, k_raw_.data() + i * elem_, elem_) == 0,
                 "k_cache row {} changed, though it is no sequence's new slot", int64_t(i) / row_);
      CHECK_THAT(written[i] || std::memcmp(r.v_cache.data() + i * elem_, v_raw_.data() + i * elem_, elem_) == 0,
                 "v_cache row {} changed, though it is no sequence's new slot", int64_t(i) / row_);
    }
    check_rotated(k_got, k_seen, pos_, inv_freq_, sh_.kv, sh_.s, sh_.dtype, "k stored in k_cache");
    check_attention(r);
  }

 private:
  std::vector<int64_t> cache_shape() const { return {num_blocks_, sh_.block_size, sh_.kv, sh_.s}; }
  int64_t input_elements() const {
    return sh_.fused ? b_ * ((sh_.h + 2 * sh_.kv) * sh_.s + sh_.pad) : b_ * (sh_.h + 2 * sh_.kv) * sh_.s;
  }

  void check_attention(const Result& r) const {
    const bool half = sh_.dtype.bits == 16;
    const double ulp = sh_.dtype.code == kDLBfloat ? 1.0 / 128 : half ? 1.0 / 1024 : 0.0;
    const int64_t s = sh_.s, hs = s / 2, group = sh_.h / sh_.kv;
    const double scale = double(1.0f / std::sqrt(float(s)));
    Worst worst;
    std::vector<double> q(static_cast<size_t>(s));
    for (int64_t b = 0; b < b_; ++b)
      for (int64_t h = 0; h < sh_.h; ++h) {
        const int64_t kv = h / group, len = sh_.lens[size_t(b)];
        const size_t q0 = size_t(offset_[0] + b * stride_[0] + h * s);
        for (int64_t j = 0; j < hs; ++j)
          modelled_rotation(in_seen_[q0 + size_t(j)], in_seen_[q0 + size_t(j + hs)],
                            float(pos_[size_t(b)]) * inv_freq_[size_t(j)], sh_.dtype, q[size_t(j)], q[size_t(j + hs)]);
        auto at = [&](const std::vector<uint8_t>& cache, int64_t t, int64_t dim) {
          const int64_t block = tables_[size_t(b * max_blocks_ + t / sh_.block_size)];
          return decode_as(cache, sh_.dtype,
                           size_t((block * sh_.block_size + t % sh_.block_size) * row_ + kv * s + dim));
        };
        std::vector<double> score(static_cast<size_t>(len));
        double mx = -INFINITY;
        for (int64_t t = 0; t < len; ++t) {
          double dot = 0;
          for (int64_t j = 0; j < s; ++j) dot += q[size_t(j)] * at(r.k_cache, t, j);
          score[size_t(t)] = dot * scale;
          mx = std::max(mx, score[size_t(t)]);
        }
        double sum = 0;
        for (double& x : score) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j < s; ++j) {
          double want = 0;
          for (int64_t t = 0; t < len; ++t) want += score[size_t(t)] / sum * at(r.v_cache, t, j);
          const size_t i = size_t((b * sh_.h + h) * s + j);
          worst.add(i, decode_as(r.out, sh_.dtype, i), want,
                    half ? 3e-3 + std::fabs(want) * 2 * ulp : 1e-5 + 1e-5 * std::fabs(want));
        }
      }
    worst.require("attention output");
  }

  hw::Device device_;
  AttnShape sh_;
  int64_t b_;
  size_t elem_;
  int64_t row_;  // elements of one cache row (K * S)
  int64_t max_blocks_ = 0, num_blocks_ = 0;
  std::unique_ptr<DeviceTensor> in_, k_cache_, v_cache_;
  std::vector<uint8_t> in_raw_, k_raw_, v_raw_;
  std::vector<double> in_seen_;
  std::vector<int32_t> tables_;
  std::vector<int64_t> slots_, pos_;
  std::vector<float> inv_freq_;
  int64_t offset_[3] = {}, stride_[3] = {};
  std::vector<int64_t> shape_[3], strides_[3];
};

std::string shape_name(const AttnShape& s) {
  const auto [lo, hi] = std::minmax_element(s.lens.begin(), s.lens.end());
  return fmt::format("rotary_paged_attention_decode B={} H={} K={} S={} block={} lens={}..{} {}{}{}", s.lens.size(),
                     s.h, s.kv, s.s, s.block_size, *lo, *hi, sdk::dtype_name(s.dtype),
                     s.fused ? fmt::format(" (fused rows{})", s.pad ? fmt::format(" +{}", s.pad) : "") : "",
                     s.position_base ? fmt::format(" positions +{}", s.position_base) : "");
}

void bad_input_case(CheckContext& ctx) {
  need_slot(ctx);
  const verlpp_kernel_table& table = *ctx.api().kernels;
  hw::Device d = ctx.device();
  // B = 2, H = 4, K = 2, S = 8, blocks of 4: every operand right but the one each call breaks.
  DeviceTensor q(d, {2, 4, 8}, dl_bf16()), k(d, {2, 2, 8}, dl_bf16()), v(d, {2, 2, 8}, dl_bf16()),
      pos(d, {2}, dl_i64()), freq(d, {4}, dl_f32()), slots(d, {2}, dl_i64()), kc(d, {4, 4, 2, 8}, dl_bf16()),
      vc(d, {4, 4, 2, 8}, dl_bf16()), tables(d, {2, 2}, dl_i32()), lens(d, {2}, dl_i32()), out(d, {2, 4, 8}, dl_bf16()),
      q3(d, {2, 3, 8}, dl_bf16()), out3(d, {2, 3, 8}, dl_bf16()), tables64(d, {2, 2}, dl_i64()),
      lens3(d, {3}, dl_i32());
  const std::vector<int64_t> p = {3, 5}, sl = {3, 13};  // rows of positions 3 (block 0) and 5 (block 3)
  const std::vector<int32_t> t = {0, 1, 2, 3}, l = {4, 6};
  pos.upload(p.data());
  slots.upload(sl.data());
  tables.upload(t.data());
  lens.upload(l.data());
  const std::vector<uint8_t> k_before = kc.to_host<uint8_t>(), v_before = vc.to_host<uint8_t>();
  auto refused = [&](verlpp_error* e, const char* what) { ctx.expect_error(e, VERLPP_STATUS_INVALID_ARGUMENT, what); };
  auto call = [&](DLTensor* q_, DLTensor* tables_, DLTensor* lens_, DLTensor* out_) {
    return table.rotary_paged_attention_decode(q_, &k.dl(), &v.dl(), &pos.dl(), &freq.dl(), &slots.dl(), &kc.dl(),
                                               &vc.dl(), tables_, lens_, 1.0f, out_, nullptr);
  };
  refused(call(&q3.dl(), &tables.dl(), &lens.dl(), &out3.dl()), "rotary_paged_attention_decode(H = 3 over K = 2)");
  refused(call(&q.dl(), &tables64.dl(), &lens.dl(), &out.dl()), "rotary_paged_attention_decode(int64 block_tables)");
  refused(call(&q.dl(), &tables.dl(), &lens3.dl(), &out.dl()),
          "rotary_paged_attention_decode(context_lens [3], B = 2)");
  refused(call(nullptr, &tables.dl(), &lens.dl(), &out.dl()), "rotary_paged_attention_decode(NULL q)");
  refused(call(&q.dl(), &tables.dl(), &lens.dl(), &q.dl()), "rotary_paged_attention_decode(out = q)");
  refused(call(&q.dl(), &tables.dl(), &lens.dl(), &kc.dl()), "rotary_paged_attention_decode(out [4, 4, 2, 8])");
  CHECK_THAT(kc.to_host<uint8_t>() == k_before && vc.to_host<uint8_t>() == v_before,
             "a refused rotary_paged_attention_decode call changed a cache");
  // Values that break the precondition: refused by a plugin that can read them (nothing
  // written); one whose values live on the device may compute (the output is unspecified).
  auto refused_or_computed = [&](const char* what) {
    verlpp_error* e = call(&q.dl(), &tables.dl(), &lens.dl(), &out.dl());
    if (e == nullptr) return;
    ctx.expect_error(e, VERLPP_STATUS_INVALID_ARGUMENT, what);
    CHECK_THAT(kc.to_host<uint8_t>() == k_before && vc.to_host<uint8_t>() == v_before,
               "rotary_paged_attention_decode refused {} but changed a cache", what);
  };
  const std::vector<int64_t> wrong = {3, 12};
  slots.upload(wrong.data());
  refused_or_computed("rotary_paged_attention_decode(slot 12 for last position 5 at row 13)");
  slots.upload(sl.data());
  const std::vector<int32_t> empty_context = {0, 6}, too_long = {4, 9};
  lens.upload(empty_context.data());
  refused_or_computed("rotary_paged_attention_decode(context_lens[0] = 0: no last position)");
  lens.upload(too_long.data());
  refused_or_computed("rotary_paged_attention_decode(context_lens[1] = 9 > 2 blocks of 4)");
}

}  // namespace

void run_rotary_paged_attention_decode_cases(CheckContext& ctx) {
  std::vector<int32_t> many(256);  // lengths 1..640, ragged
  for (size_t i = 0; i < many.size(); ++i) many[i] = int32_t(1 + (i * 97) % 640);
  const std::vector<int32_t> ragged = {1, 16, 17, 15, 33, 2, 48, 64};
  const AttnShape shapes[] = {
      {4, 2, 8, 4, 2, {1, 4, 9}, dl_f32(), false, 0, 0},
      {14, 2, 64, 16, 3, ragged, dl_bf16(), true, 0, 0},             // Qwen2.5-0.5B, a few sequences
      {14, 2, 64, 16, 0, many, dl_bf16(), true, 0, 0},               // ... its batch-256 decode step
      {14, 2, 64, 16, 5, {1537, 1000}, dl_bf16(), true, 0, 100000},  // long contexts: partitions; large angles
      {14, 2, 64, 16, 2, ragged, dl_f16(), true, 1, 0},              // rows off the 4-byte grid
      {32, 1, 64, 16, 1, {100, 17, 1}, dl_bf16(), true, 0, 0},       // a group of 32 query heads
      {8, 8, 128, 16, 2, {300, 45, 16, 1}, dl_bf16(), false, 0, 0},  // head 128, no GQA
      {6, 2, 20, 8, 1, {700, 5, 9}, dl_bf16(), true, 0, 0},          // head 20
      {14, 2, 64, 32, 1, ragged, dl_f32(), true, 0, 7},
  };
  for (const AttnShape& sh : shapes)
    ctx.run("kernels", shape_name(sh), [&] {
      need_slot(ctx);
      std::mt19937 rng(uint32_t(sh.lens.size() * 131 + sh.h * 7 + sh.s + sh.block_size));
      AttnFixture f(ctx.device(), sh, rng);
      const AttnFixture::Result fused = f.run(ctx, true);
      f.check(fused);
      const verlpp_kernel_table& table = *ctx.api().kernels;
      if (table.rotary_kv_store == nullptr || table.paged_attention_decode == nullptr) return;
      const AttnFixture::Result pair = f.run(ctx, false);
      const size_t elem = size_t(sh.dtype.bits / 8);
      for (size_t i = 0; i < fused.out.size() / elem; ++i)
        CHECK_THAT(std::memcmp(fused.out.data() + i * elem, pair.out.data() + i * elem, elem) == 0,
                   "out[{}] = {} differs from this plugin's rotary_kv_store + paged_attention_decode ({})", i,
                   decode_as(fused.out, sh.dtype, i), decode_as(pair.out, sh.dtype, i));
      CHECK_THAT(fused.k_cache == pair.k_cache && fused.v_cache == pair.v_cache,
                 "the caches differ from what this plugin's rotary_kv_store stores");
    });
  ctx.run("kernels", "rotary_paged_attention_decode rejects bad input", [&] { bad_input_case(ctx); });
}

}  // namespace verlpp::conformance
