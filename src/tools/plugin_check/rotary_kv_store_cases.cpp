// verlpp-plugin-check, group "kernels": rotary_kv_store (ABI 1.3), a decode step's RoPE on q and
// k fused with the paged-cache stores of k and v. Checked here:
//  - q_out and every stored k row against rotary_cases.cpp's fp64 RoPE reference (check_rotated,
//    its tolerance), v rows bit for bit;
//  - where the plugin offers rotary_embedding, q_out and the stored k equal its rotation of the
//    same q and k bit for bit (plugin_abi.h: rotated "as rotary_embedding rotates them");
//  - every cache row not in slot_mapping, and a guard block before and after each cache, keeps
//    its bytes; q, k, v (read only) keep theirs.
// Layouts: q, k, v as views of one fused [N, (H + 2K) S] projection (rows padded or not, so a
// plugin's vector and scalar paths both run) or as separate tensors; block sizes 1 to 128;
// slots drawn without repeats in scrambled order; N from 1 to 300; positions negative and large.
#include "check_context.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <random>

namespace verlpp::conformance {
namespace {

struct KvShape {
  int64_t n, h, kv, s;             // tokens, query heads, KV heads, head size
  int64_t block_size, num_blocks;  // the caches: [num_blocks, block_size, K, S]
  DLDataType dtype;
  bool fused;            // q, k, v as views of one [N, (H + 2K) S + pad] buffer
  int64_t pad;           // extra elements per fused row (1: rows off the 16-byte grid)
  int64_t max_position;  // positions in [0, max], or [-max, max] when negative
  bool negative;
};

// Throws NotOffered unless the plugin is 1.3+ and its table holds the slot (a 1.2 table ends before it).
void need_slot(const CheckContext& ctx) {
  const auto& table =
      ctx.appended_kernels("rotary_kv_store", 3, offsetof(verlpp_kernel_table, rotary_kv_store) + sizeof(void*));
  CheckContext::need(reinterpret_cast<const void*>(table.rotary_kv_store), "kernel rotary_kv_store");
}

// One call's operands on the device and what they held before it. The inputs live in one flat
// buffer (fused rows, or three regions one after the other); both caches live in another,
// each between guard blocks: [guard | k_cache | guard | v_cache | guard].
class KvStoreFixture {
 public:
  KvStoreFixture(const hw::Device& device, const KvShape& sh, std::mt19937& rng)
      : sh_(sh),
        elem_(size_t(sh.dtype.bits / 8)),
        row_(sh.kv * sh.s),
        block_(sh.block_size * sh.kv * sh.s),
        in_(device, {input_elements()}, sh.dtype),
        cache_(device, {3 * block_ + 2 * sh.num_blocks * block_}, sh.dtype),
        q_out_(device, {sh.n, sh.h, sh.s}, sh.dtype),
        pos_t_(device, {sh.n}, dl_i64()),
        freq_t_(device, {sh.s / 2}, dl_f32()),
        slot_t_(device, {sh.n}, dl_i64()) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto values = [&](int64_t count) {
      std::vector<float> v(static_cast<size_t>(count));
      for (auto& x : v) x = normal(rng);
      return v;
    };
    in_raw_ = encode_as(values(input_elements()), sh.dtype, in_seen_);
    cache_raw_ = encode_as(values(cache_.dl().shape[0]), sh.dtype, cache_seen_);
    std::uniform_int_distribution<int64_t> position(sh.negative ? -sh.max_position : 0, sh.max_position);
    pos_.resize(size_t(sh.n));
    for (auto& p : pos_) p = position(rng);  // any order, repeats allowed
    if (sh.n > 0) pos_[0] = 0;               // the identity rotation
    inv_freq_ = inverse_frequencies(sh.s, 1e6);
    std::vector<int64_t> all(size_t(sh.num_blocks * sh.block_size));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);  // distinct, scrambled: no two tokens share a row
    slots_.assign(all.begin(), all.begin() + sh.n);
    in_.upload(in_raw_.data());
    cache_.upload(cache_raw_.data());
    pos_t_.upload(pos_.data());
    freq_t_.upload(inv_freq_.data());
    upload_slots();
    // Views: q at column 0 of a fused row, k after q's heads, v after k's; separate: regions.
    const int64_t fused_row = (sh.h + 2 * sh.kv) * sh.s + sh.pad;
    const int64_t offsets[3] = {0, sh.fused ? sh.h * sh.s : sh.n * sh.h * sh.s,
                                sh.fused ? (sh.h + sh.kv) * sh.s : sh.n * (sh.h + sh.kv) * sh.s};
    const int64_t heads[3] = {sh.h, sh.kv, sh.kv};
    for (int o = 0; o < 3; ++o) {
      offset_[o] = offsets[o];
      stride_[o] = sh.fused ? fused_row : heads[o] * sh.s;
      shape_[o] = {sh.n, heads[o], sh.s};
      strides_[o] = {stride_[o], sh.s, 1};
      view_[o] = in_.dl();
      view_[o].ndim = 3;
      view_[o].shape = shape_[o].data();
      view_[o].strides = strides_[o].data();
      view_[o].byte_offset = uint64_t(offsets[o]) * elem_;
    }
    cache_shape_ = {sh.num_blocks, sh.block_size, sh.kv, sh.s};
    for (int c = 0; c < 2; ++c) {
      caches_[c] = cache_.dl();
      caches_[c].ndim = 4;
      caches_[c].shape = cache_shape_.data();
      caches_[c].byte_offset = uint64_t(cache_start(c)) * elem_;
    }
  }

  void upload_slots() { slot_t_.upload(slots_.data()); }
  std::vector<int64_t>& slots() { return slots_; }
  DLTensor& q() { return view_[0]; }
  DLTensor& k() { return view_[1]; }
  DLTensor& v() { return view_[2]; }
  DLTensor& k_cache() { return caches_[0]; }
  DLTensor& v_cache() { return caches_[1]; }
  DLTensor& positions() { return pos_t_.dl(); }
  DLTensor& inv_freq() { return freq_t_.dl(); }
  DLTensor& slot_mapping() { return slot_t_.dl(); }
  DLTensor& q_out() { return q_out_.dl(); }

  verlpp_error* call(const verlpp_kernel_table& table) {
    return table.rotary_kv_store(&q(), &k(), &v(), &positions(), &inv_freq(), &slot_mapping(), &q_out(), &k_cache(),
                                 &v_cache(), nullptr);
  }

  // After a successful call: every check of the file header. `stored` marks the tokens whose
  // rows were written (all of them, but for the out-of-range case).
  void check(const CheckContext& ctx, const std::vector<bool>& stored) {
    CHECK_THAT(in_.to_host<uint8_t>() == in_raw_, "rotary_kv_store wrote to q, k or v (inputs)");
    const std::vector<uint8_t> cache = cache_.to_host<uint8_t>(), q_out = q_out_.to_host<uint8_t>();
    std::vector<bool> written(cache_seen_.size(), false);
    std::vector<float> q_seen, q_got, k_seen, k_got;
    std::vector<uint8_t> q_bits(in_raw_.size()), k_bits(in_raw_.size());  // contiguous copies of q and k as uploaded
    std::vector<uint8_t> k_got_bits;
    for (int64_t t = 0; t < sh_.n; ++t) {
      for (int64_t e = 0; e < sh_.h * sh_.s; ++e) {
        const size_t src = size_t(offset_[0] + t * stride_[0] + e), dst = size_t(t * sh_.h * sh_.s + e);
        q_seen.push_back(float(in_seen_[src]));
        q_got.push_back(float(decode_as(q_out, sh_.dtype, dst)));
        std::memcpy(q_bits.data() + dst * elem_, in_raw_.data() + src * elem_, elem_);
      }
      if (!stored[size_t(t)]) continue;
      const int64_t k_row = cache_start(0) + slots_[size_t(t)] * row_,
                    v_row = cache_start(1) + slots_[size_t(t)] * row_;
      for (int64_t e = 0; e < row_; ++e) {
        const size_t src = size_t(offset_[1] + t * stride_[1] + e);
        k_seen.push_back(float(in_seen_[src]));
        k_got.push_back(float(decode_as(cache, sh_.dtype, size_t(k_row + e))));
        std::memcpy(k_bits.data() + (k_seen.size() - 1) * elem_, in_raw_.data() + src * elem_, elem_);
        const size_t v_src = size_t(offset_[2] + t * stride_[2] + e);
        CHECK_THAT(std::memcmp(cache.data() + size_t(v_row + e) * elem_, in_raw_.data() + v_src * elem_, elem_) == 0,
                   "v_cache row {} (token {}) element {} is not v's value", slots_[size_t(t)], t, e);
        written[size_t(k_row + e)] = written[size_t(v_row + e)] = true;
      }
      k_got_bits.insert(k_got_bits.end(), cache.begin() + k_row * int64_t(elem_),
                        cache.begin() + (k_row + row_) * int64_t(elem_));
    }
    for (size_t i = 0; i < written.size(); ++i)
      CHECK_THAT(written[i] || std::memcmp(cache.data() + i * elem_, cache_raw_.data() + i * elem_, elem_) == 0,
                 "cache element {} ({}) changed, though no slot of slot_mapping names it", i, describe(int64_t(i)));
    std::vector<int64_t> stored_pos;
    for (int64_t t = 0; t < sh_.n; ++t)
      if (stored[size_t(t)]) stored_pos.push_back(pos_[size_t(t)]);
    check_rotated(q_got, q_seen, pos_, inv_freq_, sh_.h, sh_.s, sh_.dtype, "q_out");
    check_rotated(k_got, k_seen, stored_pos, inv_freq_, sh_.kv, sh_.s, sh_.dtype, "k in k_cache");
    same_as_rotary_embedding(ctx, q_bits, q_out, k_bits, k_got_bits, stored_pos);
  }

  // Whether the cache buffer is as uploaded (for refused calls).
  bool caches_untouched() const { return cache_.to_host<uint8_t>() == cache_raw_; }
  int64_t capacity() const { return sh_.num_blocks * sh_.block_size; }

 private:
  int64_t input_elements() const {
    return sh_.fused ? sh_.n * ((sh_.h + 2 * sh_.kv) * sh_.s + sh_.pad) : sh_.n * (sh_.h + 2 * sh_.kv) * sh_.s;
  }
  // First element of cache c (0: k, 1: v) in the cache buffer, after its leading guard block.
  int64_t cache_start(int c) const { return block_ + c * (sh_.num_blocks * block_ + block_); }
  std::string describe(int64_t i) const {
    for (int c = 0; c < 2; ++c)
      if (i >= cache_start(c) && i < cache_start(c) + sh_.num_blocks * block_)
        return fmt::format("{} row {}", c == 0 ? "k_cache" : "v_cache", (i - cache_start(c)) / row_);
    return "a guard block outside both caches";
  }

  // The plugin's own rotary_embedding of the same q and k (contiguous copies), if it offers it.
  void same_as_rotary_embedding(const CheckContext& ctx, const std::vector<uint8_t>& q_bits,
                                const std::vector<uint8_t>& q_out, const std::vector<uint8_t>& k_bits,
                                const std::vector<uint8_t>& k_got_bits, const std::vector<int64_t>& stored_pos) {
    const verlpp_kernel_table* table = ctx.api().kernels;
    const int64_t m = int64_t(stored_pos.size());
    if (table->rotary_embedding == nullptr || sh_.n == 0) return;
    hw::Device d = ctx.device();
    DeviceTensor qt(d, {sh_.n, sh_.h, sh_.s}, sh_.dtype), kt(d, {m, sh_.kv, sh_.s}, sh_.dtype),
        pt(d, {sh_.n}, dl_i64()), kpt(d, {m}, dl_i64()), ft(d, {sh_.s / 2}, dl_f32());
    qt.upload(q_bits.data());
    kt.upload(k_bits.data());
    pt.upload(pos_.data());
    kpt.upload(stored_pos.data());
    ft.upload(inv_freq_.data());
    ctx.expect_ok(table->rotary_embedding(&qt.dl(), nullptr, &pt.dl(), &ft.dl(), nullptr), "rotary_embedding (q)");
    if (m > 0)
      ctx.expect_ok(table->rotary_embedding(nullptr, &kt.dl(), &kpt.dl(), &ft.dl(), nullptr), "rotary_embedding (k)");
    const std::vector<uint8_t> q_want = qt.to_host<uint8_t>(), k_want = kt.to_host<uint8_t>();
    for (size_t i = 0; i < q_want.size() / elem_; ++i)
      CHECK_THAT(std::memcmp(q_out.data() + i * elem_, q_want.data() + i * elem_, elem_) == 0,
                 "q_out[{}] = {} differs from this plugin's rotary_embedding of q ({}): the rotation must be the same",
                 i, decode_as(q_out, sh_.dtype, i), decode_as(q_want, sh_.dtype, i));
    for (size_t i = 0; i < k_want.size() / elem_; ++i)
      CHECK_THAT(std::memcmp(k_got_bits.data() + i * elem_, k_want.data() + i * elem_, elem_) == 0,
                 "stored k element {} = {} differs from this plugin's rotary_embedding of k ({}): the rotation must be "
                 "the same",
                 i, decode_as(k_got_bits, sh_.dtype, i), decode_as(k_want, sh_.dtype, i));
  }

  KvShape sh_;
  size_t elem_;
  int64_t row_, block_;  // elements of one cache row (K * S) and of one block
  DeviceTensor in_, cache_, q_out_, pos_t_, freq_t_, slot_t_;
  std::vector<uint8_t> in_raw_, cache_raw_;
  std::vector<double> in_seen_, cache_seen_;
  std::vector<int64_t> pos_, slots_;
  std::vector<float> inv_freq_;
  int64_t offset_[3] = {}, stride_[3] = {};
  std::vector<int64_t> shape_[3], strides_[3], cache_shape_;
  DLTensor view_[3] = {}, caches_[2] = {};
};

std::string shape_name(const KvShape& s) {
  return fmt::format("rotary_kv_store N={} H={} K={} S={} block={} {}{} positions {}{}", s.n, s.h, s.kv, s.s,
                     s.block_size, sdk::dtype_name(s.dtype),
                     s.fused ? fmt::format(" (fused rows{})", s.pad ? fmt::format(" +{}", s.pad) : "") : "",
                     s.negative ? "+-" : "0..", s.max_position);
}

void bad_input_case(CheckContext& ctx) {
  need_slot(ctx);
  const verlpp_kernel_table& table = *ctx.api().kernels;
  hw::Device d = ctx.device();
  std::mt19937 rng(7);
  KvStoreFixture f(d, {3, 4, 2, 8, 4, 3, dl_bf16(), true, 0, 50, false}, rng);
  DeviceTensor v_f16(d, {3, 2, 8}, dl_f16()), pos_i32(d, {3}, dl_i32()), slots_i32(d, {3}, dl_i32()),
      freq3(d, {3}, dl_f32()), q7(d, {3, 4, 7}, dl_bf16()), k7(d, {3, 2, 7}, dl_bf16()), v7(d, {3, 2, 7}, dl_bf16()),
      out7(d, {3, 4, 7}, dl_bf16()), cache7(d, {3, 4, 2, 7}, dl_bf16()), small_cache(d, {2, 4, 2, 8}, dl_bf16()),
      wide(d, {3, 8, 8}, dl_bf16());
  auto refused = [&](verlpp_error* e, const char* what) { ctx.expect_error(e, VERLPP_STATUS_INVALID_ARGUMENT, what); };
  refused(table.rotary_kv_store(&f.q(), &f.k(), &v_f16.dl(), &f.positions(), &f.inv_freq(), &f.slot_mapping(),
                                &f.q_out(), &f.k_cache(), &f.v_cache(), nullptr),
          "rotary_kv_store(bf16 q, k; f16 v)");
  refused(table.rotary_kv_store(&f.q(), &f.k(), &f.v(), &pos_i32.dl(), &f.inv_freq(), &f.slot_mapping(), &f.q_out(),
                                &f.k_cache(), &f.v_cache(), nullptr),
          "rotary_kv_store(int32 positions)");
  refused(table.rotary_kv_store(&f.q(), &f.k(), &f.v(), &f.positions(), &f.inv_freq(), &slots_i32.dl(), &f.q_out(),
                                &f.k_cache(), &f.v_cache(), nullptr),
          "rotary_kv_store(int32 slot_mapping)");
  refused(table.rotary_kv_store(&f.q(), &f.k(), &f.v(), &f.positions(), &freq3.dl(), &f.slot_mapping(), &f.q_out(),
                                &f.k_cache(), &f.v_cache(), nullptr),
          "rotary_kv_store(S = 8, inv_freq [3])");
  refused(table.rotary_kv_store(&q7.dl(), &k7.dl(), &v7.dl(), &f.positions(), &freq3.dl(), &f.slot_mapping(),
                                &out7.dl(), &cache7.dl(), &cache7.dl(), nullptr),
          "rotary_kv_store(odd head size 7)");
  refused(table.rotary_kv_store(&f.q(), &f.k(), &f.v(), &f.positions(), &f.inv_freq(), &f.slot_mapping(), &f.q_out(),
                                &f.k_cache(), &small_cache.dl(), nullptr),
          "rotary_kv_store(v_cache [2, 4, 2, 8], k_cache [3, 4, 2, 8])");
  refused(table.rotary_kv_store(&f.q(), &f.k(), &f.v(), &f.positions(), &f.inv_freq(), &f.slot_mapping(), &f.q_out(),
                                &f.k_cache(), &f.k_cache(), nullptr),
          "rotary_kv_store(v_cache = k_cache)");
  // q_out as a contiguous [3, 4, 8] tensor at the start of the fused buffer: over q and k.
  DLTensor inside_input = f.q();
  inside_input.strides = nullptr;
  refused(table.rotary_kv_store(&f.q(), &f.k(), &f.v(), &f.positions(), &f.inv_freq(), &f.slot_mapping(), &inside_input,
                                &f.k_cache(), &f.v_cache(), nullptr),
          "rotary_kv_store(q_out inside the fused q, k, v buffer)");
  refused(table.rotary_kv_store(&f.q(), &f.k(), &f.v(), nullptr, &f.inv_freq(), &f.slot_mapping(), &f.q_out(),
                                &f.k_cache(), &f.v_cache(), nullptr),
          "rotary_kv_store(NULL positions)");
  // Every other head of a [3, 8, 8] buffer: the heads of q are not dense.
  std::vector<int64_t> shape = {3, 4, 8}, every_other = {64, 16, 1}, spread = {32, 8, 2};
  DLTensor sparse_heads = wide.dl(), sparse_dims = wide.dl();
  sparse_heads.shape = sparse_dims.shape = shape.data();
  sparse_heads.strides = every_other.data();
  sparse_dims.strides = spread.data();
  refused(table.rotary_kv_store(&sparse_heads, &f.k(), &f.v(), &f.positions(), &f.inv_freq(), &f.slot_mapping(),
                                &f.q_out(), &f.k_cache(), &f.v_cache(), nullptr),
          "rotary_kv_store(q heads at stride 2S)");
  refused(table.rotary_kv_store(&sparse_dims, &f.k(), &f.v(), &f.positions(), &f.inv_freq(), &f.slot_mapping(),
                                &f.q_out(), &f.k_cache(), &f.v_cache(), nullptr),
          "rotary_kv_store(q head dims at stride 2)");
  CHECK_THAT(f.caches_untouched(), "a refused rotary_kv_store call changed a cache");
}

// A slot outside [0, num_blocks * block_size): refused (INVALID_ARGUMENT, nothing written), or,
// by a plugin whose slots live where it cannot read them without a sync, that token's k and v
// stored nowhere. Never a write outside the caches or into another row.
void slot_out_of_range_case(CheckContext& ctx) {
  need_slot(ctx);
  const verlpp_kernel_table& table = *ctx.api().kernels;
  hw::Device d = ctx.device();
  std::mt19937 rng(11);
  KvStoreFixture f(d, {6, 4, 2, 16, 4, 3, dl_f32(), true, 0, 100, false}, rng);
  f.slots()[1] = f.capacity();  // one past the last row
  f.slots()[4] = -1;
  f.upload_slots();
  verlpp_error* e = f.call(table);
  if (e != nullptr) {
    ctx.expect_error(e, VERLPP_STATUS_INVALID_ARGUMENT,
                     "rotary_kv_store(slot_mapping with num_blocks * block_size and -1)");
    CHECK_THAT(f.caches_untouched(), "rotary_kv_store refused an out-of-range slot but changed a cache");
    return;
  }
  f.check(ctx, {true, false, true, true, false, true});
}

}  // namespace

void run_rotary_kv_store_cases(CheckContext& ctx) {
  const KvShape shapes[] = {
      {1, 1, 1, 2, 1, 3, dl_f32(), false, 0, 7, false},
      {1, 14, 2, 64, 16, 4, dl_bf16(), true, 0, 4096, false},       // one decode token
      {256, 14, 2, 64, 16, 40, dl_bf16(), true, 0, 4096, false},    // Qwen2.5-0.5B's decode step
      {300, 14, 2, 64, 32, 12, dl_bf16(), true, 0, 131071, false},  // many tokens, positions near 2^17
      {256, 14, 2, 64, 16, 20, dl_f16(), true, 1, 40000, true},     // rows off the 16-byte grid
      {7, 4, 2, 64, 8, 5, dl_f32(), true, 0, 40000, true},
      {5, 3, 1, 96, 4, 9, dl_f16(), false, 0, 2048, false},
      {9, 6, 3, 18, 3, 7, dl_f32(), true, 0, 300, true},  // an odd number of pairs
      {13, 8, 8, 128, 16, 2, dl_bf16(), false, 0, 8192, false},
      {33, 14, 2, 64, 1, 50, dl_f16(), true, 8, 65535, true},      // block size 1
      {20, 2, 4, 20, 5, 8, dl_bf16(), true, 0, 1000, false},       // more KV heads than query heads; S/2 = 10
      {64, 12, 4, 128, 128, 1, dl_f32(), false, 0, 100000, true},  // one block of 128
  };
  for (const KvShape& sh : shapes)
    ctx.run("kernels", shape_name(sh), [&] {
      need_slot(ctx);
      hw::Device d = ctx.device();
      std::mt19937 rng(uint32_t(sh.n * 1013 + sh.h * 37 + sh.s + sh.block_size));
      KvStoreFixture f(d, sh, rng);
      ctx.expect_ok(f.call(*ctx.api().kernels), "rotary_kv_store");
      f.check(ctx, std::vector<bool>(size_t(sh.n), true));
    });
  ctx.run("kernels", "rotary_kv_store N=0 writes nothing", [&] {
    need_slot(ctx);
    hw::Device d = ctx.device();
    std::mt19937 rng(3);
    KvStoreFixture f(d, {0, 2, 1, 8, 4, 2, dl_bf16(), true, 0, 10, false}, rng);
    ctx.expect_ok(f.call(*ctx.api().kernels), "rotary_kv_store(N = 0)");
    CHECK_THAT(f.caches_untouched(), "rotary_kv_store of no tokens changed a cache");
  });
  ctx.run("kernels", "rotary_kv_store with a slot outside the cache", [&] { slot_out_of_range_case(ctx); });
  ctx.run("kernels", "rotary_kv_store rejects bad input", [&] { bad_input_case(ctx); });
}

}  // namespace verlpp::conformance
