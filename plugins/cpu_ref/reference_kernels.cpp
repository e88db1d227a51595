// cpu_ref: plain-loop reference kernels. Inputs may be f32, bf16 or f16; math is in fp32/fp64
// (log-sum-exp with the row max subtracted), results are written as f32 (logprob_entropy) or in
// the input dtype (logprob_backward, rms_norm, rotary_embedding and 1.3's fusions add_rms_norm and
// rotary_kv_store, rounded where HF rounds), as plugin_abi.h defines them; sample sorts each row
// (top-k, top-p) and draws with the host's counter-based splitmix64 recipe; paged_attention_decode
// walks the block tables in fp64. A fusion calls the very row functions of the kernels it fuses.
#include "reference_kernels.hpp"
#include "half_float.hpp"

#include <verlpp/sdk/dlpack_util.hpp>
#include <verlpp/sdk/attention_args.hpp>
#include <verlpp/sdk/kernel_args.hpp>
#include <verlpp/sdk/sample_args.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace verlpp::cpu_ref {

void require_host(const DLTensor& t, const char* what) {
  sdk::require(t.device.device_type == kDLCPU, std::string(what) + " is not in host memory");
}

namespace {

using sdk::checked;
using sdk::fail;
using sdk::is_f32;
using sdk::is_float_dtype;
using sdk::require;

// `v` rounded to dtype `d` and read back as fp32.
float round_to(DLDataType d, float v) { return sdk::round_to_dtype(d, v); }

}  // namespace

verlpp_error* ReferenceKernels::logprob_entropy(const DLTensor* logits_p, const DLTensor* labels_p, float temperature,
                                                DLTensor* out_logprob_p, DLTensor* out_entropy_p, verlpp_stream) {
  return sdk::guard("cpu_ref logprob_entropy", [&] {
    const sdk::LogprobEntropyArgs a =
        sdk::check_logprob_entropy_args(logits_p, labels_p, temperature, out_logprob_p, out_entropy_p);
    for (const DLTensor* t :
         {logits_p, labels_p, static_cast<const DLTensor*>(out_logprob_p), static_cast<const DLTensor*>(out_entropy_p)})
      if (t != nullptr) require_host(*t, "every logprob_entropy tensor");
    const DLTensor& logits = *logits_p;
    const void* base = sdk::data_ptr(logits);
    const auto* label = static_cast<const int64_t*>(sdk::data_ptr(*labels_p));
    auto* lp = static_cast<float*>(sdk::data_ptr(*out_logprob_p));
    float* ent = a.with_entropy ? static_cast<float*>(sdk::data_ptr(*out_entropy_p)) : nullptr;
    sdk::check_label_values(label, a.n, a.v);
    for (int64_t r = 0; r < a.n; ++r) {
      int64_t off = r * a.row_stride;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < a.v; ++j) mx = std::max(mx, load(base, logits.dtype, off + j) / temperature);
      double sum = 0.0, weighted = 0.0;
      for (int64_t j = 0; j < a.v; ++j) {
        double z = double(load(base, logits.dtype, off + j) / temperature);
        double e = std::exp(z - double(mx));
        sum += e;
        weighted += e * z;
      }
      double lse = double(mx) + std::log(sum);
      lp[r] = float(double(load(base, logits.dtype, off + label[r]) / temperature) - lse);
      if (ent) ent[r] = float(lse - weighted / sum);
    }
  });
}

// In fp64 per element, rounded once to the output dtype. In place (out_grad = logits) is safe:
// each element is read before it is written, and no other element reads it.
verlpp_error* ReferenceKernels::logprob_backward(const DLTensor* logits_p, const DLTensor* labels_p,
                                                 const DLTensor* lse_p, const DLTensor* grad_logprob_p,
                                                 const DLTensor* mean_z_p, const DLTensor* grad_entropy_p,
                                                 float temperature, DLTensor* out_p, verlpp_stream) {
  return sdk::guard("cpu_ref logprob_backward", [&] {
    const sdk::LogprobBackwardArgs a = sdk::check_logprob_backward_args(logits_p, labels_p, lse_p, grad_logprob_p,
                                                                        mean_z_p, grad_entropy_p, temperature, out_p);
    for (const DLTensor* t :
         {logits_p, labels_p, lse_p, static_cast<const DLTensor*>(out_p), grad_logprob_p, mean_z_p, grad_entropy_p})
      if (t != nullptr) require_host(*t, "every logprob_backward tensor");
    const void* in = sdk::data_ptr(*logits_p);
    void* out = sdk::data_ptr(*out_p);
    const auto* label = static_cast<const int64_t*>(sdk::data_ptr(*labels_p));
    const auto* lse = static_cast<const float*>(sdk::data_ptr(*lse_p));
    const auto* g_lp = a.grad_logprob ? static_cast<const float*>(sdk::data_ptr(*a.grad_logprob)) : nullptr;
    const auto* mean_z = a.mean_z ? static_cast<const float*>(sdk::data_ptr(*a.mean_z)) : nullptr;
    const auto* g_ent = a.grad_entropy ? static_cast<const float*>(sdk::data_ptr(*a.grad_entropy)) : nullptr;
    const double t = temperature;
    sdk::check_label_values(label, a.n, a.v);
    for (int64_t r = 0; r < a.n; ++r) {
      const double glp = g_lp ? g_lp[r] : 0.0, ge = g_ent ? g_ent[r] : 0.0, mz = mean_z ? mean_z[r] : 0.0;
      for (int64_t j = 0; j < a.v; ++j) {
        const double z = double(load(in, logits_p->dtype, r * a.row_stride + j)) / t;
        const double p = std::exp(z - double(lse[r]));
        const double g = glp * ((j == label[r] ? 1.0 : 0.0) - p) - ge * p * (z - mz);
        store(out, out_p->dtype, r * a.out_row_stride + j, float(g / t));
      }
    }
  });
}

namespace {

// SwiGLU's product and its backward, element by element in fp32 with the dtype's rounding
// where HF's forward and autograd's backward round (plugin_abi.h).
float silu_of(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

verlpp_error* ReferenceKernels::silu_mul(const DLTensor* gate_p, const DLTensor* up_p, DLTensor* out_p, verlpp_stream) {
  return sdk::guard("cpu_ref silu_mul", [&] {
    const sdk::SiluMulArgs a = sdk::check_silu_mul_args({{gate_p, "gate"}, {up_p, "up"}, {out_p, "out"}});
    for (const DLTensor* t : {gate_p, up_p, static_cast<const DLTensor*>(out_p)})
      require_host(*t, "every silu_mul tensor");
    const DLDataType d = gate_p->dtype;
    const void *g = sdk::data_ptr(*gate_p), *u = sdk::data_ptr(*up_p);
    void* out = sdk::data_ptr(*out_p);
    for (int64_t r = 0; r < a.n; ++r)
      for (int64_t j = 0; j < a.f; ++j) {
        const float s = round_to(d, silu_of(load(g, d, r * a.row_strides[0] + j)));
        store(out, d, r * a.row_strides[2] + j, s * load(u, d, r * a.row_strides[1] + j));
      }
  });
}

verlpp_error* ReferenceKernels::silu_mul_backward(const DLTensor* gate_p, const DLTensor* up_p, const DLTensor* grad_p,
                                                  DLTensor* grad_gate_p, DLTensor* grad_up_p, verlpp_stream) {
  return sdk::guard("cpu_ref silu_mul_backward", [&] {
    const sdk::SiluMulArgs a = sdk::check_silu_mul_args(
        {{gate_p, "gate"}, {up_p, "up"}, {grad_p, "grad_out"}, {grad_gate_p, "grad_gate"}, {grad_up_p, "grad_up"}});
    for (const DLTensor* t :
         {gate_p, up_p, grad_p, static_cast<const DLTensor*>(grad_gate_p), static_cast<const DLTensor*>(grad_up_p)})
      require_host(*t, "every silu_mul_backward tensor");
    const DLDataType d = gate_p->dtype;
    const void *g = sdk::data_ptr(*gate_p), *u = sdk::data_ptr(*up_p), *dy = sdk::data_ptr(*grad_p);
    void *dg = sdk::data_ptr(*grad_gate_p), *du = sdk::data_ptr(*grad_up_p);
    for (int64_t r = 0; r < a.n; ++r)
      for (int64_t j = 0; j < a.f; ++j) {
        const float x = load(g, d, r * a.row_strides[0] + j), up = load(u, d, r * a.row_strides[1] + j);
        const float grad = load(dy, d, r * a.row_strides[2] + j);
        const float s = round_to(d, silu_of(x));
        const float grad_s = round_to(d, grad * up);
        const float sig = 1.0f / (1.0f + std::exp(-x));
        store(dg, d, r * a.row_strides[3] + j, grad_s * sig * (1.0f + x * (1.0f - sig)));
        store(du, d, r * a.row_strides[4] + j, grad * s);
      }
  });
}

namespace {

// Row r of rms_norm: out = weight * T(x * inv), inv = 1 / sqrt(mean(x^2) + eps), x read as
// stored (dtype T). Shared by rms_norm and add_rms_norm, which must agree bit for bit.
void rms_norm_row(const void* xb, const void* wb, void* ob, DLDataType dtype, int64_t r, int64_t d, float eps) {
  double ss = 0.0;
  for (int64_t j = 0; j < d; ++j) {
    double v = load(xb, dtype, r * d + j);
    ss += v * v;
  }
  float inv = float(1.0 / std::sqrt(ss / double(d > 0 ? d : 1) + double(eps)));
  // As HF's RMSNorm: normalise in fp32, round to the input dtype, then scale by the weight.
  for (int64_t j = 0; j < d; ++j) {
    float normed = round_to(dtype, load(xb, dtype, r * d + j) * inv);
    store(ob, dtype, r * d + j, load(wb, dtype, j) * normed);
  }
}

}  // namespace

verlpp_error* ReferenceKernels::rms_norm(const DLTensor* x_p, const DLTensor* w_p, float eps, DLTensor* out_p,
                                         verlpp_stream) {
  return sdk::guard("cpu_ref rms_norm", [&] {
    const sdk::RmsNormArgs a = sdk::check_rms_norm_args(x_p, w_p, eps, out_p);
    for (const DLTensor* t : {x_p, w_p, static_cast<const DLTensor*>(out_p)}) require_host(*t, "every rms_norm tensor");
    for (int64_t r = 0; r < a.n; ++r)
      rms_norm_row(sdk::data_ptr(*x_p), sdk::data_ptr(*w_p), sdk::data_ptr(*out_p), x_p->dtype, r, a.d, eps);
  });
}

// ABI 1.3: residual = T(residual + x) (one fp32 add, one rounding), then out = rms_norm of the
// rounded residual through the very function rms_norm uses. Row by row, so x may be residual.
verlpp_error* ReferenceKernels::add_rms_norm(const DLTensor* x_p, DLTensor* residual_p, const DLTensor* w_p, float eps,
                                             DLTensor* out_p, verlpp_stream) {
  return sdk::guard("cpu_ref add_rms_norm", [&] {
    const sdk::AddRmsNormArgs a = sdk::check_add_rms_norm_args(x_p, residual_p, w_p, eps, out_p);
    for (const DLTensor* t : {x_p, static_cast<const DLTensor*>(residual_p), w_p, static_cast<const DLTensor*>(out_p)})
      require_host(*t, "every add_rms_norm tensor");
    const DLDataType dtype = x_p->dtype;
    const void* x = sdk::data_ptr(*x_p);
    void* residual = sdk::data_ptr(*residual_p);
    for (int64_t r = 0; r < a.n; ++r) {
      for (int64_t j = 0; j < a.d; ++j) {
        const int64_t i = r * a.d + j;
        store(residual, dtype, i, load(residual, dtype, i) + load(x, dtype, i));
      }
      rms_norm_row(residual, sdk::data_ptr(*w_p), sdk::data_ptr(*out_p), dtype, r, a.d, eps);
    }
  });
}

// Decode attention over a paged KV cache, one query token per sequence, GQA: query head h reads
// KV head h / (H / K); position t of sequence b lives in block block_tables[b, t / block_size],
// slot t % block_size. fp64 scores and softmax; the output rounded to the input dtype.
verlpp_error* ReferenceKernels::paged_attention_decode(const DLTensor* q_p, const DLTensor* k_p, const DLTensor* v_p,
                                                       const DLTensor* bt_p, const DLTensor* lens_p, float scale,
                                                       DLTensor* out_p, verlpp_stream) {
  return sdk::guard("cpu_ref paged_attention_decode", [&] {
    const sdk::PagedAttentionArgs a = sdk::check_paged_attention_decode_args(q_p, k_p, v_p, bt_p, lens_p, out_p);
    for (const DLTensor* t : {q_p, k_p, v_p, bt_p, lens_p, static_cast<const DLTensor*>(out_p)})
      require_host(*t, "paged_attention_decode tensor");
    const DLTensor &q = *q_p, &kc = *k_p, &vc = *v_p, &bt = *bt_p, &lens = *lens_p, &out = *out_p;
    const int64_t b = a.batch, h = a.q_heads, s = a.head_size;
    const int64_t num_blocks = a.num_blocks, block_size = a.block_size, kv = a.kv_heads, max_blocks = a.max_blocks;
    const auto* table = static_cast<const int32_t*>(sdk::data_ptr(bt));
    const auto* len = static_cast<const int32_t*>(sdk::data_ptr(lens));
    const void* qb = sdk::data_ptr(q);
    const void* kb = sdk::data_ptr(kc);
    const void* vb = sdk::data_ptr(vc);
    void* ob = sdk::data_ptr(out);
    for (int64_t r = 0; r < b; ++r) {
      require(len[r] >= 0 && len[r] <= max_blocks * block_size,
              "context length " + std::to_string(len[r]) + " of sequence " + std::to_string(r) + " does not fit " +
                  std::to_string(max_blocks) + " blocks of " + std::to_string(block_size));
      // Element offset of (position t, KV head g, dim 0) of sequence r.
      auto row = [&](int64_t t, int64_t g) {
        int64_t block = table[r * max_blocks + t / block_size];
        require(block >= 0 && block < num_blocks, "block table entry " + std::to_string(block) + " of sequence " +
                                                      std::to_string(r) + " is outside [0, " +
                                                      std::to_string(num_blocks) + ")");
        return ((block * block_size + t % block_size) * kv + g) * s;
      };
      for (int64_t head = 0; head < h; ++head) {
        const int64_t g = head / (h / kv), qo = (r * h + head) * s;
        std::vector<double> score(static_cast<size_t>(len[r]));
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t t = 0; t < len[r]; ++t) {
          const int64_t ko = row(t, g);
          double dot = 0.0;
          for (int64_t j = 0; j < s; ++j) dot += double(load(qb, q.dtype, qo + j)) * double(load(kb, kc.dtype, ko + j));
          score[size_t(t)] = dot * double(scale);
          mx = std::max(mx, score[size_t(t)]);
        }
        double sum = 0.0;
        for (double& x : score) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j < s; ++j) {
          double acc = 0.0;
          for (int64_t t = 0; t < len[r]; ++t) acc += score[size_t(t)] * double(load(vb, vc.dtype, row(t, g) + j));
          store(ob, out.dtype, qo + j, len[r] > 0 ? float(acc / sum) : 0.0f);
        }
      }
    }
  });
}

namespace {

// RoPE, HF's rotate_half layout: dims j and j + S/2 of each head form a pair. As the host model
// in dtype T: angle = float(position) * inv_freq[j] (fp32), cos/sin of that fp32 angle rounded to
// T (computed in fp64, so correctly rounded), then every product and the sum rounded to T:
// x_j' = T(T(x_j c) - T(x_{j+S/2} s)), x_{j+S/2}' = T(T(x_{j+S/2} c) + T(x_j s)).
// rotary_embedding and rotary_kv_store both rotate through these two functions.
void rope_cos_sin(DLDataType dtype, int64_t position, float inv_freq, float& c, float& s) {
  const float angle = float(position) * inv_freq;
  c = round_to(dtype, float(std::cos(double(angle))));
  s = round_to(dtype, float(std::sin(double(angle))));
}

// Rotates the pair at element offsets lo and lo + half of `in` into the same offsets of `out`
// (which may be `in`: both values are read before either is written).
void rotate_pair(const void* in, int64_t in_lo, void* out, int64_t out_lo, int64_t half, DLDataType dtype, float c,
                 float s) {
  const float a = load(in, dtype, in_lo), b = load(in, dtype, in_lo + half);
  const float ac = round_to(dtype, a * c), bs = round_to(dtype, b * s);
  const float bc = round_to(dtype, b * c), as = round_to(dtype, a * s);
  store(out, dtype, out_lo, ac - bs);
  store(out, dtype, out_lo + half, bc + as);
}

// In place over a contiguous [n, heads, 2 half] tensor.
void rotate_rows(DLTensor& x, const int64_t* pos, const float* inv_freq, int64_t half) {
  const int64_t n = x.shape[0], heads = x.shape[1];
  void* base = sdk::data_ptr(x);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < half; ++j) {
      float c, s;
      rope_cos_sin(x.dtype, pos[t], inv_freq[j], c, s);
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t lo = (t * heads + h) * 2 * half + j;
        rotate_pair(base, lo, base, lo, half, x.dtype, c, s);
      }
    }
}

}  // namespace

verlpp_error* ReferenceKernels::rotary_embedding(DLTensor* q_p, DLTensor* k_p, const DLTensor* pos_p,
                                                 const DLTensor* inv_freq_p, verlpp_stream) {
  return sdk::guard("cpu_ref rotary_embedding", [&] {
    const sdk::RotaryArgs args = sdk::check_rotary_args(q_p, k_p, pos_p, inv_freq_p);
    require_host(*args.positions, "positions");
    require_host(*args.inv_freq, "inv_freq");
    for (DLTensor* x : args.targets) require_host(*x, x == q_p ? "q" : "k");
    const auto* p = static_cast<const int64_t*>(sdk::data_ptr(*args.positions));
    const auto* f = static_cast<const float*>(sdk::data_ptr(*args.inv_freq));
    for (DLTensor* x : args.targets) rotate_rows(*x, p, f, args.half);
  });
}

// ABI 1.3: rotary_embedding's rotation of q (into q_out) and k (into its cache row), and v
// copied to its cache row, for token t at row slot_mapping[t] = block * block_size + offset of
// the [num_blocks, block_size, K, S] caches. q, k, v are read at their row strides (views of
// one fused projection). Every slot is checked before anything is written, so a refused call
// leaves the outputs as they were.
verlpp_error* ReferenceKernels::rotary_kv_store(const DLTensor* q_p, const DLTensor* k_p, const DLTensor* v_p,
                                                const DLTensor* pos_p, const DLTensor* inv_freq_p,
                                                const DLTensor* slots_p, DLTensor* q_out_p, DLTensor* k_cache_p,
                                                DLTensor* v_cache_p, verlpp_stream) {
  return sdk::guard("cpu_ref rotary_kv_store", [&] {
    const sdk::RotaryKvStoreArgs a =
        sdk::check_rotary_kv_store_args(q_p, k_p, v_p, pos_p, inv_freq_p, slots_p, q_out_p, k_cache_p, v_cache_p);
    for (const DLTensor* t : {q_p, k_p, v_p, pos_p, inv_freq_p, slots_p, static_cast<const DLTensor*>(q_out_p),
                              static_cast<const DLTensor*>(k_cache_p), static_cast<const DLTensor*>(v_cache_p)})
      require_host(*t, "every rotary_kv_store tensor");
    const int64_t n = a.rope.tokens, half = a.rope.half, s = a.head_size, kv = a.kv_heads;
    const auto* pos = static_cast<const int64_t*>(sdk::data_ptr(*pos_p));
    const auto* inv_freq = static_cast<const float*>(sdk::data_ptr(*inv_freq_p));
    const auto* slot = static_cast<const int64_t*>(sdk::data_ptr(*slots_p));
    sdk::check_slot_values(slot, n, a.slots());
    const DLDataType dtype = q_p->dtype;
    const size_t elem = sdk::dtype_size(dtype);
    const void *q = sdk::data_ptr(*q_p), *k = sdk::data_ptr(*k_p);
    const auto* v = static_cast<const char*>(sdk::data_ptr(*v_p));
    void *q_out = sdk::data_ptr(*q_out_p), *k_cache = sdk::data_ptr(*k_cache_p);
    auto* v_cache = static_cast<char*>(sdk::data_ptr(*v_cache_p));
    for (int64_t t = 0; t < n; ++t) {
      const int64_t cache_row = slot[t] * kv * s;  // slot = block * block_size + offset: the row's index
      for (int64_t j = 0; j < half; ++j) {
        float c, sn;
        rope_cos_sin(dtype, pos[t], inv_freq[j], c, sn);
        for (int64_t h = 0; h < a.q_heads; ++h)
          rotate_pair(q, t * a.q_row_stride + h * s + j, q_out, (t * a.q_heads + h) * s + j, half, dtype, c, sn);
        for (int64_t g = 0; g < kv; ++g)
          rotate_pair(k, t * a.k_row_stride + g * s + j, k_cache, cache_row + g * s + j, half, dtype, c, sn);
      }
      // v moves unchanged: its K * S values are dense within the row.
      std::memcpy(v_cache + size_t(cache_row) * elem, v + size_t(t * a.v_row_stride) * elem, size_t(kv * s) * elem);
    }
  });
}

namespace {

// One row: greedy (t == 0) takes the first argmax; otherwise the k most likely tokens, then the
// shortest prefix of them (most likely first) whose mass reaches top_p of theirs, and a draw
// from those by inverse CDF in that order. Log-prob from log_softmax(x / t) (t = 1 if greedy).
void sample_row(const float* x, int64_t v, float t, int32_t k, float p, uint64_t seed, uint64_t step, int64_t& token,
                float& logprob) {
  const double temp = t == 0.0f ? 1.0 : double(t);
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < v; ++j) mx = std::max(mx, double(x[j]) / temp);
  std::vector<double> q(static_cast<size_t>(v));
  double total = 0.0;
  for (int64_t j = 0; j < v; ++j) total += q[size_t(j)] = std::exp(double(x[j]) / temp - mx);
  if (t == 0.0f) {
    token = int64_t(std::max_element(x, x + v) - x);
  } else {
    std::vector<int64_t> order(static_cast<size_t>(v));
    for (int64_t j = 0; j < v; ++j) order[size_t(j)] = j;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return q[size_t(a)] > q[size_t(b)]; });
    int64_t kk = k > 0 && k < v ? k : v;
    double mass_k = 0.0;
    for (int64_t i = 0; i < kk; ++i) mass_k += q[size_t(order[size_t(i)])];
    int64_t kept = 0;
    double kept_mass = 0.0;
    while (kept < kk && kept_mass < double(p) * mass_k) kept_mass += q[size_t(order[size_t(kept++)])];
    double target = sdk::uniform_draw(seed, step) * kept_mass, cum = 0.0;
    token = order[size_t(kept - 1)];  // rounding can leave the target past the last kept token
    for (int64_t i = 0; i < kept; ++i) {
      cum += q[size_t(order[size_t(i)])];
      if (cum > target) {
        token = order[size_t(i)];
        break;
      }
    }
  }
  logprob = float(double(x[token]) / temp - mx - std::log(total));
}

}  // namespace

verlpp_error* ReferenceKernels::sample(const DLTensor* logits_p, const DLTensor* temperature_p, const DLTensor* top_k_p,
                                       const DLTensor* top_p_p, const DLTensor* seeds_p, uint64_t step,
                                       DLTensor* out_tokens_p, DLTensor* out_logprobs_p, verlpp_stream) {
  return sdk::guard("cpu_ref sample", [&] {
    const sdk::SampleArgs a =
        sdk::check_sample_args(logits_p, temperature_p, top_k_p, top_p_p, seeds_p, out_tokens_p, out_logprobs_p);
    for (const DLTensor* t : {logits_p, temperature_p, top_k_p, top_p_p, seeds_p,
                              static_cast<const DLTensor*>(out_tokens_p), static_cast<const DLTensor*>(out_logprobs_p)})
      require_host(*t, "every sample tensor");
    // f32, or from ABI 1.3 bf16 / f16: each row is widened to fp32 (exact) and sampled as such.
    const DLTensor &logits = *logits_p, &temperature = *temperature_p, &top_k = *top_k_p, &top_p = *top_p_p,
                   &seeds = *seeds_p;
    const int64_t b = a.batch, v = a.vocab;
    const void* x = sdk::data_ptr(logits);
    const auto* temps = static_cast<const float*>(sdk::data_ptr(temperature));
    const auto* ks = static_cast<const int32_t*>(sdk::data_ptr(top_k));
    const auto* ps = static_cast<const float*>(sdk::data_ptr(top_p));
    const auto* seed = static_cast<const uint64_t*>(sdk::data_ptr(seeds));
    auto* tokens = static_cast<int64_t*>(sdk::data_ptr(*out_tokens_p));
    auto* logprobs = static_cast<float*>(sdk::data_ptr(*out_logprobs_p));
    std::vector<float> widened(static_cast<size_t>(v));
    for (int64_t r = 0; r < b; ++r) {
      sdk::check_sample_row_values(r, temps[r], ks[r], ps[r]);
      for (int64_t j = 0; j < v; ++j) widened[size_t(j)] = load(x, logits.dtype, r * v + j);
      sample_row(widened.data(), v, temps[r], ks[r], ps[r], seed[r], step, tokens[r], logprobs[r]);
    }
  });
}

const verlpp_kernel_table* reference_kernels() { return sdk::kernel_table<ReferenceKernels>(); }

}  // namespace verlpp::cpu_ref
