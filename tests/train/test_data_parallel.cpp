// Data parallelism on cpu_ref's Gloo communicator, with ranks as threads of this process (each
// with its own TCPStore connection, communicator and model replica): one actor update (two
// optimizer steps) and one SFT step over 2 and 4 ranks give the parameters of the one-rank
// update on the same global batch, every replica stays identical, and dispatch + gather
// returns rows in the batch's order; a ZeRO-1 state or checkpoint folder saved by 2 ranks
// resumes on 1.
#include <ATen/core/grad_mode.h>
#include <verlpp/controller/launcher.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/hw/process_group.hpp>
#include <verlpp/train/actor.hpp>
#include <verlpp/train/data_parallel.hpp>
#include <verlpp/train/sft.hpp>

#include <ATen/Context.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>

#include "rank_threads.hpp"
#include "tiny_fixture.hpp"
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;
using verlpp::test::cpu_ref;
using verlpp::test::run_ranks;
using verlpp::test::worst_diff;
using verlpp::test::worst_relative;

// Built only where cpu_ref has its Gloo communicator (CMakeLists.txt says why).
#if VERLPP_CPU_REF_HAS_GLOO

namespace {

constexpr int64_t kB = test::kRanksRows, kR = test::kRanksResponse;

data::Batch make_batch(const model::DecoderLM& m) { return test::ranks_batch(m); }
train::ActorConfig actor_config() { return test::ranks_actor_config(); }

// The weights after two updates on `batch` by one rank, uninterrupted: what a resumed run must reach.
std::vector<at::Tensor> two_updates_on_one_rank(const data::Batch& batch, const train::LrScheduleOptions& schedule) {
  model::DecoderLM m = test::tiny_model(9);
  train::Actor actor(m, actor_config(), train::LrSchedule(schedule));
  actor.update_policy(batch);
  actor.update_policy(batch);
  return test::parameter_values(m);
}

}  // namespace

TEST_CASE("data parallel: dispatch and gather keep the batch's row order", "[dp]") {
  for (int32_t world : {2, 4}) {
    std::vector<std::vector<std::vector<int64_t>>> parts(static_cast<size_t>(world));
    std::vector<at::Tensor> gathered(static_cast<size_t>(world));
    run_ranks(world, [&](const train::DataParallel& dp) {
      data::Batch b = make_batch(test::tiny_model(9));
      const auto p = dp.partition(b);
      // Each rank computes "10 x row index" for its rows; the gather must give 0, 10, 20, ...
      const auto& mine = p.at(size_t(dp.rank()));
      at::Tensor local = at::empty({int64_t(mine.size()), 2}, at::TensorOptions().dtype(at::kFloat));
      for (size_t i = 0; i < mine.size(); ++i) local[int64_t(i)].fill_(float(mine[i] * 10));
      gathered[size_t(dp.rank())] = dp.gather(local, p);
      parts[size_t(dp.rank())] = p;
    });
    const at::Tensor want = at::arange(kB, at::TensorOptions().dtype(at::kFloat)).mul(10).unsqueeze(1).expand({kB, 2});
    for (int32_t r = 0; r < world; ++r) {
      REQUIRE(int32_t(parts[size_t(r)].size()) == world);
      CHECK(parts[size_t(r)] == parts[0]);  // every rank computes the same partition
      for (const auto& part : parts[size_t(r)]) CHECK(int64_t(part.size()) == kB / world);  // equal counts
      CHECK(gathered[size_t(r)].equal(want));
    }
  }
}

TEST_CASE("data parallel: an actor update over N ranks equals the one-rank update", "[dp]") {
  const double lr = 1e-3;
  const train::LrScheduleOptions schedule{lr, "constant", 0, 1, 0.0, 0.5};
  model::DecoderLM single = test::tiny_model(9);
  const data::Batch batch = make_batch(single);
  train::Actor reference(single, actor_config(), train::LrSchedule(schedule));
  const nlohmann::json ref_metrics = reference.update_policy(batch);
  const std::vector<at::Tensor> expected = test::parameter_values(single);
  REQUIRE(worst_diff(expected, test::parameter_values(test::tiny_model(9))) >
          lr * 0.5);  // the update moved the weights

  for (int32_t world : {2, 4}) {
    std::vector<std::vector<at::Tensor>> replicas(static_cast<size_t>(world));
    std::vector<nlohmann::json> metrics(static_cast<size_t>(world));
    run_ranks(world, [&](const train::DataParallel& dp) {
      model::DecoderLM m = test::tiny_model(9);
      train::Actor actor(m, actor_config(), train::LrSchedule(schedule));
      actor.set_data_parallel(dp);
      metrics[size_t(dp.rank())] = actor.update_policy(batch);
      replicas[size_t(dp.rank())] = test::parameter_values(m);
    });
    const double worst = worst_diff(replicas[0], expected);
    INFO(world << " ranks: worst |param - one-rank param| " << worst);
    CHECK(worst < lr * 1e-3);
    for (int32_t r = 1; r < world; ++r) CHECK(worst_diff(replicas[size_t(r)], replicas[0]) == 0.0);  // replicas in sync
    for (const char* key : {"actor/pg_loss", "actor/grad_norm", "actor/entropy"})
      CHECK(metrics[0][key].get<double>() == Approx(ref_metrics[key].get<double>()).epsilon(1e-5));
  }
}

TEST_CASE("data parallel: an SFT step over N ranks equals the one-rank step", "[dp]") {
  const double lr = 1e-3;
  const train::LrScheduleOptions schedule{lr, "constant", 0, 1, 0.0, 0.5};
  train::SftConfig cfg;
  cfg.micro_batch_size = 2;
  cfg.optim.eps = 1e-3;
  model::DecoderLM single = test::tiny_model(9);
  const data::Batch batch = make_batch(single);
  train::SftTrainer reference(single, cfg, train::LrSchedule(schedule));
  const double ref_loss = reference.train_step(batch)["sft/loss"].get<double>();
  const std::vector<at::Tensor> expected = test::parameter_values(single);
  for (int32_t world : {2, 4}) {
    std::vector<at::Tensor> rank0;
    double loss = 0;
    run_ranks(world, [&](const train::DataParallel& dp) {
      model::DecoderLM m = test::tiny_model(9);
      train::SftTrainer sft(m, cfg, train::LrSchedule(schedule));
      sft.set_data_parallel(dp);
      const double l = sft.train_step(batch)["sft/loss"].get<double>();
      if (dp.rank() == 0) {
        rank0 = test::parameter_values(m);
        loss = l;
      }
    });
    CHECK(worst_diff(rank0, expected) < lr * 1e-3);
    CHECK(loss == Approx(ref_loss).epsilon(1e-5));
  }
}

TEST_CASE("data parallel: a batch that does not split evenly is refused", "[dp]") {
  std::vector<std::string> errors(2);
  run_ranks(2, [&](const train::DataParallel& dp) {
    data::Batch b = make_batch(test::tiny_model(9)).rows({0, 1, 2});
    try {
      dp.partition(b);
    } catch (const std::exception& e) {
      errors[size_t(dp.rank())] = e.what();
    }
  });
  for (const auto& e : errors) CHECK_THAT(e, Catch::Contains("a batch of 3 rows does not split evenly over 2 ranks"));
}

TEST_CASE("data parallel: ZeRO-1 (sharded optimizer states) steps exactly as replicated AdamW", "[dp][zero]") {
  const double lr = 1e-3;
  const train::LrScheduleOptions schedule{lr, "constant", 0, 1, 0.0, 0.5};
  const data::Batch batch = make_batch(test::tiny_model(9));
  for (int32_t world : {2, 4}) {
    std::vector<std::vector<at::Tensor>> replicated(static_cast<size_t>(world)), sharded(static_cast<size_t>(world));
    std::vector<int64_t> state_elements(static_cast<size_t>(world), 0);
    int64_t total_elements = 0;
    for (const bool zero1 : {false, true}) {
      run_ranks(world, [&](const train::DataParallel& dp) {
        model::DecoderLM m = test::tiny_model(9);
        train::Actor actor(m, actor_config(), train::LrSchedule(schedule));
        actor.set_data_parallel(dp, zero1);
        actor.update_policy(batch);
        actor.update_policy(batch);  // a second update: the moments carry over
        (zero1 ? sharded : replicated)[size_t(dp.rank())] = test::parameter_values(m);
        if (zero1)
          state_elements[size_t(dp.rank())] = actor.optimizer().state_elements();
        else if (dp.rank() == 0)
          total_elements = actor.optimizer().state_elements();
      });
    }
    for (int32_t r = 0; r < world; ++r) {
      INFO(world << " ranks, rank " << r);
      CHECK(worst_diff(sharded[size_t(r)], replicated[0]) == 0.0);  // bit for bit
      // Each rank holds only its share of the moments (whole parameters, so not exactly 1/N).
      CHECK(state_elements[size_t(r)] > 0);
      CHECK(state_elements[size_t(r)] < total_elements);
    }
    int64_t sum = 0;
    for (int64_t e : state_elements) sum += e;
    CHECK(sum == total_elements);  // every parameter's state is somewhere, once
  }
}

TEST_CASE("data parallel: a ZeRO-1 optimizer state saved by 2 ranks resumes on 1 rank", "[dp][zero]") {
  const double lr = 1e-3;
  const train::LrScheduleOptions schedule{lr, "constant", 0, 1, 0.0, 0.5};
  const data::Batch batch = make_batch(test::tiny_model(9));
  const std::vector<at::Tensor> straight = two_updates_on_one_rank(batch, schedule);
  // Two sharded ranks do the first update and save; one rank loads weights + state and goes on.
  const std::string path = "/tmp/verlpp-test-zero1-optimizer.safetensors";
  std::vector<at::Tensor> after_first;
  run_ranks(2, [&](const train::DataParallel& dp) {
    model::DecoderLM m = test::tiny_model(9);
    train::Actor actor(m, actor_config(), train::LrSchedule(schedule));
    actor.set_data_parallel(dp, /*zero_stage=*/1);
    actor.update_policy(batch);
    actor.save_state(path);  // collective; rank 0 writes
    if (dp.rank() == 0) after_first = test::parameter_values(m);
  });
  model::DecoderLM resumed = test::tiny_model(9);
  {
    at::NoGradGuard no_grad;
    size_t i = 0;
    for (const auto& [name, p] : resumed.named_parameters()) p.copy_(after_first[i++]);
  }
  train::Actor actor(resumed, actor_config(), train::LrSchedule(schedule));
  actor.load_state(path);
  actor.set_updates(1);
  actor.update_policy(batch);
  const double worst = worst_diff(test::parameter_values(resumed), straight);
  INFO("worst |resumed - uninterrupted| " << worst);
  CHECK(worst < lr * 1e-3);
}

// TrainedModel::save as a checkpoint does it: every rank calls it, rank 0 writes the HF folder
// and gathers the sharded optimizer state; TrainedModel::load on one rank restores both.
TEST_CASE("data parallel: a checkpoint folder saved by 2 ZeRO-1 ranks resumes on 1 rank", "[dp][zero]") {
  const double lr = 1e-3;
  const train::LrScheduleOptions schedule{lr, "constant", 0, 1, 0.0, 0.5};
  const data::Batch batch = make_batch(test::tiny_model(9));
  const std::vector<at::Tensor> straight = two_updates_on_one_rank(batch, schedule);
  const std::string dir = "/tmp/verlpp-test-zero1-checkpoint-" + std::to_string(getpid());
  REQUIRE(std::system(("rm -rf " + dir).c_str()) == 0);
  run_ranks(2, [&](const train::DataParallel& dp) {
    model::DecoderLM m = test::tiny_model(9);
    train::Actor actor(m, actor_config(), train::LrSchedule(schedule));
    actor.set_data_parallel(dp, /*zero_stage=*/1);
    actor.update_policy(batch);
    actor.trained_model().save(dir);
  });
  model::DecoderLM resumed = test::tiny_model(21);  // other weights: the folder must replace them
  train::Actor actor(resumed, actor_config(), train::LrSchedule(schedule));
  actor.trained_model().load(dir);
  actor.set_updates(1);
  actor.update_policy(batch);
  const double worst = worst_diff(test::parameter_values(resumed), straight);
  INFO("worst |resumed - uninterrupted| " << worst);
  CHECK(worst < lr * 1e-3);
  CHECK(std::system(("rm -rf " + dir).c_str()) == 0);
}

// A client stopped in the middle of a store request wedges c10d's single-threaded store server
// (LibTorch 1.x; 2.x's libuv server does not block). Here a raw connection sends the first byte
// of a request and nothing more; then rank 1 records a stage and leaves (its group destroyed:
// no heartbeat, no collective). Rank 0's collective must end within its timeout plus the
// diagnosis window and name rank 1 with that stage, though the store answers nobody (liveness
// goes over datagrams), and both groups must shut down.
TEST_CASE("process group: a wedged rendezvous store cannot hang a failed collective", "[dp][store]") {
  const uint16_t port = controller::pick_free_port();
  std::atomic<int> ready{0};
  std::atomic<bool> wedged{false}, rank0_done{false};
  std::string error0;
  double seconds0 = -1;
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        hw::ProcessGroupOptions options;
        options.timeout = std::chrono::milliseconds(2000);
        options.heartbeat = std::chrono::milliseconds(200);
        auto group = test::join_local_group(r, 2, port, options);
        group->barrier();
        ++ready;
        while (!wedged) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        if (r == 0) {
          const auto start = std::chrono::steady_clock::now();
          try {
            at::Tensor t = at::ones({4});
            group->all_reduce_sum(t);  // rank 1 never joins
          } catch (const std::exception& e) {
            error0 = e.what();
          }
          seconds0 = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          rank0_done = true;
        } else {
          group->set_stage("step 7 held");
          std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the stage's datagram is read
          group.reset();
          while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      } catch (const std::exception& e) {
        if (r == 0) error0 = std::string("setup: ") + e.what();
        rank0_done = true;
      }
    });
  }
  while (ready < 2 && !rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  const uint8_t first_byte = 0;  // a request's type byte (SET, or the 2.x handshake); the rest never comes
  REQUIRE(::send(fd, &first_byte, 1, 0) == 1);
  wedged = true;
  for (auto& t : threads) t.join();
  ::close(fd);
  INFO("rank 0: " << error0 << " (" << seconds0 << " s)");
  CHECK(error0.find("all_reduce over 2 ranks") != std::string::npos);
  CHECK(error0.find("stopped responding (no heartbeat for 800 ms): rank 1 (last stage: step 7 held)") !=
        std::string::npos);
  CHECK(seconds0 > 0);
  CHECK(seconds0 < 2.0 + 0.8 + 3.0);  // the timeout + the diagnosis window + slack
}

// The other ranks ask rank 0, which keeps the heartbeats: rank 2, waiting for a signal that rank
// 1 would have posted, learns from rank 0 that rank 1 stopped and where; rank 0's collective
// names rank 1 and not rank 2 (alive, though absent from the collective). Once rank 0 is gone
// too, rank 2's question goes unanswered and says so.
TEST_CASE("process group: every rank names the stopped ranks through rank 0", "[dp][store]") {
  const uint16_t port = controller::pick_free_port();
  std::atomic<bool> rank1_left{false}, rank2_asked{false}, rank0_left{false};
  std::vector<std::string> errors(3);
  std::string after_rank0;
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      try {
        hw::ProcessGroupOptions options;
        options.timeout = std::chrono::milliseconds(3000);
        options.heartbeat = std::chrono::milliseconds(200);
        auto group = test::join_local_group(r, 3, port, options);
        group->barrier();
        if (r == 1) {
          group->set_stage("step 2 update_actor");
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          group.reset();
          rank1_left = true;
        } else if (r == 2) {
          while (!rank1_left) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          try {
            group->wait_posted("never posted");
          } catch (const std::exception& e) {
            errors[2] = e.what();
          }
          rank2_asked = true;
          while (!rank0_left) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          after_rank0 = group->diagnose_peers();
        } else {
          while (!rank1_left) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          try {
            at::Tensor t = at::ones({4});
            group->all_reduce_sum(t);  // rank 1 has left, rank 2 waits elsewhere
          } catch (const std::exception& e) {
            errors[0] = e.what();
          }
          while (!rank2_asked) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          group.reset();
          rank0_left = true;
        }
      } catch (const std::exception& e) {
        errors[size_t(r)] = std::string("unexpected: ") + e.what();
        rank1_left = rank2_asked = rank0_left = true;
      }
    });
  }
  for (auto& t : threads) t.join();
  INFO("rank 0: " << errors[0] << "\nrank 1: " << errors[1] << "\nrank 2: " << errors[2]
                  << "\nrank 2 after rank 0 left: " << after_rank0);
  const std::string named = "stopped responding (no heartbeat for 800 ms): rank 1 (last stage: step 2 update_actor)";
  CHECK(errors[1].empty());
  CHECK(errors[0].find("all_reduce over 3 ranks") != std::string::npos);
  CHECK(errors[0].find(named) != std::string::npos);
  CHECK(errors[0].find("rank 2") == std::string::npos);
  CHECK(errors[2].find("waiting for 'never posted'") != std::string::npos);
  CHECK(errors[2].find(named) != std::string::npos);
  CHECK(after_rank0.find("rank 0 did not answer a liveness question at 127.0.0.1:") != std::string::npos);
}

namespace {

// The actor update of `batch` on `world` ranks at `zero_stage`, twice; per rank: the weights,
// the metrics of the second update, and what the optimizer holds.
struct RankResult {
  std::vector<at::Tensor> params;
  nlohmann::json metrics;
  int64_t state_elements = 0, whole_gradients_held = 0;
  train::TrainedModel::MemoryHeld held;
};
std::vector<RankResult> two_updates_on_ranks(int32_t world, int zero_stage, const train::ActorConfig& config,
                                             const data::Batch& batch, const train::LrScheduleOptions& schedule,
                                             bool checkpointing = false) {
  std::vector<RankResult> out(static_cast<size_t>(world));
  run_ranks(world, [&](const train::DataParallel& dp) {
    model::DecoderLM m = test::tiny_model(9);
    m.set_gradient_checkpointing(checkpointing);
    train::Actor actor(m, config, train::LrSchedule(schedule));
    actor.set_data_parallel(dp, zero_stage);
    actor.update_policy(batch);
    RankResult& r = out[size_t(dp.rank())];
    r.metrics = actor.update_policy(batch);  // a second update: the moments carry over
    r.state_elements = actor.optimizer().state_elements();
    r.held = actor.trained_model().memory_held();
    for (const auto& [name, p] : actor.trained_model().compute().named_parameters())
      if (p.grad().defined()) r.whole_gradients_held += p.grad().numel();
    actor.trained_model().materialize_master();  // ZeRO-2's masters live in shards
    r.params = test::parameter_values(m);
  });
  return out;
}

}  // namespace

// Background collectives (ZeRO-3's prefetch, ZeRO-2/3's gradient reduce-scatters) run on the
// group's communication thread, and every collective after the first of them goes through that
// thread in call order: gathers and a reduce-scatter started around a synchronous all-reduce,
// waited for out of order or only by the handle's destructor, land what each rank sent (and its
// sum), and the all-reduce between them sums as it would alone.
TEST_CASE("process group: background collectives keep one collective order with the calls around them", "[dp]") {
  for (int32_t world : {2, 3}) {
    std::vector<std::vector<at::Tensor>> gathered(static_cast<size_t>(world));
    std::vector<at::Tensor> scattered(static_cast<size_t>(world));
    std::vector<double> sums(static_cast<size_t>(world));
    std::vector<std::string> refused(static_cast<size_t>(world)), refused_scatter(static_cast<size_t>(world));
    run_ranks(world, [&](const train::DataParallel& dp) {
      const hw::ProcessGroup& g = *dp.group();
      auto send = [&](int i) { return at::full({4}, double(dp.rank() * 10 + i), at::kFloat); };
      std::vector<at::Tensor> out;
      for (int i = 0; i < 4; ++i) out.push_back(at::empty({4 * world}, at::kFloat));
      const at::Tensor s0 = send(0), s1 = send(1), s2 = send(2), s3 = send(3);
      hw::ProcessGroup::Pending p0 = g.start_all_gather_into(s0, out[0]);
      at::Tensor sum = at::full({1}, double(dp.rank() + 1), at::kFloat);
      g.all_reduce_sum(sum);  // through the communication thread, after p0
      // Rank r sends r * 100 + j at position j: rank k's part sums to sum_r(r) * 100 + j.
      const at::Tensor to_scatter = at::arange(4 * world, at::kFloat).add_(100.0 * dp.rank());
      at::Tensor mine = at::empty({4}, at::kFloat);
      {
        hw::ProcessGroup::Pending p1 = g.start_all_gather_into(s1, out[1]);
        hw::ProcessGroup::Pending rs = g.start_reduce_scatter_sum(to_scatter, mine);
        hw::ProcessGroup::Pending p2 = g.start_all_gather_into(s2, out[2]);
        p2.wait();
        p0.wait();
        rs.wait();
      }  // p1: its destructor waits
      scattered[size_t(dp.rank())] = mine;
      g.all_gather_into(s3, out[3]);
      try {
        (void)g.start_all_gather_into(s0, at::empty({4 * world + 1}, at::kFloat));
      } catch (const std::exception& e) {
        refused[size_t(dp.rank())] = e.what();
      }
      try {
        (void)g.start_reduce_scatter_sum(to_scatter, at::empty({5}, at::kFloat));
      } catch (const std::exception& e) {
        refused_scatter[size_t(dp.rank())] = e.what();
      }
      sums[size_t(dp.rank())] = sum.item<double>();
      gathered[size_t(dp.rank())] = out;
    });
    for (int32_t r = 0; r < world; ++r) {
      INFO(world << " ranks, rank " << r);
      CHECK(sums[size_t(r)] == double(world * (world + 1) / 2));
      for (int i = 0; i < 4; ++i) {
        std::vector<at::Tensor> expected;
        for (int32_t from = 0; from < world; ++from)
          expected.push_back(at::full({4}, double(from * 10 + i), at::kFloat));
        CHECK(gathered[size_t(r)][size_t(i)].equal(at::cat(expected)));
      }
      CHECK(refused[size_t(r)].find("recv must be world_size") != std::string::npos);
      CHECK(refused_scatter[size_t(r)].find("send must be world_size") != std::string::npos);
      const double rank_sum = 100.0 * world * (world - 1) / 2;
      CHECK(scattered[size_t(r)].equal(at::arange(4 * r, 4 * r + 4, at::kFloat).mul_(world).add_(rank_sum)));
    }
  }
}

// Subgroups (tensor-parallel groups): 4 ranks as two groups of 2, each with its own
// communicator; a sum inside each group covers its members only, and the whole group still sums
// over all four afterwards. A subgroup this rank is not in, or unordered ranks, is refused.
TEST_CASE("process group: subgroups sum over their members only", "[dp]") {
  std::vector<double> in_group(4), whole(4);
  std::vector<int32_t> sub_rank(4), sub_size(4);
  std::vector<std::string> refused(4);
  run_ranks(4, [&](const train::DataParallel& dp) {
    const hw::ProcessGroup& g = *dp.group();
    const int32_t r = dp.rank(), first = r / 2 * 2;
    auto sub = g.subgroup({first, first + 1}, "pair" + std::to_string(r / 2));
    at::Tensor t = at::full({1}, double(1 << r), at::kFloat);
    sub->all_reduce_sum(t);
    in_group[size_t(r)] = t.item<double>();
    sub_rank[size_t(r)] = sub->rank();
    sub_size[size_t(r)] = sub->world_size();
    at::Tensor all = at::full({1}, double(1 << r), at::kFloat);
    g.all_reduce_sum(all);
    whole[size_t(r)] = all.item<double>();
    try {
      (void)g.subgroup({(r + 1) % 4 == 0 ? 1 : (r + 1) % 4}, "other");
    } catch (const std::exception& e) {
      refused[size_t(r)] = e.what();
    }
  });
  for (int32_t r = 0; r < 4; ++r) {
    INFO("rank " << r);
    const int32_t first = r / 2 * 2;
    CHECK(in_group[size_t(r)] == double((1 << first) + (1 << (first + 1))));
    CHECK(whole[size_t(r)] == 15.0);
    CHECK(sub_rank[size_t(r)] == r - first);
    CHECK(sub_size[size_t(r)] == 2);
    CHECK(refused[size_t(r)].find("this one among them") != std::string::npos);
  }
}

// ZeRO-2 against the replicated optimizer on the same ranks (the gradient sums in one case are
// reduce-scatters per layer and micro-batch, in the other all-reduces per step: Gloo may add in another order, and the
// norm is taken in fp64 from shard sums, so the two agree to rounding, not bit for bit).
TEST_CASE("data parallel: ZeRO-2 (sharded gradients and optimizer states) steps as replicated AdamW", "[dp][zero]") {
  const double lr = 1e-3;
  const train::LrScheduleOptions schedule{lr, "constant", 0, 1, 0.0, 0.5};
  const data::Batch batch = make_batch(test::tiny_model(9));
  const model::DecoderLM initial = test::tiny_model(9);
  int64_t total = 0;
  for (const auto& [name, p] : initial.named_parameters()) total += p.numel();
  const int64_t units = initial.config().num_hidden_layers + 1;
  struct Variant {
    const char* name;
    train::ActorConfig config;
    bool checkpointing;
  };
  std::vector<Variant> variants = {{"plain", actor_config(), false}};
  variants.push_back({"clipping active (grad_clip 1e-3)", actor_config(), false});
  variants.back().config.optim.grad_clip = 1e-3;
  variants.push_back({"packed rows, dynamic batch size, checkpointing", actor_config(), true});
  variants.back().config.remove_padding = true;
  variants.back().config.use_dynamic_bsz = true;
  variants.back().config.ppo_max_token_len = 20;  // ranks make different numbers of micro-batches
  for (const auto& v : variants) {
    for (int32_t world : {2, 4}) {
      INFO(v.name << ", " << world << " ranks");
      const auto replicated = two_updates_on_ranks(world, 0, v.config, batch, schedule, v.checkpointing);
      const auto zero2 = two_updates_on_ranks(world, 2, v.config, batch, schedule, v.checkpointing);
      const double worst = worst_relative(zero2[0].params, replicated[0].params);
      INFO("worst |ZeRO-2 - replicated| / max |param| = " << worst);
      CHECK(worst < 1e-6);
      CHECK(worst_diff(zero2[0].params, test::parameter_values(initial)) > lr * 0.1);  // it moved
      // The replicated norm accumulates ~1e5 squares in fp32 (clip_grad_norm), ZeRO-2's in fp64:
      // they differ by about 1e-6 relative.
      CHECK(zero2[0].metrics["actor/grad_norm"].get<double>() ==
            Approx(replicated[0].metrics["actor/grad_norm"].get<double>()).epsilon(1e-5));
      // Measured from the tensors held: 1/N of the moments (each unit padded to an alignment
      // block per rank), no gradient between updates, whole fp32 weights (the masters are the
      // compute weights' shards).
      const int64_t shard = (total + world - 1) / world, slack = units * 16;
      int64_t state_sum = 0;
      for (int32_t r = 0; r < world; ++r) {
        const RankResult& z = zero2[size_t(r)];
        CHECK(worst_diff(z.params, zero2[0].params) == 0.0);  // the replicas stay bit-identical
        CHECK(z.state_elements >= 2 * shard);
        CHECK(z.state_elements <= 2 * (shard + slack));
        CHECK(z.held.gradients == 0);
        CHECK(z.whole_gradients_held == 0);
        CHECK(z.held.master_weights == 0);
        CHECK(z.held.compute_weights >= 4 * total);
        CHECK(z.held.compute_weights <= 4 * (total + world * slack));
        state_sum += z.state_elements;
      }
      CHECK(replicated[0].state_elements == 2 * total);
      CHECK(state_sum - 2 * total < 2 * world * slack);  // only the units' padding is extra
    }
  }
}

// With gradients whose sums are exact in any order, ZeRO-2's AdamW must be torch::optim::AdamW's
// arithmetic bit for bit (no clipping: the norm is the only other difference).
TEST_CASE("data parallel: ZeRO-2's shard step is LibTorch's AdamW bit for bit on exact gradient sums", "[dp][zero]") {
  const double lr = 1e-2;
  const train::LrScheduleOptions schedule{lr, "constant", 0, 1, 0.0, 0.5};
  train::AdamWConfig config;
  config.grad_clip = 1e30;
  const std::vector<std::vector<int64_t>> shapes = {{7, 5}, {3}, {11}, {2, 2, 3}, {1}};
  auto values = [&](uint64_t seed) {
    at::manual_seed(seed);
    std::vector<at::Tensor> out;
    for (const auto& s : shapes) out.push_back(at::randn(s, at::TensorOptions().dtype(at::kFloat)));
    return out;
  };
  // Rank r's gradient for step k: multiples of 2^-10 below 2^3, so every sum is exact.
  auto grads = [&](int32_t rank, int step) {
    at::manual_seed(uint64_t(100 + 10 * step + rank));
    std::vector<at::Tensor> out;
    for (const auto& s : shapes)
      out.push_back(at::randint(-4096, 4096, s, at::TensorOptions().dtype(at::kFloat)).div_(1024));
    return out;
  };
  for (int32_t world : {2, 3, 4}) {
    std::vector<at::Tensor> expected = values(5);
    for (auto& p : expected) p.requires_grad_(true);
    train::OptimizerStep reference(expected, config, train::LrSchedule(schedule));
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < shapes.size(); ++i) {
        at::Tensor sum = at::zeros(shapes[i], at::TensorOptions().dtype(at::kFloat));
        for (int32_t r = 0; r < world; ++r) sum.add_(grads(r, step)[i]);
        expected[i].mutable_grad() = sum;
      }
      reference.clip_and_step();
    }
    // Drawn here: LibTorch's default generator is not for concurrent use by the rank threads.
    const std::vector<at::Tensor> start = values(5);
    std::vector<std::vector<std::vector<at::Tensor>>> rank_grads(static_cast<size_t>(world));
    for (int32_t r = 0; r < world; ++r)
      for (int step = 0; step < 3; ++step) rank_grads[size_t(r)].push_back(grads(r, step));
    std::vector<std::vector<at::Tensor>> got(static_cast<size_t>(world));
    run_ranks(world, [&](const train::DataParallel& dp) {
      std::vector<at::Tensor> params;
      for (const auto& t : start) params.push_back(t.clone().requires_grad_(true));
      train::OptimizerStep sharded(params, config, train::LrSchedule(schedule));
      sharded.shard(dp, 2);
      for (int step = 0; step < 3; ++step) {
        const auto& g = rank_grads[size_t(dp.rank())][size_t(step)];
        for (size_t i = 0; i < shapes.size(); ++i) params[i].mutable_grad() = g[i].clone();
        sharded.clip_and_step();
      }
      for (auto& p : params) got[size_t(dp.rank())].push_back(p.detach().clone());
    });
    for (int32_t r = 0; r < world; ++r) {
      INFO(world << " ranks, rank " << r);
      for (size_t i = 0; i < shapes.size(); ++i) CHECK(got[size_t(r)][i].equal(expected[i].detach()));
    }
  }
}

// A checkpoint written at ZeRO-2 holds every parameter's whole state: it resumes on 1 rank
// (replicated), on 4 ranks at ZeRO-2 and on 2 at ZeRO-1; a ZeRO-1 checkpoint resumes at ZeRO-2.
TEST_CASE("data parallel: ZeRO-2 checkpoints resume on any rank count and stage", "[dp][zero]") {
  const double lr = 1e-3;
  const train::LrScheduleOptions schedule{lr, "constant", 0, 1, 0.0, 0.5};
  const data::Batch batch = make_batch(test::tiny_model(9));
  const std::vector<at::Tensor> straight = two_updates_on_one_rank(batch, schedule);
  const std::string base = "/tmp/verlpp-test-zero2-checkpoint-" + std::to_string(getpid());
  auto save_after_one = [&](int32_t world, int stage, const std::string& dir) {
    REQUIRE(std::system(("rm -rf " + dir).c_str()) == 0);
    run_ranks(world, [&](const train::DataParallel& dp) {
      model::DecoderLM m = test::tiny_model(9);
      train::Actor actor(m, actor_config(), train::LrSchedule(schedule));
      actor.set_data_parallel(dp, stage);
      actor.update_policy(batch);
      actor.trained_model().save(dir);
    });
  };
  auto resume = [&](int32_t world, int stage, const std::string& dir) {
    std::vector<at::Tensor> rank0;
    auto body = [&](const train::DataParallel& dp) {
      model::DecoderLM m = test::tiny_model(21);  // other weights: the folder must replace them
      train::Actor actor(m, actor_config(), train::LrSchedule(schedule));
      actor.set_data_parallel(dp, stage);
      actor.trained_model().load(dir);
      actor.set_updates(1);
      actor.update_policy(batch);
      actor.trained_model().materialize_master();  // ZeRO-2's masters live in shards
      if (dp.rank() == 0) rank0 = test::parameter_values(m);
    };
    if (world == 1) {
      body(train::DataParallel());
    } else {
      run_ranks(world, body);
    }
    return rank0;
  };
  const std::string zero2_dir = base + "-z2", zero1_dir = base + "-z1";
  save_after_one(2, 2, zero2_dir);
  save_after_one(2, 1, zero1_dir);
  struct Case {
    std::string dir;
    int32_t world;
    int stage;
  };
  for (const Case& c : {Case{zero2_dir, 1, 0}, Case{zero2_dir, 4, 2}, Case{zero2_dir, 2, 1}, Case{zero1_dir, 2, 2}}) {
    const double worst = worst_diff(resume(c.world, c.stage, c.dir), straight);
    INFO(c.dir << " resumed on " << c.world << " ranks at stage " << c.stage << ": worst |resumed - uninterrupted| "
               << worst);
    CHECK(worst < lr * 1e-3);
  }
  CHECK(std::system(("rm -rf " + base + "-z1 " + base + "-z2").c_str()) == 0);
}

#endif  // VERLPP_CPU_REF_HAS_GLOO

TEST_CASE("process group: a posted signal and a barrier without timeout outlast the collective timeout", "[dp]") {
  // Collectives (and the rendezvous) of this group give up after 3 s; the waits below last
  // 4.5 s and succeed (the resource pools' ranks wait so for another pool's stage).
  constexpr auto kLate = std::chrono::milliseconds(4500);
  std::vector<double> waited(3, 0.0), met(3, 0.0);
  test::run_group_ranks(
      3,
      [&](const hw::ProcessGroup& group) {
        const auto start = std::chrono::steady_clock::now();
        if (group.rank() == 0) {
          std::this_thread::sleep_for(kLate);
          group.post("ready");
        } else {
          group.wait_posted("ready");
        }
        waited[size_t(group.rank())] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const auto second = std::chrono::steady_clock::now();
        if (group.rank() == 2) std::this_thread::sleep_for(kLate);
        group.barrier_without_timeout("met");
        met[size_t(group.rank())] = std::chrono::duration<double>(std::chrono::steady_clock::now() - second).count();
      },
      std::chrono::milliseconds(3000));
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << " waited " << waited[size_t(r)] << " s, met after " << met[size_t(r)] << " s");
    CHECK(waited[size_t(r)] >= 4.4);  // nobody went on before rank 0 posted
    CHECK(met[size_t(r)] >= 4.4);     // nor left the barrier before rank 2 arrived
  }
}
