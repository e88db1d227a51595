// cpu_ref: plain-loop reference kernels. Inputs may be f32, bf16 or f16; math is in fp32/fp64
// (log-sum-exp with the row max subtracted), results are written as f32 (logprob_entropy) or in
// the input dtype (logprob_backward, rms_norm, rotary_embedding and 1.3's fusions add_rms_norm and
// rotary_kv_store, rounded where HF rounds), as plugin_abi.h defines them; sample sorts each row
// (top-k, top-p) and draws with the host's counter-based splitmix64 recipe; paged_attention_decode
// walks the block tables in fp64. A fusion calls the very row functions of the kernels it fuses.
#include "reference_kernels.hpp"
#include "half_float.hpp"

#include <verlpp/sdk/dlpack_util.hpp>
#include <verlpp/sdk/kernel_args.hpp>

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
float round_to(DLDataType d, float v) {
  uint16_t h = 0;
  if (d.code == kDLFloat && d.bits == 32) return v;
  store(&h, d, 0, v);
  return load(&h, d, 0);
}


verlpp_error* logprob_entropy(const DLTensor* logits_p, const DLTensor* labels_p, float temperature,
                              DLTensor* out_logprob_p, DLTensor* out_entropy_p, verlpp_stream) {
  return sdk::guard("cpu_ref logprob_entropy", [&] {
    const DLTensor& logits = checked(logits_p, "logits");
    const DLTensor& labels = checked(labels_p, "labels");
    DLTensor& out_lp = const_cast<DLTensor&>(checked(out_logprob_p, "out_logprob"));
    require(logits.ndim == 2, "logits must be [N, V], got ndim " + std::to_string(logits.ndim));
    require(is_float_dtype(logits.dtype), "logits dtype " + sdk::dtype_name(logits.dtype) + " is not f32/bf16/f16");
    int64_t n = logits.shape[0], v = logits.shape[1];
    require(labels.ndim == 1 && labels.shape[0] == n, "labels must be [N] with N = " + std::to_string(n));
    require(labels.dtype.code == kDLInt && labels.dtype.bits == 64, "labels must be int64");
    require(out_lp.ndim == 1 && out_lp.shape[0] == n && is_f32(out_lp.dtype), "out_logprob must be [N] float32");
    require(temperature > 0.0f && std::isfinite(temperature), "temperature must be > 0, got " + std::to_string(temperature));
    DLTensor* out_ent = out_entropy_p;
    if (out_ent != nullptr) {
      checked(out_ent, "out_entropy");
      require(out_ent->ndim == 1 && out_ent->shape[0] == n && is_f32(out_ent->dtype), "out_entropy must be [N] float32");
      require(sdk::is_contiguous(*out_ent), "out_entropy must be contiguous");
    }
    require(sdk::is_contiguous(labels) && sdk::is_contiguous(out_lp), "labels and out_logprob must be contiguous");
    require_host(logits, "logits");
    require(v > 0 || n == 0, "vocabulary size is 0");
    // Rows may be strided; columns must be dense.
    int64_t row_stride = logits.strides ? logits.strides[0] : v;
    require(logits.strides == nullptr || logits.strides[1] == 1 || v == 1, "logits columns must be dense (stride 1)");
    const void* base = sdk::data_ptr(logits);
    const auto* label = static_cast<const int64_t*>(sdk::data_ptr(labels));
    auto* lp = static_cast<float*>(sdk::data_ptr(out_lp));
    float* ent = out_ent ? static_cast<float*>(sdk::data_ptr(*out_ent)) : nullptr;
    for (int64_t r = 0; r < n; ++r) {
      require(label[r] >= 0 && label[r] < v, "label " + std::to_string(label[r]) + " at row " + std::to_string(r) + " is outside [0, " + std::to_string(v) + ")");
      int64_t off = r * row_stride;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < v; ++j) mx = std::max(mx, load(base, logits.dtype, off + j) / temperature);
      double sum = 0.0, weighted = 0.0;
      for (int64_t j = 0; j < v; ++j) {
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
verlpp_error* logprob_backward(const DLTensor* logits_p, const DLTensor* labels_p, const DLTensor* lse_p,
                               const DLTensor* grad_logprob_p, const DLTensor* mean_z_p, const DLTensor* grad_entropy_p,
                               float temperature, DLTensor* out_p, verlpp_stream) {
  return sdk::guard("cpu_ref logprob_backward", [&] {
    const sdk::LogprobBackwardArgs a = sdk::check_logprob_backward_args(logits_p, labels_p, lse_p, grad_logprob_p, mean_z_p,
                                                                        grad_entropy_p, temperature, out_p);
    for (const DLTensor* t : {logits_p, labels_p, lse_p, static_cast<const DLTensor*>(out_p), grad_logprob_p, mean_z_p, grad_entropy_p})
      if (t != nullptr) require_host(*t, "every logprob_backward tensor");
    const void* in = sdk::data_ptr(*logits_p);
    void* out = sdk::data_ptr(*out_p);
    const auto* label = static_cast<const int64_t*>(sdk::data_ptr(*labels_p));
    const auto* lse = static_cast<const float*>(sdk::data_ptr(*lse_p));
    const auto* g_lp = a.grad_logprob ? static_cast<const float*>(sdk::data_ptr(*a.grad_logprob)) : nullptr;
    const auto* mean_z = a.mean_z ? static_cast<const float*>(sdk::data_ptr(*a.mean_z)) : nullptr;
    const auto* g_ent = a.grad_entropy ? static_cast<const float*>(sdk::data_ptr(*a.grad_entropy)) : nullptr;
    const double t = temperature;
    for (int64_t r = 0; r < a.n; ++r) {
      require(label[r] >= 0 && label[r] < a.v, "label " + std::to_string(label[r]) + " at row " + std::to_string(r) +
                                                   " is outside [0, " + std::to_string(a.v) + ")");
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

// SwiGLU's product and its backward, element by element in fp32 with the dtype's rounding
// where HF's forward and autograd's backward round (plugin_abi.h).
float silu_of(float x) { return x / (1.0f + std::exp(-x)); }

verlpp_error* silu_mul(const DLTensor* gate_p, const DLTensor* up_p, DLTensor* out_p, verlpp_stream) {
  return sdk::guard("cpu_ref silu_mul", [&] {
    const sdk::SiluMulArgs a = sdk::check_silu_mul_args({{gate_p, "gate"}, {up_p, "up"}, {out_p, "out"}});
    for (const DLTensor* t : {gate_p, up_p, static_cast<const DLTensor*>(out_p)}) require_host(*t, "every silu_mul tensor");
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

verlpp_error* silu_mul_backward(const DLTensor* gate_p, const DLTensor* up_p, const DLTensor* grad_p, DLTensor* grad_gate_p,
                                DLTensor* grad_up_p, verlpp_stream) {
  return sdk::guard("cpu_ref silu_mul_backward", [&] {
    const sdk::SiluMulArgs a = sdk::check_silu_mul_args(
        {{gate_p, "gate"}, {up_p, "up"}, {grad_p, "grad_out"}, {grad_gate_p, "grad_gate"}, {grad_up_p, "grad_up"}});
    for (const DLTensor* t : {gate_p, up_p, grad_p, static_cast<const DLTensor*>(grad_gate_p), static_cast<const DLTensor*>(grad_up_p)})
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

verlpp_error* rms_norm(const DLTensor* x_p, const DLTensor* w_p, float eps, DLTensor* out_p, verlpp_stream) {
  return sdk::guard("cpu_ref rms_norm", [&] {
    const DLTensor& x = checked(x_p, "x");
    const DLTensor& w = checked(w_p, "weight");
    DLTensor& out = const_cast<DLTensor&>(checked(out_p, "out"));
    require(x.ndim == 2, "x must be [N, D], got ndim " + std::to_string(x.ndim));
    int64_t n = x.shape[0], d = x.shape[1];
    require(w.ndim == 1 && w.shape[0] == d, "weight must be [D] with D = " + std::to_string(d));
    require(out.ndim == 2 && out.shape[0] == n && out.shape[1] == d, "out must have x's shape");
    require(is_float_dtype(x.dtype) && sdk::same_dtype(x.dtype, w.dtype) && sdk::same_dtype(x.dtype, out.dtype),
            "x, weight and out must share one float dtype");
    require(sdk::is_contiguous(x) && sdk::is_contiguous(w) && sdk::is_contiguous(out), "rms_norm needs contiguous tensors");
    require(eps >= 0.0f, "eps must be >= 0");
    require_host(x, "x");
    for (int64_t r = 0; r < n; ++r) rms_norm_row(sdk::data_ptr(x), sdk::data_ptr(w), sdk::data_ptr(out), x.dtype, r, d, eps);
  });
}

// ABI 1.3: residual = T(residual + x) (one fp32 add, one rounding), then out = rms_norm of the
// rounded residual through the very function rms_norm uses. Row by row, so x may be residual.
verlpp_error* add_rms_norm(const DLTensor* x_p, DLTensor* residual_p, const DLTensor* w_p, float eps, DLTensor* out_p,
                           verlpp_stream) {
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
verlpp_error* paged_attention_decode(const DLTensor* q_p, const DLTensor* k_p, const DLTensor* v_p, const DLTensor* bt_p,
                                     const DLTensor* lens_p, float scale, DLTensor* out_p, verlpp_stream) {
  return sdk::guard("cpu_ref paged_attention_decode", [&] {
    const DLTensor& q = checked(q_p, "q");
    const DLTensor& kc = checked(k_p, "k_cache");
    const DLTensor& vc = checked(v_p, "v_cache");
    const DLTensor& bt = checked(bt_p, "block_tables");
    const DLTensor& lens = checked(lens_p, "context_lens");
    DLTensor& out = const_cast<DLTensor&>(checked(out_p, "out"));
    require(q.ndim == 3, "q must be [B, H, S], got ndim " + std::to_string(q.ndim));
    require(kc.ndim == 4, "k_cache must be [num_blocks, block_size, K, S], got ndim " + std::to_string(kc.ndim));
    const int64_t b = q.shape[0], h = q.shape[1], s = q.shape[2];
    const int64_t num_blocks = kc.shape[0], block_size = kc.shape[1], kv = kc.shape[2];
    require(vc.ndim == 4 && std::equal(kc.shape, kc.shape + 4, vc.shape), "v_cache must have k_cache's shape");
    require(kc.shape[3] == s, "k_cache head size " + std::to_string(kc.shape[3]) + " != q's " + std::to_string(s));
    require(kv > 0 && h % kv == 0, "query heads H = " + std::to_string(h) + " must be a multiple of KV heads K = " + std::to_string(kv));
    require(is_float_dtype(q.dtype) && sdk::same_dtype(q.dtype, kc.dtype) && sdk::same_dtype(q.dtype, vc.dtype) &&
                sdk::same_dtype(q.dtype, out.dtype),
            "q, k_cache, v_cache and out must share one float dtype");
    require(out.ndim == 3 && std::equal(q.shape, q.shape + 3, out.shape), "out must have q's shape");
    require(bt.ndim == 2 && bt.shape[0] == b && bt.dtype.code == kDLInt && bt.dtype.bits == 32, "block_tables must be [B, max_blocks] int32");
    require(lens.ndim == 1 && lens.shape[0] == b && lens.dtype.code == kDLInt && lens.dtype.bits == 32, "context_lens must be [B] int32");
    for (const DLTensor* t : {&q, &kc, &vc, &bt, &lens, static_cast<const DLTensor*>(&out)}) {
      require(sdk::is_contiguous(*t), "paged_attention_decode needs contiguous tensors");
      require_host(*t, "paged_attention_decode tensor");
    }
    const int64_t max_blocks = bt.shape[1];
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
                                                       std::to_string(r) + " is outside [0, " + std::to_string(num_blocks) + ")");
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
void rotate_pair(const void* in, int64_t in_lo, void* out, int64_t out_lo, int64_t half, DLDataType dtype, float c, float s) {
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

verlpp_error* rotary_embedding(DLTensor* q_p, DLTensor* k_p, const DLTensor* pos_p, const DLTensor* inv_freq_p,
                               verlpp_stream) {
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
verlpp_error* rotary_kv_store(const DLTensor* q_p, const DLTensor* k_p, const DLTensor* v_p, const DLTensor* pos_p,
                              const DLTensor* inv_freq_p, const DLTensor* slots_p, DLTensor* q_out_p, DLTensor* k_cache_p,
                              DLTensor* v_cache_p, verlpp_stream) {
  return sdk::guard("cpu_ref rotary_kv_store", [&] {
    const sdk::RotaryKvStoreArgs a = sdk::check_rotary_kv_store_args(q_p, k_p, v_p, pos_p, inv_freq_p, slots_p, q_out_p,
                                                                     k_cache_p, v_cache_p);
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

// The sampler's uniform draw in [0, 1): 53 bits of splitmix64, counter-based (a row's draw
// depends only on its seed and the step), the same recipe as the host's reference sampler.
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
double uniform_draw(uint64_t seed, uint64_t step) {
  uint64_t bits = splitmix64(splitmix64(seed) + step * 0x9E3779B97F4A7C15ull);
  return double(bits >> 11) * (1.0 / 9007199254740992.0);
}

// [n] tensor of the given dtype on the host, contiguous.
void require_vector(const DLTensor& t, int64_t n, DLDataType dtype, const char* what) {
  require(t.ndim == 1 && t.shape[0] == n && sdk::same_dtype(t.dtype, dtype) && sdk::is_contiguous(t),
          std::string(what) + " must be [B] " + sdk::dtype_name(dtype) + " with B = " + std::to_string(n));
  require_host(t, what);
}

// One row: greedy (t == 0) takes the first argmax; otherwise the k most likely tokens, then the
// shortest prefix of them (most likely first) whose mass reaches top_p of theirs, and a draw
// from those by inverse CDF in that order. Log-prob from log_softmax(x / t) (t = 1 if greedy).
void sample_row(const float* x, int64_t v, float t, int32_t k, float p, uint64_t seed, uint64_t step,
                int64_t& token, float& logprob) {
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
    double target = uniform_draw(seed, step) * kept_mass, cum = 0.0;
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

verlpp_error* sample(const DLTensor* logits_p, const DLTensor* temperature_p, const DLTensor* top_k_p,
                     const DLTensor* top_p_p, const DLTensor* seeds_p, uint64_t step, DLTensor* out_tokens_p,
                     DLTensor* out_logprobs_p, verlpp_stream) {
  return sdk::guard("cpu_ref sample", [&] {
    const DLTensor& logits = checked(logits_p, "logits");
    require(logits.ndim == 2, "logits must be [B, V], got ndim " + std::to_string(logits.ndim));
    // f32, or from ABI 1.3 bf16 / f16: each row is widened to fp32 (exact) and sampled as such.
    require(is_float_dtype(logits.dtype), "logits dtype " + sdk::dtype_name(logits.dtype) + " is not f32/bf16/f16");
    require(sdk::is_contiguous(logits), "logits must be contiguous");
    require_host(logits, "logits");
    const int64_t b = logits.shape[0], v = logits.shape[1];
    require(v > 0 || b == 0, "vocabulary size is 0");
    const DLTensor& temperature = checked(temperature_p, "temperature");
    const DLTensor& top_k = checked(top_k_p, "top_k");
    const DLTensor& top_p = checked(top_p_p, "top_p");
    const DLTensor& seeds = checked(seeds_p, "seeds");
    DLTensor& out_tokens = const_cast<DLTensor&>(checked(out_tokens_p, "out_tokens"));
    DLTensor& out_logprobs = const_cast<DLTensor&>(checked(out_logprobs_p, "out_logprobs"));
    require_vector(temperature, b, {kDLFloat, 32, 1}, "temperature");
    require_vector(top_k, b, {kDLInt, 32, 1}, "top_k");
    require_vector(top_p, b, {kDLFloat, 32, 1}, "top_p");
    // Seeds are uint64 by the ABI; int64 carries the same bits and is accepted too.
    DLDataType seed_type = seeds.dtype.code == kDLInt ? DLDataType{kDLInt, 64, 1} : DLDataType{kDLUInt, 64, 1};
    require_vector(seeds, b, seed_type, "seeds");
    require_vector(out_tokens, b, {kDLInt, 64, 1}, "out_tokens");
    require_vector(out_logprobs, b, {kDLFloat, 32, 1}, "out_logprobs");
    const void* x = sdk::data_ptr(logits);
    const auto* temps = static_cast<const float*>(sdk::data_ptr(temperature));
    const auto* ks = static_cast<const int32_t*>(sdk::data_ptr(top_k));
    const auto* ps = static_cast<const float*>(sdk::data_ptr(top_p));
    const auto* seed = static_cast<const uint64_t*>(sdk::data_ptr(seeds));
    auto* tokens = static_cast<int64_t*>(sdk::data_ptr(out_tokens));
    auto* logprobs = static_cast<float*>(sdk::data_ptr(out_logprobs));
    std::vector<float> widened(static_cast<size_t>(v));
    for (int64_t r = 0; r < b; ++r) {
      const std::string row = " at row " + std::to_string(r);
      require(temps[r] >= 0.0f && std::isfinite(temps[r]), "temperature " + std::to_string(temps[r]) + row + " must be finite and >= 0");
      require(ks[r] >= 0, "top_k " + std::to_string(ks[r]) + row + " must be >= 0 (0 = all)");
      require(ps[r] > 0.0f && ps[r] <= 1.0f, "top_p " + std::to_string(ps[r]) + row + " must be in (0, 1]");
      for (int64_t j = 0; j < v; ++j) widened[size_t(j)] = load(x, logits.dtype, r * v + j);
      sample_row(widened.data(), v, temps[r], ks[r], ps[r], seed[r], step, tokens[r], logprobs[r]);
    }
  });
}

}  // namespace

const verlpp_kernel_table* reference_kernels() {
  static const verlpp_kernel_table table = [] {
    verlpp_kernel_table t{};
    t.struct_size = sizeof(t);
    t.logprob_entropy = &logprob_entropy;
    t.rms_norm = &rms_norm;
    t.rotary_embedding = &rotary_embedding;
    t.paged_attention_decode = &paged_attention_decode;
    t.sample = &sample;
    t.logprob_backward = &logprob_backward;
    t.silu_mul = &silu_mul;
    t.silu_mul_backward = &silu_mul_backward;
    t.add_rms_norm = &add_rms_norm;
    t.rotary_kv_store = &rotary_kv_store;
    t.adamw_update = &reference_adamw_update;
    t.rotary_paged_attention_decode = &reference_rotary_paged_attention_decode;
    return t;
  }();
  return &table;
}

}  // namespace verlpp::cpu_ref
