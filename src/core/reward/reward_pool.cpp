// The reward managers' thread pool: item-by-item scoring on a few threads with a per-item
// timeout. The calling thread only watches the clock; results go to their item's slot, so the
// outcome does not depend on which thread ran what. A call that runs past the timeout is given
// up on, not stopped: its thread keeps the pool's shared state alive until the call returns.
#include <verlpp/reward/reward_manager.hpp>
#include <verlpp/core/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

namespace verlpp::reward {
namespace {

using Clock = std::chrono::steady_clock;

// Everything the workers touch, shared with them so a given-up worker outlives the call.
struct PoolState {
  std::mutex mutex;
  std::condition_variable changed;
  std::function<RewardResult(int64_t)> fn;
  int64_t next = 0;                   // the next item to hand out
  std::vector<PoolOutcome> outcomes;  // by item
  std::vector<char> settled;          // finished, or given up on
  std::vector<Clock::time_point> started;
  std::vector<int64_t> worker_of;     // which worker runs the item (-1: not started)
  std::vector<char> worker_given_up;  // by worker: its item timed out; it exits after the call
  int64_t settled_count = 0;
};

void work(const std::shared_ptr<PoolState>& st, int64_t worker) {
  while (true) {
    int64_t item = 0;
    {
      std::lock_guard<std::mutex> lock(st->mutex);
      if (st->worker_given_up[size_t(worker)] || st->next >= int64_t(st->outcomes.size())) return;
      item = st->next++;
      st->started[size_t(item)] = Clock::now();
      st->worker_of[size_t(item)] = worker;
      st->changed.notify_all();  // the watcher now has a deadline to keep
    }
    PoolOutcome out;
    try {
      out.result = st->fn(item);
    } catch (...) {
      out.error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(st->mutex);
    if (st->settled[size_t(item)]) return;  // timed out meanwhile: a replacement took over
    st->outcomes[size_t(item)] = std::move(out);
    st->settled[size_t(item)] = 1;
    ++st->settled_count;
    st->changed.notify_all();
  }
}

}  // namespace

std::vector<PoolOutcome> run_reward_pool(int64_t n, std::function<RewardResult(int64_t)> fn, int64_t workers,
                                         std::optional<double> timeout_s) {
  if (n < 0) throw Error("run_reward_pool", fmt::format("{} items", n));
  if (workers < 1) throw Error("run_reward_pool", fmt::format("{} workers (at least 1)", workers));
  if (timeout_s && !(*timeout_s > 0)) throw Error("run_reward_pool", fmt::format("timeout {} s", *timeout_s));
  std::vector<PoolOutcome> serial(static_cast<size_t>(n));
  if (n == 0) return serial;
  if (workers == 1 && !timeout_s) {
    for (int64_t i = 0; i < n; ++i) {
      try {
        serial[size_t(i)].result = fn(i);
      } catch (...) {
        serial[size_t(i)].error = std::current_exception();
      }
    }
    return serial;
  }

  auto st = std::make_shared<PoolState>();
  st->fn = std::move(fn);
  st->outcomes.resize(size_t(n));
  st->settled.assign(size_t(n), 0);
  st->started.resize(size_t(n));
  st->worker_of.assign(size_t(n), -1);
  std::vector<std::thread> threads;
  // Threads are joined, or detached when given up on, whatever happens here.
  auto release = [&](bool join) {
    std::vector<char> given_up;
    {
      std::lock_guard<std::mutex> lock(st->mutex);
      given_up = st->worker_given_up;
    }
    for (size_t w = 0; w < threads.size(); ++w) {
      if (!threads[w].joinable()) continue;
      if (join && !given_up[w])
        threads[w].join();
      else
        threads[w].detach();
    }
  };
  auto start_worker = [&] {
    {
      std::lock_guard<std::mutex> lock(st->mutex);
      st->worker_given_up.push_back(0);
    }
    threads.emplace_back(work, st, int64_t(threads.size()));
  };
  try {
    for (int64_t w = 0; w < std::min(workers, n); ++w) start_worker();
    const auto limit =
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s.value_or(0)));
    std::unique_lock<std::mutex> lock(st->mutex);
    while (st->settled_count < n) {
      if (!timeout_s) {
        st->changed.wait(lock);
        continue;
      }
      // Give up on every running call past its limit, then sleep until the next one's.
      const Clock::time_point now = Clock::now();
      std::optional<Clock::time_point> next_deadline;
      int64_t replacements = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (st->settled[size_t(i)] || st->worker_of[size_t(i)] < 0) continue;
        const Clock::time_point deadline = st->started[size_t(i)] + limit;
        if (deadline <= now) {
          st->outcomes[size_t(i)].timed_out = true;
          st->settled[size_t(i)] = 1;
          ++st->settled_count;
          st->worker_given_up[size_t(st->worker_of[size_t(i)])] = 1;
          ++replacements;
        } else if (!next_deadline || deadline < *next_deadline) {
          next_deadline = deadline;
        }
      }
      if (replacements > 0) {
        const int64_t waiting = n - st->next;
        lock.unlock();
        for (int64_t r = 0; r < std::min(replacements, waiting); ++r) start_worker();
        lock.lock();
        continue;
      }
      if (st->settled_count >= n) break;
      if (next_deadline)
        st->changed.wait_until(lock, *next_deadline);
      else
        st->changed.wait(lock);  // no call has recorded its start yet
    }
    lock.unlock();
  } catch (...) {
    release(/*join=*/false);
    throw;
  }
  release(/*join=*/true);
  std::lock_guard<std::mutex> lock(st->mutex);
  return st->outcomes;
}

}  // namespace verlpp::reward
