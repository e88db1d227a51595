// SerialWorker: one thread that runs the functions it is given one at a time, in the order they
// were submitted. A process group's collectives go through one once any of them runs in the
// background (ProcessGroup::start_all_gather_into), so every rank issues them in its program's
// order from a single thread, as NCCL and Gloo require of a communicator. Internal to hw.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace verlpp::hw::detail {

class SerialWorker {
 public:
  SerialWorker();
  // Runs what was submitted before, then stops the thread.
  ~SerialWorker();
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  // Queues `job`; the future becomes ready when it has run (holding its exception, if any).
  std::future<void> submit(std::function<void()> job);

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the queue exists
};

}  // namespace verlpp::hw::detail
