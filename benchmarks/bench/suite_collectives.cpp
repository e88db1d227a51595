// Suite "collectives": all_reduce (sum) and all_gather of fp32 buffers through the plugin's
// communicator, --ranks N ranks. Decision: the ranks are threads of this process sharing an
// in-process rendezvous store (no launcher, no ports: fast enough for CI), each on device
// rank % device_count; one repetition's time is the slowest rank's, after a barrier.
#include "bench.hpp"
#include "hw/dlpack_view.hpp"  // src/core: borrowed DLPack views of at::Tensors

#include <verlpp/hw/communicator.hpp>
#include <verlpp/hw/device.hpp>
#include <verlpp/hw/kv_store.hpp>

#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace verlpp::bench {
namespace {

struct CollectiveWorkload {
  std::string op;  // all_reduce | all_gather
  int64_t bytes;   // all_reduce: the buffer; all_gather: the gathered result
};

std::string size_name(int64_t bytes) {
  return bytes >= (1 << 20) ? fmt::format("{}MiB", bytes >> 20) : fmt::format("{}KiB", bytes >> 10);
}

}  // namespace

std::vector<Measurement> run_collectives(const Options& o, const Target& t) {
  const int32_t N = o.ranks;
  std::vector<CollectiveWorkload> workloads;
  for (int64_t bytes : o.quick ? std::vector<int64_t>{64 << 10, 1 << 20} : std::vector<int64_t>{1 << 20, 32 << 20})
    for (const char* op : {"all_reduce", "all_gather"}) workloads.push_back({op, bytes});
  auto shape_of = [&](const CollectiveWorkload& w) {
    return fmt::format("{} ranks (threads), f32, {} {}", N, size_name(w.bytes),
                       w.op == "all_reduce" ? "buffer, sum" : "gathered (" + size_name(w.bytes / N) + " per rank)");
  };
  std::vector<Measurement> out;
  if (t.plugin->api().comm_create == nullptr) {
    for (const auto& w : workloads)
      out.push_back(
          skipped("collectives", w.op + "_" + size_name(w.bytes), shape_of(w), t, "the plugin has no communicator"));
    return out;
  }
  const int32_t num_devices = std::max<int32_t>(1, hw::device_count(*t.plugin));
  if (!t.device.is_cpu() && num_devices < N) {
    // One rank per device: NCCL-style communicators refuse two ranks on one GPU (they would wait
    // for each other until the timeout).
    for (const auto& w : workloads)
      out.push_back(skipped("collectives", w.op + "_" + size_name(w.bytes), shape_of(w), t,
                            fmt::format("{} ranks need {} devices, the plugin has {}", N, N, num_devices)));
    return out;
  }
  auto store = hw::make_memory_store();
  // times[w][rank]: that rank's seconds per timed repetition of workload w.
  std::vector<std::vector<std::vector<double>>> times(workloads.size(), std::vector<std::vector<double>>(size_t(N)));
  std::vector<std::string> errors(static_cast<size_t>(N));
  auto rank_main = [&](int32_t rank) {
    try {
      const int32_t index = t.device.is_cpu() ? 0 : rank % num_devices;
      const hw::Device device(*t.plugin, index);
      const c10::Device torch_device =
          t.device.is_cpu() ? t.device : c10::Device(t.device.type(), c10::DeviceIndex(index));
      hw::CommunicatorOptions co;
      co.rank = rank;
      co.world_size = N;
      co.key_prefix = "verlpp-bench/";
      co.timeout = std::chrono::milliseconds(60000);
      const hw::Communicator comm = hw::Communicator::create(device, store, co);
      const auto f32 = at::TensorOptions().dtype(at::kFloat).device(torch_device);
      for (size_t w = 0; w < workloads.size(); ++w) {
        const int64_t elems = workloads[w].bytes / 4;
        at::Tensor buf = at::ones({elems}, f32), part = at::ones({elems / N}, f32),
                   gathered = at::empty({elems / N * N}, f32);
        DLTensor d_buf = hw::detail::dl_view(buf), d_part = hw::detail::dl_view(part),
                 d_all = hw::detail::dl_view(gathered);
        for (int i = 0; i < o.warmup + o.reps; ++i) {
          comm.barrier();
          const auto t0 = std::chrono::steady_clock::now();
          if (workloads[w].op == "all_reduce")
            comm.all_reduce(d_buf, hw::ReduceOp::sum);
          else
            comm.all_gather(d_part, d_all);
          device.synchronize();
          const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (i >= o.warmup) times[w][size_t(rank)].push_back(s);
        }
        if (workloads[w].op == "all_gather" && gathered.sum().item<double>() != double(elems / N * N))
          throw Error("all_gather", "the gathered buffer does not hold every rank's ones");
      }
      comm.barrier();
    } catch (const std::exception& e) {
      errors[size_t(rank)] = fmt::format("rank {}: {}", rank, e.what());
    }
  };
  std::vector<std::thread> threads;
  for (int32_t r = 1; r < N; ++r) threads.emplace_back(rank_main, r);
  rank_main(0);
  for (auto& th : threads) th.join();
  std::string error;
  for (const auto& e : errors)
    if (!e.empty()) error += (error.empty() ? "" : "; ") + e;

  for (size_t w = 0; w < workloads.size(); ++w) {
    Measurement m = make_measurement("collectives", workloads[w].op + "_" + size_name(workloads[w].bytes),
                                     shape_of(workloads[w]), t);
    if (!error.empty()) {
      // A communicator that the plugin refuses to create here is a skip; anything else failed.
      const bool unsupported = error.find("UNSUPPORTED") != std::string::npos;
      m.status = unsupported ? Status::skipped : Status::error;
      m.reason = error;
    } else {
      for (int i = 0; i < o.reps; ++i) {
        double slowest = 0;
        for (int32_t r = 0; r < N; ++r) slowest = std::max(slowest, times[w][size_t(r)][size_t(i)]);
        m.seconds.push_back(slowest);
      }
      m.work = double(workloads[w].bytes);
      m.work_unit = "bytes";
    }
    out.push_back(m);
  }
  return out;
}

}  // namespace verlpp::bench
