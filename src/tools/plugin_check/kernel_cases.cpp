// verlpp-plugin-check, group "kernels": every kernel the plugin offers against reference math
// written here in fp64 loops, on awkward shapes (1, odd, prime, wider than a cache line) and
// strided rows (the sampler, rms_norm, rotary, logprob_backward and SwiGLU cases have files of
// their own); and the kernel table itself (its size, the kernels that come in pairs).
// Reports the worst error and the first index over tolerance.
#include "check_context.hpp"

#include <verlpp/sdk/kernel_list.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace verlpp::conformance {
void run_logprob_entropy_cases(CheckContext& ctx) {
  hw::Device d = ctx.device();
  const auto* table = ctx.api().kernels;
  struct Shape {
    int64_t n, v, row_stride;
    float temperature;
    DLDataType dtype;
    bool entropy;
  };
  const Shape shapes[] = {{1, 1, 1, 1.0f, dl_f32(), true},        {7, 5, 5, 1.0f, dl_f32(), true},
                          {33, 1000, 1000, 0.7f, dl_f32(), true}, {3, 4099, 4111, 1.0f, dl_f32(), false},
                          {17, 513, 513, 1.3f, dl_bf16(), true},  {9, 257, 260, 1.0f, dl_f16(), true}};
  for (const Shape& s : shapes) {
    std::string name = fmt::format("logprob_entropy N={} V={} stride={} T={} {}{}", s.n, s.v, s.row_stride,
                                   s.temperature, sdk::dtype_name(s.dtype), s.entropy ? "" : " (no entropy)");
    ctx.run("kernels", name, [&] {
      CheckContext::need(table ? reinterpret_cast<const void*>(table->logprob_entropy) : nullptr,
                         "kernel logprob_entropy");
      std::mt19937 rng(uint32_t(s.n * 131 + s.v));
      std::normal_distribution<float> normal(0.0f, 3.0f);
      std::vector<float> logits(size_t(s.n * s.row_stride));
      for (auto& x : logits) x = normal(rng);
      std::vector<int64_t> labels(size_t(s.n));
      for (auto& y : labels) y = int64_t(rng() % uint32_t(s.v));
      std::vector<float> seen = logits;
      DeviceTensor lt(d, {s.n * s.row_stride}, s.dtype);
      if (s.dtype.bits == 32)
        lt.upload(logits.data());
      else
        lt.upload(round_half(logits, s.dtype, seen).data());
      // A [N, V] view with row stride `row_stride` over the flat buffer.
      std::vector<int64_t> shape = {s.n, s.v}, strides = {s.row_stride, 1};
      DLTensor view = lt.dl();
      view.ndim = 2;
      view.shape = shape.data();
      view.strides = strides.data();
      DeviceTensor yt(d, {s.n}, dl_i64()), lp(d, {s.n}, dl_f32()), ent(d, {s.n}, dl_f32());
      yt.upload(labels.data());
      ctx.expect_ok(
          table->logprob_entropy(&view, &yt.dl(), s.temperature, &lp.dl(), s.entropy ? &ent.dl() : nullptr, nullptr),
          "logprob_entropy");
      auto got_lp = lp.to_host<float>();
      auto got_ent = ent.to_host<float>();
      Worst wl, we;
      for (int64_t r = 0; r < s.n; ++r) {
        const float* row = seen.data() + r * s.row_stride;
        double mx = -INFINITY;
        for (int64_t j = 0; j < s.v; ++j) mx = std::max(mx, double(row[j]) / s.temperature);
        double sum = 0, weighted = 0;
        for (int64_t j = 0; j < s.v; ++j) {
          double z = double(row[j]) / s.temperature, e = std::exp(z - mx);
          sum += e;
          weighted += e * z;
        }
        double lse = mx + std::log(sum);
        double want_lp = double(row[labels[size_t(r)]]) / s.temperature - lse;
        double want_ent = lse - weighted / sum;
        wl.add(size_t(r), got_lp[size_t(r)], want_lp, 1e-4 + 1e-5 * std::fabs(want_lp));
        if (s.entropy) we.add(size_t(r), got_ent[size_t(r)], want_ent, 1e-4 + 1e-5 * std::fabs(want_ent));
      }
      wl.require("log-prob");
      we.require("entropy");
    });
  }
  ctx.run("kernels", "logprob_entropy rejects bad input", [&] {
    CheckContext::need(table ? reinterpret_cast<const void*>(table->logprob_entropy) : nullptr,
                       "kernel logprob_entropy");
    DeviceTensor lt(d, {4, 8}, dl_f32()), yt(d, {5}, dl_i64()), lp(d, {4}, dl_f32());
    ctx.expect_error(table->logprob_entropy(&lt.dl(), &yt.dl(), 1.0f, &lp.dl(), nullptr, nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "logprob_entropy(labels [5] for 4 rows)");
    ctx.expect_error(table->logprob_entropy(nullptr, &yt.dl(), 1.0f, &lp.dl(), nullptr, nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "logprob_entropy(NULL logits)");
  });
}

// ---- paged_attention_decode: one query token per sequence over a paged KV cache with GQA,
// against softmax(q . k * scale) v in fp64 over the positions the block table maps. Beyond the
// small awkward shapes, Qwen2.5-0.5B's decode shape (14 query heads over 2 KV heads, head 64)
// in f32 and bf16 with: ragged lengths around the block size (and 0); contexts of 1000+ positions
// for a few sequences (a fast kernel splits them over several partitions and combines them);
// a batch of 320 sequences (640 (sequence, KV head) pairs: enough to fill a GPU unsplit); a
// head size of 20 in bf16 (not a whole 16-byte vector); head 128 without GQA; head 256.
void run_paged_attention_decode_cases(CheckContext& ctx) {
  const auto* table = ctx.api().kernels;
  struct Shape {
    int64_t b, h, kv, s, block_size, num_blocks, max_blocks;
    std::vector<int32_t> lens;
    DLDataType dtype;
  };
  std::vector<int32_t> many(320);  // lengths 1..640, ragged
  for (size_t i = 0; i < many.size(); ++i) many[i] = int32_t(1 + (i * 97) % 640);
  const std::vector<int32_t> ragged = {1, 16, 17, 0, 15, 33, 2, 48};
  const Shape shapes[] = {{3, 4, 2, 20, 4, 12, 4, {1, 7, 13}, dl_f32()},
                          {2, 14, 2, 64, 16, 9, 4, {50, 33}, dl_f32()},
                          {2, 6, 3, 32, 8, 10, 5, {17, 40}, dl_bf16()},
                          {1, 2, 1, 16, 4, 80, 80, {300}, dl_f16()},  // longer than one 256-position chunk
                          {8, 14, 2, 64, 16, 30, 4, ragged, dl_bf16()},
                          {8, 14, 2, 64, 16, 30, 4, ragged, dl_f32()},
                          {2, 14, 2, 64, 16, 300, 100, {1537, 1000}, dl_bf16()},
                          {3, 14, 2, 64, 16, 300, 130, {2053, 7, 1200}, dl_f32()},
                          {320, 14, 2, 64, 16, 2000, 40, many, dl_bf16()},
                          {2, 6, 2, 20, 8, 200, 100, {700, 5}, dl_bf16()},
                          {2, 4, 4, 128, 16, 60, 30, {300, 45}, dl_f16()},
                          {1, 8, 1, 256, 16, 40, 40, {600}, dl_f32()}};
  for (const Shape& sh : shapes) {
    std::string lens;
    if (sh.lens.size() <= 8) {
      for (int32_t len : sh.lens) lens += (lens.empty() ? "" : ",") + std::to_string(len);
    } else {
      lens = fmt::format("{}..{}", *std::min_element(sh.lens.begin(), sh.lens.end()),
                         *std::max_element(sh.lens.begin(), sh.lens.end()));
    }
    std::string name = fmt::format("paged_attention_decode B={} H={} K={} S={} block={} lens={} {}", sh.b, sh.h, sh.kv,
                                   sh.s, sh.block_size, lens, sdk::dtype_name(sh.dtype));
    ctx.run("kernels", name, [&] {
      CheckContext::need(table ? reinterpret_cast<const void*>(table->paged_attention_decode) : nullptr,
                         "kernel paged_attention_decode");
      hw::Device d = ctx.device();
      std::mt19937 rng(uint32_t(sh.b * 31 + sh.s));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      const bool half = sh.dtype.bits == 16;
      auto values = [&](int64_t n, std::vector<float>& seen) {
        std::vector<float> v(static_cast<size_t>(n));
        for (auto& x : v) x = normal(rng);
        seen = v;
        return v;
      };
      std::vector<float> q_seen, k_seen, v_seen;
      std::vector<float> q = values(sh.b * sh.h * sh.s, q_seen);
      std::vector<float> kc = values(sh.num_blocks * sh.block_size * sh.kv * sh.s, k_seen);
      std::vector<float> vc = values(sh.num_blocks * sh.block_size * sh.kv * sh.s, v_seen);
      // Block tables: each sequence gets distinct physical blocks in a scrambled order.
      std::vector<int32_t> physical(size_t(sh.num_blocks));
      std::iota(physical.begin(), physical.end(), 0);
      std::shuffle(physical.begin(), physical.end(), rng);
      std::vector<int32_t> tables(size_t(sh.b * sh.max_blocks), -1);
      size_t next = 0;
      for (int64_t b = 0; b < sh.b; ++b) {
        int64_t needed = (sh.lens[size_t(b)] + sh.block_size - 1) / sh.block_size;
        for (int64_t i = 0; i < needed; ++i) tables[size_t(b * sh.max_blocks + i)] = physical[next++ % physical.size()];
      }
      DeviceTensor qt(d, {sh.b, sh.h, sh.s}, sh.dtype), kt(d, {sh.num_blocks, sh.block_size, sh.kv, sh.s}, sh.dtype),
          vt(d, {sh.num_blocks, sh.block_size, sh.kv, sh.s}, sh.dtype), bt(d, {sh.b, sh.max_blocks}, dl_i32()),
          lt(d, {sh.b}, dl_i32()), ot(d, {sh.b, sh.h, sh.s}, sh.dtype);
      if (half) {
        qt.upload(round_half(q, sh.dtype, q_seen).data());
        kt.upload(round_half(kc, sh.dtype, k_seen).data());
        vt.upload(round_half(vc, sh.dtype, v_seen).data());
      } else {
        qt.upload(q.data());
        kt.upload(kc.data());
        vt.upload(vc.data());
      }
      bt.upload(tables.data());
      lt.upload(sh.lens.data());
      const float scale = 1.0f / std::sqrt(float(sh.s));
      ctx.expect_ok(
          table->paged_attention_decode(&qt.dl(), &kt.dl(), &vt.dl(), &bt.dl(), &lt.dl(), scale, &ot.dl(), nullptr),
          "paged_attention_decode");
      std::vector<float> got(q.size());
      if (half) {
        auto raw = ot.to_host<uint16_t>();
        for (size_t i = 0; i < raw.size(); ++i)
          got[i] = sh.dtype.code == kDLBfloat ? from_bf16(raw[i]) : from_f16(raw[i]);
      } else {
        got = ot.to_host<float>();
      }
      const double ulp = sh.dtype.code == kDLBfloat ? 1.0 / 128 : half ? 1.0 / 1024 : 0.0;
      Worst worst;
      for (int64_t b = 0; b < sh.b; ++b)
        for (int64_t h = 0; h < sh.h; ++h) {
          const int64_t kv = h / (sh.h / sh.kv), len = sh.lens[size_t(b)];
          auto at = [&](const std::vector<float>& cache, int64_t pos, int64_t dim) {
            int64_t block = tables[size_t(b * sh.max_blocks + pos / sh.block_size)];
            return double(cache[size_t(((block * sh.block_size + pos % sh.block_size) * sh.kv + kv) * sh.s + dim)]);
          };
          std::vector<double> score(static_cast<size_t>(len));
          double mx = -INFINITY;
          for (int64_t t = 0; t < len; ++t) {
            double dot = 0;
            for (int64_t j = 0; j < sh.s; ++j)
              dot += double(q_seen[size_t((b * sh.h + h) * sh.s + j)]) * at(k_seen, t, j);
            score[size_t(t)] = dot * scale;
            mx = std::max(mx, score[size_t(t)]);
          }
          double sum = 0;
          for (double& x : score) sum += (x = std::exp(x - mx));
          for (int64_t j = 0; j < sh.s; ++j) {
            double want = 0;
            for (int64_t t = 0; t < len; ++t) want += score[size_t(t)] / sum * at(v_seen, t, j);
            size_t i = size_t((b * sh.h + h) * sh.s + j);
            worst.add(i, got[i], want, half ? 2e-3 + std::fabs(want) * 2 * ulp : 1e-5 + 1e-5 * std::fabs(want));
          }
        }
      worst.require("attention output");
    });
  }
  ctx.run("kernels", "paged_attention_decode rejects bad input", [&] {
    CheckContext::need(table ? reinterpret_cast<const void*>(table->paged_attention_decode) : nullptr,
                       "kernel paged_attention_decode");
    hw::Device d = ctx.device();
    // H = 3 query heads over K = 2 KV heads: not a multiple.
    DeviceTensor qt(d, {1, 3, 8}, dl_f32()), kt(d, {2, 4, 2, 8}, dl_f32()), vt(d, {2, 4, 2, 8}, dl_f32()),
        bt(d, {1, 2}, dl_i32()), lt(d, {1}, dl_i32()), ot(d, {1, 3, 8}, dl_f32());
    ctx.expect_error(
        table->paged_attention_decode(&qt.dl(), &kt.dl(), &vt.dl(), &bt.dl(), &lt.dl(), 1.0f, &ot.dl(), nullptr),
        VERLPP_STATUS_INVALID_ARGUMENT, "paged_attention_decode(H=3, K=2)");
    ctx.expect_error(
        table->paged_attention_decode(nullptr, &kt.dl(), &vt.dl(), &bt.dl(), &lt.dl(), 1.0f, &ot.dl(), nullptr),
        VERLPP_STATUS_INVALID_ARGUMENT, "paged_attention_decode(NULL q)");
  });
}

// Kernels the host uses only together (plugin-abi.md, "Kernel contracts"): one offered alone is
// never called, so the plugin's work on it is lost without a word.
struct KernelPair {
  sdk::KernelId first, second;
};
constexpr KernelPair kPairs[] = {{sdk::KernelId::silu_mul, sdk::KernelId::silu_mul_backward}};

void run_kernel_table_cases(CheckContext& ctx) {
  ctx.run("kernels", "table struct_size", [&] {
    CheckContext::need(reinterpret_cast<const void*>(ctx.api().kernels), "kernel table");
    const size_t size = ctx.api().kernels->struct_size;
    const uint32_t minor = std::min<uint32_t>(ctx.api().abi_minor, VERLPP_PLUGIN_ABI_MINOR);
    const size_t expected = sdk::kernel_table_size(minor);
    std::string lost;
    for (const sdk::KernelInfo& k : sdk::kKernels)
      if (k.minor <= minor && sizeof(size_t) + (size_t(k.id) + 1) * sizeof(void*) > size)
        lost += (lost.empty() ? "" : ", ") + std::string(k.name);
    CHECK_THAT(size >= expected,
               "kernel table struct_size is {} bytes, expected {} (sizeof(verlpp_kernel_table) of ABI 1.{}, the "
               "plugin's minor): the host ignores every entry past byte {} ({})",
               size, expected, minor, size, lost);
  });
  ctx.run("kernels", "kernels that come in pairs are offered together", [&] {
    CheckContext::need(reinterpret_cast<const void*>(ctx.api().kernels), "kernel table");
    const verlpp_kernel_table& given = *ctx.api().kernels;
    // Only the entries inside the plugin's struct_size and minor (the rest the host never sees).
    auto offered = [&](sdk::KernelId id) {
      const sdk::KernelInfo& k = sdk::kernel_info(id);
      return k.minor <= ctx.api().abi_minor && sizeof(size_t) + (size_t(id) + 1) * sizeof(void*) <= given.struct_size &&
             sdk::kernel_entry(given, id) != nullptr;
    };
    for (const KernelPair& p : kPairs) {
      const char *a = sdk::kernel_info(p.first).name, *b = sdk::kernel_info(p.second).name;
      CHECK_THAT(offered(p.first) == offered(p.second),
                 "{} is offered without {}: the host calls them only as a pair, so {} is never used (offer both or "
                 "neither)",
                 offered(p.first) ? a : b, offered(p.first) ? b : a, offered(p.first) ? a : b);
    }
  });
}

}  // namespace verlpp::conformance
