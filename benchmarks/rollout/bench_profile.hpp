// Kineto traces for the bench binaries: LibTorch's profiler (host ops and device kernels; CUPTI
// sees every launch in the process, a plugin's kernels and CUDA graph replays included), saved
// as a chrome://tracing file. Built with the profiler only where LibTorch has its 2.1+ API
// (VERLPP_BENCH_KINETO, set by benchmarks/CMakeLists.txt); Debian's 1.13 differs.
#pragma once

#include <functional>
#include <string>

namespace verlpp::bench {

// "" when this build can write traces, otherwise why not.
std::string profiler_unavailable_reason();

// Runs `work` under the profiler and writes the trace to `path`. Throws Error (naming
// `option`, the command-line option that asked for it) when the build has no profiler.
void profile_to(const std::string& path, const std::function<void()>& work, const std::string& option = "--profile");

}  // namespace verlpp::bench
