// The Kineto profiler calls of bench_profile.hpp (LibTorch 2.1+ API).
#include "bench_profile.hpp"

#include <verlpp/core/error.hpp>

#ifdef VERLPP_BENCH_KINETO
#include <torch/csrc/autograd/profiler_kineto.h>

#include <set>
#endif

namespace verlpp::bench {

std::string profiler_unavailable_reason() {
#ifdef VERLPP_BENCH_KINETO
  return "";
#else
  return "this build's LibTorch has no Kineto profiler API (LibTorch 2.1+)";
#endif
}

void profile_to(const std::string& path, const std::function<void()>& work, const std::string& option) {
#ifdef VERLPP_BENCH_KINETO
  (void)option;
  namespace impl = torch::profiler::impl;
  const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
  const std::set<impl::ActivityType> activities{impl::ActivityType::CPU, impl::ActivityType::CUDA};
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  work();
  torch::autograd::profiler::disableProfiler()->save(path);
#else
  (void)work;
  VERLPP_FAIL_AT(option, "{}; cannot write '{}'", profiler_unavailable_reason(), path);
#endif
}

}  // namespace verlpp::bench
