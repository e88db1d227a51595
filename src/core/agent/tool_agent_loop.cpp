// The driver: one TurnSource step at a time; after each, every turn that ended moves its
// trajectory on (terminate, or dispatch its calls, or its interaction's reply, to the tool
// pool); results that are ready are appended and their trajectories resumed. When the engine
// has nothing to do the driver waits for the oldest pending call, so a slow tool holds up only
// its own trajectory.
#include <verlpp/agent/tool_agent_loop.hpp>

#include <verlpp/agent/tool_call_parser.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <algorithm>
#include <chrono>

namespace verlpp::agent {
namespace {

// A call's result and whether it failed (its text is then the error).
struct CallOutcome {
  ToolResult result;
  bool failed = false;
};

// A fixed set of threads running queued calls (bounded: a batch's calls never start more).
class ToolPool {
 public:
  explicit ToolPool(int64_t threads) {
    for (int64_t i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~ToolPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& worker : workers_) worker.join();
  }
  template <class Result>
  std::future<Result> run(std::function<Result()> job) {
    auto task = std::make_shared<std::packaged_task<Result()>>(std::move(job));
    std::future<Result> result = task->get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back([task] { (*task)(); });
    }
    wake_.notify_one();
    return result;
  }

 private:
  void work() {
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

// Python's len() and slicing of a UTF-8 string, by code points.
std::vector<size_t> code_point_starts(const std::string& text) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < text.size(); ++i)
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) starts.push_back(i);
  return starts;
}

struct Running {
  Trajectory trajectory;
  int64_t handle = -1;
  bool done = false;
  std::string last_turn_text;
  std::vector<std::future<CallOutcome>> pending;  // this turn's tool calls
  std::future<InteractionReply> reply;            // or its interaction's reply (valid() while asked)
  const Interaction* interaction = nullptr;       // the sample's, with interactions configured
  nlohmann::json messages;                        // the conversation, kept for the interaction
  bool waiting() const { return !pending.empty() || reply.valid(); }
  bool ready() const {
    for (const auto& call : pending)
      if (call.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
    return !reply.valid() || reply.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }
  void wait() const {
    for (const auto& call : pending) call.wait();
    if (reply.valid()) reply.wait();
  }
};

}  // namespace

const char* termination_name(Termination termination) {
  switch (termination) {
    case Termination::kNoToolCall:
      return "no_tool_call";
    case Termination::kResponseLength:
      return "response_length";
    case Termination::kMaxAssistantTurns:
      return "max_assistant_turns";
    case Termination::kMaxUserTurns:
      return "max_user_turns";
    case Termination::kToolSegmentOverflow:
      return "tool_segment_overflow";
    case Termination::kInteractionDone:
      return "interaction_done";
    case Termination::kAborted:
      return "aborted";
  }
  return "?";
}

void validate(const AgentLoopSettings& s) {
  VERLPP_CHECK(s.response_length >= 1, "data.max_response_length must be at least 1, got {}", s.response_length);
  VERLPP_CHECK(s.max_assistant_turns >= 0, "multi_turn.max_assistant_turns must be >= 0 (0 or null: no limit), got {}",
               s.max_assistant_turns);
  VERLPP_CHECK(s.max_user_turns >= 0, "multi_turn.max_user_turns must be >= 0 (0 or null: no limit), got {}",
               s.max_user_turns);
  VERLPP_CHECK(s.max_parallel_calls >= 1, "multi_turn.max_parallel_calls must be at least 1, got {}",
               s.max_parallel_calls);
  VERLPP_CHECK(s.max_tool_response_length >= 0, "multi_turn.max_tool_response_length must be >= 0, got {}",
               s.max_tool_response_length);
  VERLPP_CHECK(s.tool_response_truncate_side == "left" || s.tool_response_truncate_side == "right" ||
                   s.tool_response_truncate_side == "middle",
               "multi_turn.tool_response_truncate_side must be left, right or middle, got '{}'",
               s.tool_response_truncate_side);
  VERLPP_CHECK(s.tool_threads >= 1, "the agent loop's tool threads must be at least 1, got {}", s.tool_threads);
}

std::string truncate_tool_reply(const std::string& text, int64_t max_chars, const std::string& side) {
  const std::vector<size_t> starts = code_point_starts(text);
  const int64_t length = static_cast<int64_t>(starts.size());
  if (text.empty() || length <= max_chars) return text;
  // text[:k] and text[-k:] as Python slices them (text[-0:] is the whole text).
  auto head = [&](int64_t k) { return text.substr(0, starts[static_cast<size_t>(k)]); };
  auto tail = [&](int64_t k) { return k == 0 ? text : text.substr(starts[static_cast<size_t>(length - k)]); };
  if (side == "left") return head(max_chars) + "...(truncated)";
  if (side == "right") return "(truncated)..." + tail(max_chars);
  const int64_t half = max_chars / 2;
  return head(half) + "...(truncated)..." + tail(half);
}

ToolResult run_tool_call(const ToolSet& tools, const ToolCall& call, const nlohmann::json& tools_kwargs,
                         const AgentLoopSettings& settings, bool* failed) {
  if (failed) *failed = true;
  const Tool* tool = tools.find(call.name);
  if (tool == nullptr)  // verl's KeyError: its text is the name's repr
    return ToolResult{"Error when executing tool: " + python_repr(call.name), 0.0};
  ToolResult result;
  try {
    const nlohmann::ordered_json arguments = nlohmann::ordered_json::parse(call.arguments);
    nlohmann::json create_kwargs = nlohmann::json::object();
    if (tools_kwargs.is_object() && tools_kwargs.contains(call.name) && tools_kwargs[call.name].is_object() &&
        tools_kwargs[call.name].contains("create_kwargs"))
      create_kwargs = tools_kwargs[call.name]["create_kwargs"];
    result = tool->call(arguments, create_kwargs);
  } catch (const Error& e) {
    return ToolResult{"Error when executing tool: " + e.message(), 0.0};
  } catch (const std::exception& e) {
    return ToolResult{std::string("Error when executing tool: ") + e.what(), 0.0};
  }
  if (failed) *failed = false;
  result.text =
      truncate_tool_reply(result.text, settings.max_tool_response_length, settings.tool_response_truncate_side);
  return result;
}

std::vector<Trajectory> run_agent_loop(TurnSource& source, const std::vector<AgentSample>& samples,
                                       const ToolSet& tools, const ToolSegmentFormat& format,
                                       const model::Tokenizer& tokenizer, const AgentLoopSettings& settings,
                                       AgentLoopStats* stats_out, const InteractionSet* interactions) {
  validate(settings);
  AgentLoopStats stats;
  std::vector<Running> runs(samples.size());
  std::map<int64_t, size_t> by_handle;
  const bool interacting = interactions != nullptr && !interactions->empty();
  for (size_t i = 0; i < samples.size(); ++i) {
    const AgentSample& sample = samples[i];
    VERLPP_CHECK(sample.agent_name == kSingleTurnAgent || sample.agent_name == kToolAgent,
                 "sample {}: agent_name '{}' is not a known agent loop (known: {}, {})", i, sample.agent_name,
                 kSingleTurnAgent, kToolAgent);
    VERLPP_CHECK(sample.agent_name != kToolAgent || !tools.empty() || interacting,
                 "sample {}: agent_name '{}' needs tools or an interaction (multi_turn.tool_config_path and "
                 "interaction_config_path name none)",
                 i, kToolAgent);
    VERLPP_CHECK(!sample.prompt_ids.empty(), "sample {}: the prompt is empty", i);
    if (interacting && sample.agent_name == kToolAgent) {
      runs[i].interaction = &interaction_of(*interactions, sample.interaction_kwargs, fmt::format("sample {}", i));
      VERLPP_CHECK(sample.messages.is_array(), "sample {}: the prompt's messages must be a list, got {}", i,
                   sample.messages.dump());
      runs[i].messages = sample.messages;
    }
  }
  ToolPool pool(settings.tool_threads);
  const int64_t budget = settings.response_length;

  auto finish = [&](Running& run, Termination why) {
    run.trajectory.termination = why;
    run.done = true;
    source.finish(run.handle);
  };
  // After a turn: verl's order of checks, then the calls.
  auto on_turn = [&](size_t i, GeneratedTurn& turn) {
    Running& run = runs[i];
    Trajectory& t = run.trajectory;
    t.response_ids.insert(t.response_ids.end(), turn.token_ids.begin(), turn.token_ids.end());
    t.response_mask.insert(t.response_mask.end(), turn.token_ids.size(), 1);
    t.response_logprobs.insert(t.response_logprobs.end(), turn.logprobs.begin(), turn.logprobs.end());
    t.response_logprobs.resize(t.response_mask.size(), 0.0f);
    t.assistant_turns += 1;
    if (turn.aborted) {
      t.error = turn.error;
      return finish(run, Termination::kAborted);
    }
    if (static_cast<int64_t>(t.response_mask.size()) >= budget) return finish(run, Termination::kResponseLength);
    if (settings.max_assistant_turns && t.assistant_turns >= settings.max_assistant_turns)
      return finish(run, Termination::kMaxAssistantTurns);
    if (settings.max_user_turns && t.user_turns >= settings.max_user_turns)
      return finish(run, Termination::kMaxUserTurns);
    if (samples[i].agent_name == kSingleTurnAgent) return finish(run, Termination::kNoToolCall);
    run.last_turn_text = tokenizer.decode(turn.token_ids);
    ParsedTurn parsed = parse_hermes_tool_calls(run.last_turn_text);
    t.malformed_calls += parsed.num_malformed;
    if (parsed.num_malformed > 0 && stats.first_malformed.empty()) stats.first_malformed = parsed.first_malformed;
    if (run.interaction != nullptr)  // verl's message: the turn decoded without special tokens
      run.messages.push_back({{"role", "assistant"}, {"content", tokenizer.decode(turn.token_ids, true)}});
    if (parsed.calls.empty() && run.interaction != nullptr) {
      const Interaction* interaction = run.interaction;
      const nlohmann::json messages = run.messages;
      const nlohmann::json* kwargs = &samples[i].interaction_kwargs;
      run.reply = pool.run<InteractionReply>(
          [interaction, messages, kwargs] { return interaction->respond(messages, *kwargs); });
      return;
    }
    if (parsed.calls.empty()) return finish(run, Termination::kNoToolCall);
    if (static_cast<int64_t>(parsed.calls.size()) > settings.max_parallel_calls)
      parsed.calls.resize(static_cast<size_t>(settings.max_parallel_calls));
    for (const ToolCall& call : parsed.calls) {
      const nlohmann::json* kwargs = &samples[i].tools_kwargs;
      run.pending.push_back(pool.run<CallOutcome>([&tools, call, kwargs, &settings] {
        CallOutcome outcome;
        outcome.result = run_tool_call(tools, call, *kwargs, settings, &outcome.failed);
        return outcome;
      }));
    }
    t.tool_calls += static_cast<int64_t>(parsed.calls.size());
  };
  // When every call of a trajectory's turn has returned: the segment, or the end.
  auto on_tools = [&](Running& run) {
    Trajectory& t = run.trajectory;
    std::vector<std::string> replies;
    for (auto& pending : run.pending) {
      CallOutcome outcome = pending.get();
      if (outcome.failed) ++stats.tool_errors;
      replies.push_back(std::move(outcome.result.text));
      t.tool_rewards.push_back(outcome.result.reward);
    }
    run.pending.clear();
    if (run.interaction != nullptr)
      for (const std::string& reply : replies) run.messages.push_back({{"role", "tool"}, {"content", reply}});
    const TokenIds segment = format.segment(run.last_turn_text, replies);
    if (static_cast<int64_t>(t.response_mask.size() + segment.size()) >= budget)
      return finish(run, Termination::kToolSegmentOverflow);
    t.response_ids.insert(t.response_ids.end(), segment.begin(), segment.end());
    t.response_mask.insert(t.response_mask.end(), segment.size(), 0);
    t.response_logprobs.insert(t.response_logprobs.end(), segment.size(), 0.0f);
    t.user_turns += 1;
    source.resume(run.handle, segment, budget - static_cast<int64_t>(t.response_mask.size()));
  };
  // The interaction's reply: a user turn appended whatever its length (verl checks no budget
  // here), then the end or the next turn.
  auto on_reply = [&](size_t i, Running& run) {
    Trajectory& t = run.trajectory;
    InteractionReply reply;
    try {
      reply = run.reply.get();
    } catch (const std::exception& e) {
      throw Error(fmt::format("sample {}", i), fmt::format("interaction '{}': {}", run.interaction->name(), e.what()));
    }
    t.user_turns += 1;
    stats.interaction_turns += 1;
    if (reply.reward) t.turn_scores.push_back(*reply.reward);
    run.messages.push_back({{"role", "user"}, {"content", reply.content}});
    const TokenIds segment = format.user_segment(run.last_turn_text, reply.content);
    t.response_ids.insert(t.response_ids.end(), segment.begin(), segment.end());
    t.response_mask.insert(t.response_mask.end(), segment.size(), 0);
    t.response_logprobs.insert(t.response_logprobs.end(), segment.size(), 0.0f);
    if (reply.terminate) return finish(run, Termination::kInteractionDone);
    const int64_t left = budget - static_cast<int64_t>(t.response_mask.size());
    // Nothing the model writes now would survive the final cut.
    if (left <= 0) return finish(run, Termination::kResponseLength);
    source.resume(run.handle, segment, left);
  };

  for (size_t i = 0; i < samples.size(); ++i) {
    runs[i].trajectory.prompt_ids = samples[i].prompt_ids;
    runs[i].handle = source.start(samples[i].prompt_ids, budget, static_cast<int64_t>(i));
    by_handle[runs[i].handle] = i;
  }
  size_t remaining = samples.size();
  while (remaining > 0) {
    if (source.has_work()) {
      for (GeneratedTurn& turn : source.step()) {
        auto it = by_handle.find(turn.handle);
        VERLPP_CHECK(it != by_handle.end(), "agent loop: a turn of an unknown sequence {}", turn.handle);
        on_turn(it->second, turn);
        if (runs[it->second].done) --remaining;
      }
    }
    bool waited = false;
    for (size_t i = 0; i < runs.size(); ++i) {
      Running& run = runs[i];
      if (run.done || !run.waiting()) continue;
      // With no engine work left, wait for this trajectory's calls rather than spin.
      if (!source.has_work() && !waited) {
        run.wait();
        waited = true;
      }
      if (!run.ready()) continue;
      if (run.reply.valid())
        on_reply(i, run);
      else
        on_tools(run);
      if (run.done) --remaining;
    }
    VERLPP_CHECK(remaining == 0 || source.has_work() ||
                     std::any_of(runs.begin(), runs.end(), [](const Running& r) { return !r.done && r.waiting(); }),
                 "agent loop: {} trajectories neither generate nor wait on a tool or an interaction", remaining);
  }

  std::vector<Trajectory> out;
  out.reserve(runs.size());
  for (Running& run : runs) {
    Trajectory& t = run.trajectory;
    const size_t keep = std::min(t.response_ids.size(), static_cast<size_t>(budget));
    t.response_ids.resize(keep);
    t.response_mask.resize(keep);
    t.response_logprobs.resize(keep);
    t.num_turns = t.user_turns + t.assistant_turns + 1;
    stats.trajectories += 1;
    stats.tool_calls += t.tool_calls;
    stats.malformed_calls += t.malformed_calls;
    out.push_back(std::move(t));
  }
  if (stats_out) *stats_out = stats;
  return out;
}

}  // namespace verlpp::agent
