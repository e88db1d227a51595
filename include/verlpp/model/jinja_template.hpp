// A Jinja interpreter for chat templates: the subset of Jinja2 that Hugging Face chat templates
// use, with the environment transformers renders them in (trim_blocks, lstrip_blocks, the
// loopcontrols extension, an immutable sandbox, its `tojson`, `raise_exception` and
// `strftime_now`). A template is parsed once and rendered many times; what it cannot do
// (include, extends, import, call blocks, mutating methods) is a parse or render error naming
// the template, the line and the column, never a silently different text.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace verlpp::model {

namespace jinja {
struct Program;
}

class JinjaTemplate {
 public:
  // Parses `source`. Error naming `origin` and the line:column on a syntax error or an
  // unsupported construct.
  static JinjaTemplate parse(const std::string& source, const std::string& origin = "template");

  // The text for `context`, whose top-level keys are the template's variables (beside the
  // globals range, namespace, dict, raise_exception and strftime_now). Error naming the
  // template and the line:column when the template raises or an operation is invalid (an
  // attribute of an undefined value, adding a string to a number, ...).
  std::string render(const nlohmann::ordered_json& context) const;

  // Whether the template reads the variable `name` anywhere (e.g. "tools").
  bool reads(const std::string& name) const;
  // The `origin` given to parse.
  const std::string& origin() const { return origin_; }

 private:
  std::shared_ptr<const jinja::Program> program_;
  std::string origin_;
};

}  // namespace verlpp::model
