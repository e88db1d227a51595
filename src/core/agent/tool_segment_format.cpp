// The template-derived pieces of a tool segment, computed the way verl computes its system
// prompt ids, plus the end-of-turn text verl drops (its issue 6501).
#include <verlpp/agent/tool_agent_loop.hpp>

#include <verlpp/core/error.hpp>

namespace verlpp::agent {
namespace {

constexpr const char* kProbe = "verlpp-end-of-turn-probe";

}  // namespace

ToolSegmentFormat::ToolSegmentFormat(const model::Tokenizer& tokenizer, const model::ChatTemplate& chat_template,
                                     model::ChatOptions options)
    : tokenizer_(tokenizer), template_(chat_template), options_(std::move(options)) {
  options_.tools.clear();
  model::ChatOptions closed = options_;
  closed.add_generation_prompt = false;
  const TokenIds one = tokenizer_.encode(template_.render({{"user", ""}}, closed));
  const TokenIds two = tokenizer_.encode(template_.render({{"user", ""}, {"user", ""}}, closed));
  const size_t turn = two.size() >= one.size() ? two.size() - one.size() : 0;
  VERLPP_CHECK(turn <= one.size() && std::equal(one.begin(), one.end(), two.begin()),
               "chat template \"{}\": a second user turn changes the first one's rendering; the system prompt "
               "cannot be told apart from the turns",
               template_.name());
  system_prefix_.assign(one.begin(), one.end() - static_cast<std::ptrdiff_t>(turn));

  const std::string rendered = template_.render({{"user", "u"}, {"assistant", kProbe}}, closed);
  const size_t at = rendered.rfind(kProbe);
  VERLPP_CHECK(at != std::string::npos, "chat template \"{}\": an assistant message's content is not rendered",
               template_.name());
  turn_end_ = rendered.substr(at + std::char_traits<char>::length(kProbe));
}

TokenIds ToolSegmentFormat::segment(const std::string& turn_text, const std::vector<std::string>& tool_replies) const {
  std::vector<model::ChatMessage> messages;
  for (const std::string& reply : tool_replies) messages.push_back({"tool", reply});
  return segment_of(turn_text, messages);
}

TokenIds ToolSegmentFormat::user_segment(const std::string& turn_text, const std::string& content) const {
  return segment_of(turn_text, {{"user", content}});
}

TokenIds ToolSegmentFormat::segment_of(const std::string& turn_text,
                                       const std::vector<model::ChatMessage>& messages) const {
  model::ChatOptions open = options_;
  open.add_generation_prompt = true;
  const TokenIds rendered = tokenizer_.encode(template_.render(messages, open));
  VERLPP_CHECK(rendered.size() >= system_prefix_.size() &&
                   std::equal(system_prefix_.begin(), system_prefix_.end(), rendered.begin()),
               "chat template \"{}\": the {} turn's rendering does not begin with the system prompt's ids",
               template_.name(), messages.empty() ? "empty" : messages.front().role);
  // The end-of-turn text the model wrote: the longest head of turn_end_ the turn ends with.
  size_t written = 0;
  for (size_t k = turn_end_.size(); k > 0; --k)
    if (turn_text.size() >= k && turn_text.compare(turn_text.size() - k, k, turn_end_, 0, k) == 0) {
      written = k;
      break;
    }
  TokenIds out;
  if (written > 0 && written < turn_end_.size()) out = tokenizer_.encode(turn_end_.substr(written));
  out.insert(out.end(), rendered.begin() + static_cast<std::ptrdiff_t>(system_prefix_.size()), rendered.end());
  return out;
}

}  // namespace verlpp::agent
