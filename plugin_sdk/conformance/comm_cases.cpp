// verlpp-plugin-check, group "communicator": every collective run for real in N worker
// processes (this executable re-run with --comm-worker), rendezvousing through a c10d TCPStore
// the parent serves. Inputs are small integers, exact in every dtype, so each rank can compute
// the exact expected result of every op from all ranks' inputs. Workers print one JSON line per
// case; the parent merges them (a case passes only if it passes on every rank).
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
    if (dtype.code == kDLFloat && dtype.bits == 32) { float f = float(v[i]); std::memcpy(p, &f, 4); }
    else if (dtype.code == kDLFloat && dtype.bits == 64) std::memcpy(p, &v[i], 8);
    else if (dtype.code == kDLFloat && dtype.bits == 16) { uint16_t h = to_f16(float(v[i])); std::memcpy(p, &h, 2); }
    else if (dtype.code == kDLBfloat) { uint16_t h = to_bf16(float(v[i])); std::memcpy(p, &h, 2); }
    else if (dtype.code == kDLInt && dtype.bits == 32) { int32_t x = int32_t(v[i]); std::memcpy(p, &x, 4); }
    else if (dtype.code == kDLInt && dtype.bits == 64) { int64_t x = int64_t(v[i]); std::memcpy(p, &x, 8); }
    else { uint8_t x = uint8_t(v[i]); *p = x; }
  }
  return out;
}

std::vector<double> decode(const std::vector<uint8_t>& raw, DLDataType dtype) {
  size_t es = dtype.bits / 8, n = raw.size() / es;
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = raw.data() + i * es;
    if (dtype.code == kDLFloat && dtype.bits == 32) { float f; std::memcpy(&f, p, 4); out[i] = f; }
    else if (dtype.code == kDLFloat && dtype.bits == 64) std::memcpy(&out[i], p, 8);
    else if (dtype.code == kDLFloat && dtype.bits == 16) { uint16_t h; std::memcpy(&h, p, 2); out[i] = from_f16(h); }
    else if (dtype.code == kDLBfloat) { uint16_t h; std::memcpy(&h, p, 2); out[i] = from_bf16(h); }
    else if (dtype.code == kDLInt && dtype.bits == 32) { int32_t x; std::memcpy(&x, p, 4); out[i] = x; }
    else if (dtype.code == kDLInt && dtype.bits == 64) { int64_t x; std::memcpy(&x, p, 8); out[i] = double(x); }
    else out[i] = *p;
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

const char* op_name(hw::ReduceOp op) { return op == hw::ReduceOp::sum ? "sum" : op == hw::ReduceOp::max ? "max" : "min"; }

// Runs every case on this rank; `emit` records each outcome.
void worker_cases(CheckContext& ctx, const hw::Communicator& comm) {
  const int rank = comm.rank(), world = comm.world_size();
  hw::Device d = ctx.device();
  const std::pair<DLDataType, const char*> dtypes[] = {{dl_f32(), "f32"}, {dl_f64(), "f64"}, {dl_f16(), "f16"},
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
    for (auto [dtype, op, chunk] : {std::tuple{dl_f32(), hw::ReduceOp::sum, int64_t(13)}, {dl_i32(), hw::ReduceOp::max, int64_t(5)}}) {
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
      if (rank % 2 == 0) { comm.send(out.dl(), next); comm.recv(in.dl(), prev); }
      else { comm.recv(in.dl(), prev); comm.send(out.dl(), next); }
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
    ctx.expect_error(ctx.api().comm_all_gather(nullptr, &send.dl(), &wrong.dl(), nullptr), VERLPP_STATUS_INVALID_ARGUMENT, "all_gather(NULL comm)");
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
      comm = std::make_unique<hw::Communicator>(hw::Communicator::create(ctx.device(rank % ctx.device_count()), store, co));
    });
    if (comm) worker_cases(ctx, *comm);
  } catch (const std::exception& e) {
    ctx.record({"communicator", "worker start", Outcome::fail, e.what()});
  }
  for (const auto& r : ctx.results())
    std::cout << nlohmann::json{{"case", r.name}, {"outcome", outcome_name(r.outcome)}, {"detail", r.detail}}.dump() << "\n";
  std::cout.flush();
  return 0;
}

void run_comm_cases(CheckContext& ctx, const std::string& self, const std::string& plugin_arg,
                    const std::vector<int>& world_sizes, int64_t timeout_ms) {
  if (ctx.api().comm_create == nullptr) {
    ctx.record({"communicator", "all collectives", Outcome::not_offered, "communicator not offered"});
    return;
  }
  for (int world : world_sizes) {
    hw::TcpStoreOptions so;
    so.is_server = true;
    so.world_size = world + 1;
    so.timeout = std::chrono::milliseconds(timeout_ms);
    auto store = hw::make_tcp_store(so);
    int port = hw::tcp_store_port(*store);
    struct Child { pid_t pid; int fd; std::string output; std::thread reader; };
    std::vector<Child> children(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) {
      int fds[2];
      if (pipe(fds) != 0) throw std::runtime_error("pipe() failed");
      pid_t pid = fork();
      if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        std::string rs = std::to_string(r), ws = std::to_string(world), ps = std::to_string(port), ts = std::to_string(timeout_ms);
        execl(self.c_str(), self.c_str(), "--comm-worker", "--rank", rs.c_str(), "--world", ws.c_str(), "--store-port",
              ps.c_str(), "--timeout-ms", ts.c_str(), plugin_arg.c_str(), static_cast<char*>(nullptr));
        _exit(127);
      }
      close(fds[1]);
      children[size_t(r)].pid = pid;
      children[size_t(r)].fd = fds[0];
    }
    for (auto& c : children)
      c.reader = std::thread([&c] {
        char buf[4096];
        ssize_t k;
        while ((k = read(c.fd, buf, sizeof(buf))) > 0) c.output.append(buf, size_t(k));
        close(c.fd);
      });
    // Wait for every worker, killing any that outlive the timeout (a hang is a failure).
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms + 60000);
    std::vector<std::string> lost;
    for (int r = 0; r < world; ++r) {
      auto& c = children[size_t(r)];
      int status = 0;
      while (waitpid(c.pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          kill(c.pid, SIGKILL);
          waitpid(c.pid, &status, 0);
          lost.push_back(fmt::format("rank {} was killed after the deadline", r));
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (WIFSIGNALED(status) && lost.size() < size_t(r + 1))
        lost.push_back(fmt::format("rank {} died with signal {}", r, WTERMSIG(status)));
    }
    for (auto& c : children) c.reader.join();
    // Merge: case -> per-rank outcomes, in first-seen order.
    std::vector<std::string> order;
    std::map<std::string, std::vector<std::pair<std::string, std::string>>> by_case;
    for (int r = 0; r < world; ++r) {
      std::istringstream lines(children[size_t(r)].output);
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
      CaseResult res{"communicator", fmt::format("[{} ranks] {}", world, name), Outcome::pass, ""};
      if (outs.size() != size_t(world)) {
        res.outcome = Outcome::fail;
        res.detail = fmt::format("only {} of {} ranks reported", outs.size(), world);
      }
      for (const auto& [outcome, detail] : outs) {
        if (outcome == "fail") { res.outcome = Outcome::fail; res.detail += (res.detail.empty() ? "" : "; ") + detail; }
        else if (outcome == "n/a" && res.outcome == Outcome::pass) { res.outcome = Outcome::not_offered; res.detail = detail; }
      }
      ctx.record(res);
    }
    if (!lost.empty() || order.empty())
      ctx.record({"communicator", fmt::format("[{} ranks] workers", world), Outcome::fail,
                  lost.empty() ? "no worker reported any result" : join(lost, "; ")});
  }
}

}  // namespace verlpp::conformance
