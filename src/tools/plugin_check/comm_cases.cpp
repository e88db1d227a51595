// verlpp-plugin-check, group "communicator": every collective run for real in N worker
// processes (this executable re-run with --comm-worker), rendezvousing through a c10d TCPStore
// the parent serves. Inputs are small integers, exact in every dtype, so each rank can compute
// the exact expected result of every op from all ranks' inputs. Workers print one JSON line per
// case; the parent merges them (a case passes only if it passes on every rank). Two cases prove
// the timeout promise with a short timeout: a collective that only rank 0 enters, and a
// communicator whose rank 1 never starts (one worker alone, so it runs on one GPU too).
#include "check_context.hpp"

#include <verlpp/hw/communicator.hpp>
#include <verlpp/hw/kv_store.hpp>

#include <verlpp/core/strings.hpp>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <sstream>
#include <tuple>
#include <cstdio>
#include <iostream>
#include <map>
#include <thread>

namespace verlpp::conformance {
namespace {

// The input of `rank` at element i: a small integer (non-negative for unsigned dtypes).
double input_value(int rank, int64_t i, bool is_unsigned) {
  int64_t v = (rank * 7 + i * 3) % 11;
  return double(is_unsigned ? v : v - 5);
}

// Encodes doubles (exact small integers) as host bytes of `dtype`.
std::vector<uint8_t> encode(const std::vector<double>& v, DLDataType dtype) {
  size_t es = dtype.bits / 8;
  std::vector<uint8_t> out(v.size() * es);
  for (size_t i = 0; i < v.size(); ++i) {
    uint8_t* p = out.data() + i * es;
    if (dtype.code == kDLFloat && dtype.bits == 32) {
      float f = float(v[i]);
      std::memcpy(p, &f, 4);
    } else if (dtype.code == kDLFloat && dtype.bits == 64)
      std::memcpy(p, &v[i], 8);
    else if (dtype.code == kDLFloat && dtype.bits == 16) {
      uint16_t h = to_f16(float(v[i]));
      std::memcpy(p, &h, 2);
    } else if (dtype.code == kDLBfloat) {
      uint16_t h = to_bf16(float(v[i]));
      std::memcpy(p, &h, 2);
    } else if (dtype.code == kDLInt && dtype.bits == 32) {
      int32_t x = int32_t(v[i]);
      std::memcpy(p, &x, 4);
    } else if (dtype.code == kDLInt && dtype.bits == 64) {
      int64_t x = int64_t(v[i]);
      std::memcpy(p, &x, 8);
    } else {
      uint8_t x = uint8_t(v[i]);
      *p = x;
    }
  }
  return out;
}

std::vector<double> decode(const std::vector<uint8_t>& raw, DLDataType dtype) {
  size_t es = dtype.bits / 8, n = raw.size() / es;
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = raw.data() + i * es;
    if (dtype.code == kDLFloat && dtype.bits == 32) {
      float f;
      std::memcpy(&f, p, 4);
      out[i] = f;
    } else if (dtype.code == kDLFloat && dtype.bits == 64)
      std::memcpy(&out[i], p, 8);
    else if (dtype.code == kDLFloat && dtype.bits == 16) {
      uint16_t h;
      std::memcpy(&h, p, 2);
      out[i] = from_f16(h);
    } else if (dtype.code == kDLBfloat) {
      uint16_t h;
      std::memcpy(&h, p, 2);
      out[i] = from_bf16(h);
    } else if (dtype.code == kDLInt && dtype.bits == 32) {
      int32_t x;
      std::memcpy(&x, p, 4);
      out[i] = x;
    } else if (dtype.code == kDLInt && dtype.bits == 64) {
      int64_t x;
      std::memcpy(&x, p, 8);
      out[i] = double(x);
    } else
      out[i] = *p;
  }
  return out;
}

std::vector<double> inputs(int rank, int64_t n, DLDataType dtype, int64_t offset = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = input_value(rank, i + offset, dtype.code == kDLUInt);
  return v;
}

DeviceTensor device_tensor(const hw::Device& d, const std::vector<double>& values, DLDataType dtype) {
  DeviceTensor t(d, {int64_t(values.size())}, dtype);
  t.upload(encode(values, dtype).data());
  return t;
}

std::vector<double> fetch(const DeviceTensor& t) {
  std::vector<uint8_t> raw(t.bytes());
  t.download(raw.data());
  return decode(raw, t.dl().dtype);
}

void expect_equal(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  CHECK_THAT(got.size() == want.size(), "{}: {} elements, want {}", what, got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    CHECK_THAT(got[i] == want[i], "{}: element {} is {}, want {}", what, i, got[i], want[i]);
}

double reduce(const std::vector<double>& xs, hw::ReduceOp op) {
  double acc = xs[0];
  for (size_t i = 1; i < xs.size(); ++i)
    acc = op == hw::ReduceOp::sum ? acc + xs[i] : op == hw::ReduceOp::max ? std::max(acc, xs[i]) : std::min(acc, xs[i]);
  return acc;
}

const char* op_name(hw::ReduceOp op) {
  return op == hw::ReduceOp::sum ? "sum" : op == hw::ReduceOp::max ? "max" : "min";
}

// How long the timeout cases wait: short, so that they cost seconds, not the suite's timeout.
constexpr std::chrono::milliseconds kShortTimeout{1000};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Runs every case on this rank; `emit` records each outcome.
void worker_cases(CheckContext& ctx, const hw::Communicator& comm, const std::shared_ptr<hw::KvStore>& store) {
  const int rank = comm.rank(), world = comm.world_size();
  hw::Device d = ctx.device();
  const std::pair<DLDataType, const char*> dtypes[] = {{dl_f32(), "f32"},   {dl_f64(), "f64"}, {dl_f16(), "f16"},
                                                       {dl_bf16(), "bf16"}, {dl_i32(), "i32"}, {dl_i64(), "i64"}};
  for (auto op : {hw::ReduceOp::sum, hw::ReduceOp::max, hw::ReduceOp::min}) {
    for (const auto& [dtype, dname] : dtypes) {
      ctx.run("communicator", fmt::format("all_reduce {} {}", op_name(op), dname), [&, dtype = dtype] {
        for (int64_t n : {int64_t(1), int64_t(1003)}) {
          DeviceTensor send = device_tensor(d, inputs(rank, n, dtype), dtype);
          DeviceTensor recv(d, {n}, dtype);
          comm.all_reduce(send.dl(), recv.dl(), op);
          std::vector<double> want(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) {
            std::vector<double> xs;
            for (int r = 0; r < world; ++r) xs.push_back(input_value(r, i, false));
            want[size_t(i)] = reduce(xs, op);
          }
          expect_equal(fetch(recv), want, fmt::format("n={}", n));
        }
      });
    }
  }
  ctx.run("communicator", "all_reduce in place and empty", [&] {
    DeviceTensor buf = device_tensor(d, inputs(rank, 257, dl_f32()), dl_f32());
    comm.all_reduce(buf.dl(), hw::ReduceOp::sum);
    std::vector<double> want(257);
    for (int64_t i = 0; i < 257; ++i)
      for (int r = 0; r < world; ++r) want[size_t(i)] += input_value(r, i, false);
    expect_equal(fetch(buf), want, "in place");
    DeviceTensor empty(d, {0}, dl_f32());
    comm.all_reduce(empty.dl(), hw::ReduceOp::sum);
  });
  ctx.run("communicator", "all_gather f32, i64, u8", [&] {
    for (auto [dtype, n] : {std::pair{dl_f32(), int64_t(37)}, {dl_i64(), int64_t(1)}, {dl_u8(), int64_t(4099)}}) {
      DeviceTensor send = device_tensor(d, inputs(rank, n, dtype), dtype);
      DeviceTensor recv(d, {n * world}, dtype);
      comm.all_gather(send.dl(), recv.dl());
      std::vector<double> want;
      for (int r = 0; r < world; ++r) {
        auto part = inputs(r, n, dtype);
        want.insert(want.end(), part.begin(), part.end());
      }
      expect_equal(fetch(recv), want, sdk::dtype_name(dtype));
    }
  });
  ctx.run("communicator", "reduce_scatter sum f32, max i32", [&] {
    for (auto [dtype, op, chunk] :
         {std::tuple{dl_f32(), hw::ReduceOp::sum, int64_t(13)}, {dl_i32(), hw::ReduceOp::max, int64_t(5)}}) {
      DeviceTensor send = device_tensor(d, inputs(rank, chunk * world, dtype), dtype);
      DeviceTensor recv(d, {chunk}, dtype);
      comm.reduce_scatter(send.dl(), recv.dl(), op);
      std::vector<double> want(static_cast<size_t>(chunk));
      for (int64_t i = 0; i < chunk; ++i) {
        std::vector<double> xs;
        for (int r = 0; r < world; ++r) xs.push_back(input_value(r, rank * chunk + i, false));
        want[size_t(i)] = reduce(xs, op);
      }
      expect_equal(fetch(recv), want, fmt::format("{} {}", sdk::dtype_name(dtype), op_name(op)));
    }
  });
  ctx.run("communicator", "broadcast from every root", [&] {
    for (int root = 0; root < world; ++root) {
      DeviceTensor buf = device_tensor(d, inputs(rank, 101, dl_f32()), dl_f32());
      comm.broadcast(buf.dl(), root);
      expect_equal(fetch(buf), inputs(root, 101, dl_f32()), fmt::format("root {}", root));
    }
  });
  ctx.run("communicator", "send/recv around a ring", [&] {
    int next = (rank + 1) % world, prev = (rank + world - 1) % world;
    for (auto [dtype, n] : {std::pair{dl_f32(), int64_t(1000)}, {dl_i64(), int64_t(3)}}) {
      DeviceTensor out = device_tensor(d, inputs(rank, n, dtype, 17), dtype);
      DeviceTensor in(d, {n}, dtype);
      // Even ranks send first, odd ranks receive first: no cycle of blocked sends.
      if (rank % 2 == 0) {
        comm.send(out.dl(), next);
        comm.recv(in.dl(), prev);
      } else {
        comm.recv(in.dl(), prev);
        comm.send(out.dl(), next);
      }
      expect_equal(fetch(in), inputs(prev, n, dtype, 17), fmt::format("{} from rank {}", sdk::dtype_name(dtype), prev));
    }
  });
  ctx.run("communicator", "barrier waits for the slowest rank", [&] {
    comm.barrier();
    auto start = std::chrono::steady_clock::now();
    if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    comm.barrier();
    double waited = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    CHECK_THAT(waited >= 200.0, "left the barrier after {:.0f} ms while rank 0 slept 300 ms", waited);
  });
  ctx.run("communicator", "local misuse is an error, not a hang", [&] {
    DeviceTensor send(d, {8}, dl_f32()), wrong(d, {8 * world + 1}, dl_f32()), other(d, {8}, dl_i32());
    ctx.expect_error(ctx.api().comm_all_gather(nullptr, &send.dl(), &wrong.dl(), nullptr),
                     VERLPP_STATUS_INVALID_ARGUMENT, "all_gather(NULL comm)");
    try {
      comm.all_gather(send.dl(), wrong.dl());
      throw CaseFailure("all_gather with a recv of the wrong size succeeded");
    } catch (const hw::PluginCallError& e) {
      CHECK_THAT(e.code() == VERLPP_STATUS_INVALID_ARGUMENT, "all_gather wrong size: {}", e.what());
    }
    try {
      comm.all_reduce(send.dl(), other.dl(), hw::ReduceOp::sum);
      throw CaseFailure("all_reduce f32 -> i32 succeeded");
    } catch (const hw::PluginCallError& e) {
      CHECK_THAT(e.code() == VERLPP_STATUS_INVALID_ARGUMENT, "all_reduce dtype mismatch: {}", e.what());
    }
    comm.barrier();  // everyone is still in step afterwards
  });
  // Last, because it leaves a communicator broken: rank 0 all-reduces alone on a communicator
  // with a short timeout while the others stay alive but never join. Rank 0 must get an error
  // naming itself and the op (TIMEOUT, or COMM_ERROR where the library notices first) within
  // the timeout plus a margin, instead of hanging.
  if (world >= 2)
    ctx.run("communicator", "a collective a rank skips is a TIMEOUT naming the rank and op", [&] {
      hw::CommunicatorOptions co;
      co.rank = rank;
      co.world_size = world;
      co.timeout = kShortTimeout;
      co.key_prefix = fmt::format("check/{}/skipped/", world);
      hw::Communicator lonely = hw::Communicator::create(d, store, co);
      if (rank != 0) {
        std::this_thread::sleep_for(2 * kShortTimeout);  // alive, silent, past rank 0's deadline
        return;
      }
      DeviceTensor buf = device_tensor(d, inputs(rank, 16, dl_f32()), dl_f32());
      auto start = std::chrono::steady_clock::now();
      try {
        lonely.all_reduce(buf.dl(), hw::ReduceOp::sum);
        throw CaseFailure("all_reduce returned although no other rank joined it");
      } catch (const hw::PluginCallError& e) {
        double waited = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        std::string m = e.what();
        CHECK_THAT(e.code() == VERLPP_STATUS_TIMEOUT || e.code() == VERLPP_STATUS_COMM_ERROR,
                   "expected TIMEOUT, got {}: {}", hw::status_name(e.code()), m);
        CHECK_THAT(contains(m, "rank 0") && contains(m, "all_reduce"),
                   "the error does not name rank 0 and all_reduce: {}", m);
        CHECK_THAT(waited < double(kShortTimeout.count()) + 30000.0, "the error came after {:.0f} ms (timeout {} ms)",
                   waited, kShortTimeout.count());
      }
    });
}

const char* outcome_name(Outcome o) { return o == Outcome::pass ? "pass" : o == Outcome::fail ? "fail" : "n/a"; }

}  // namespace

int comm_worker_main(const hw::Plugin& plugin, int rank, int world_size, const std::string& host, int port,
                     int64_t timeout_ms) {
  CheckContext ctx(plugin);
  try {
    hw::TcpStoreOptions so;
    so.host = host;
    so.port = uint16_t(port);
    so.world_size = world_size + 1;
    so.timeout = std::chrono::milliseconds(timeout_ms);
    auto store = hw::make_tcp_store(so);
    hw::CommunicatorOptions co;
    co.rank = rank;
    co.world_size = world_size;
    co.timeout = std::chrono::milliseconds(timeout_ms);
    co.key_prefix = fmt::format("check/{}/", world_size);
    std::unique_ptr<hw::Communicator> comm;
    ctx.run("communicator", "create (rendezvous through the host store)", [&] {
      comm = std::make_unique<hw::Communicator>(
          hw::Communicator::create(ctx.device(rank % ctx.device_count()), store, co));
    });
    if (comm) worker_cases(ctx, *comm, store);
  } catch (const std::exception& e) {
    ctx.record({"communicator", "worker start", Outcome::fail, e.what()});
  }
  for (const auto& r : ctx.results())
    std::cout << nlohmann::json{{"case", r.name}, {"outcome", outcome_name(r.outcome)}, {"detail", r.detail}}.dump()
              << "\n";
  std::cout.flush();
  return 0;
}

int missing_peer_worker_main(const hw::Plugin& plugin, const std::string& host, int port) {
  CheckContext ctx(plugin);
  ctx.run("communicator", "create with a rank missing is a TIMEOUT naming the rank", [&] {
    hw::TcpStoreOptions so;
    so.host = host;
    so.port = uint16_t(port);
    so.world_size = 2;
    so.timeout = kShortTimeout;
    auto store = hw::make_tcp_store(so);
    hw::CommunicatorOptions co;
    co.rank = 0;
    co.world_size = 2;  // rank 1 is never started
    co.timeout = kShortTimeout;
    co.key_prefix = "check/missing/";
    auto start = std::chrono::steady_clock::now();
    try {
      hw::Communicator::create(ctx.device(0), store, co);
      throw CaseFailure("comm_create returned although rank 1 never started");
    } catch (const hw::PluginCallError& e) {
      double waited = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      std::string m = e.what();
      CHECK_THAT(e.code() == VERLPP_STATUS_TIMEOUT, "expected TIMEOUT, got {}: {}", hw::status_name(e.code()), m);
      CHECK_THAT(contains(m, "rank 0"), "the error does not name rank 0: {}", m);
      CHECK_THAT(waited < double(kShortTimeout.count()) + 30000.0, "the error came after {:.0f} ms (timeout {} ms)",
                 waited, kShortTimeout.count());
    }
  });
  for (const auto& r : ctx.results())
    std::cout << nlohmann::json{{"case", r.name}, {"outcome", outcome_name(r.outcome)}, {"detail", r.detail}}.dump()
              << "\n";
  std::cout.flush();
  return 0;
}

namespace {

// Worker processes of this executable, their stdout collected; each is killed if it outlives
// `deadline` (a hang is a failure, reported with the rank).
struct WorkerOutputs {
  std::vector<std::string> outputs;  // per worker
  std::vector<std::string> lost;     // "rank 1 was killed after the deadline", ...
};

WorkerOutputs run_workers(const std::string& self, const std::vector<std::vector<std::string>>& args,
                          std::chrono::milliseconds deadline_after) {
  struct Child {
    pid_t pid;
    int fd;
    std::string output;
    std::thread reader;
  };
  std::vector<Child> children(args.size());
  for (size_t r = 0; r < args.size(); ++r) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe() failed");
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(self.c_str()));
    for (const std::string& a : args[r]) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      execv(self.c_str(), argv.data());
      _exit(127);
    }
    close(fds[1]);
    children[r].pid = pid;
    children[r].fd = fds[0];
  }
  for (auto& c : children)
    c.reader = std::thread([&c] {
      char buf[4096];
      ssize_t k;
      while ((k = read(c.fd, buf, sizeof(buf))) > 0) c.output.append(buf, size_t(k));
      close(c.fd);
    });
  WorkerOutputs result;
  auto deadline = std::chrono::steady_clock::now() + deadline_after;
  for (size_t r = 0; r < children.size(); ++r) {
    auto& c = children[r];
    int status = 0;
    bool killed = false;
    while (waitpid(c.pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, &status, 0);
        result.lost.push_back(fmt::format("rank {} was killed after the deadline", r));
        killed = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (WIFSIGNALED(status) && !killed)
      result.lost.push_back(fmt::format("rank {} died with signal {}", r, WTERMSIG(status)));
  }
  for (auto& c : children) {
    c.reader.join();
    result.outputs.push_back(std::move(c.output));
  }
  return result;
}

// Merges the workers' JSON lines into one result per case (passed only if every reporting
// worker passed it and all `expected` workers reported), titled "<label> <case>".
void record_merged(CheckContext& ctx, const WorkerOutputs& w, size_t expected, const std::string& label) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> by_case;
  for (size_t r = 0; r < w.outputs.size(); ++r) {
    std::istringstream lines(w.outputs[r]);
    std::string line;
    while (std::getline(lines, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("case")) continue;
      std::string name = j["case"];
      if (!by_case.count(name)) order.push_back(name);
      by_case[name].push_back({j["outcome"], fmt::format("rank {}: {}", r, j["detail"].get<std::string>())});
    }
  }
  for (const auto& name : order) {
    const auto& outs = by_case[name];
    CaseResult res{"communicator", label + " " + name, Outcome::pass, ""};
    if (outs.size() != expected) {
      res.outcome = Outcome::fail;
      res.detail = fmt::format("only {} of {} ranks reported", outs.size(), expected);
    }
    for (const auto& [outcome, detail] : outs) {
      if (outcome == "fail") {
        res.outcome = Outcome::fail;
        res.detail += (res.detail.empty() ? "" : "; ") + detail;
      } else if (outcome == "n/a" && res.outcome == Outcome::pass) {
        res.outcome = Outcome::not_offered;
        res.detail = detail;
      }
    }
    ctx.record(res);
  }
  if (!w.lost.empty() || order.empty())
    ctx.record({"communicator", label + " workers", Outcome::fail,
                w.lost.empty() ? "no worker reported any result" : join(w.lost, "; ")});
}

}  // namespace

void run_comm_cases(CheckContext& ctx, const std::string& self, const std::string& plugin_arg,
                    const std::vector<int>& world_sizes, int64_t timeout_ms) {
  if (ctx.api().comm_create == nullptr) {
    ctx.record({"communicator", "all collectives", Outcome::not_offered, "communicator not offered"});
    return;
  }
  const std::string ts = std::to_string(timeout_ms);
  for (int world : world_sizes) {
    hw::TcpStoreOptions so;
    so.is_server = true;
    so.world_size = world + 1;
    so.timeout = std::chrono::milliseconds(timeout_ms);
    auto store = hw::make_tcp_store(so);
    const std::string port = std::to_string(hw::tcp_store_port(*store));
    std::vector<std::vector<std::string>> args;
    for (int r = 0; r < world; ++r)
      args.push_back({"--comm-worker", "--rank", std::to_string(r), "--world", std::to_string(world), "--store-port",
                      port, "--timeout-ms", ts, plugin_arg});
    WorkerOutputs w = run_workers(self, args, std::chrono::milliseconds(timeout_ms + 60000));
    record_merged(ctx, w, size_t(world), fmt::format("[{} ranks]", world));
  }
  if (world_sizes.empty()) return;
  // One worker of a world of two, its peer never started: creating the communicator must fail
  // with TIMEOUT after the short timeout, not hang.
  hw::TcpStoreOptions so;
  so.is_server = true;
  so.world_size = 2;
  so.timeout = std::chrono::milliseconds(timeout_ms);
  auto store = hw::make_tcp_store(so);
  const std::string port = std::to_string(hw::tcp_store_port(*store));
  WorkerOutputs w = run_workers(self, {{"--comm-worker", "--missing-peer-case", "--store-port", port, plugin_arg}},
                                std::chrono::milliseconds(timeout_ms + 60000));
  record_merged(ctx, w, 1, "[1 of 2 ranks]");
}

}  // namespace verlpp::conformance
