// YAML config files read as verl reads them: OmegaConf's loader, which is PyYAML's YAML 1.1
// typing of plain (unquoted, untagged) scalars with two changes (floats without a dot such as
// 1e-6 are floats; dates stay strings):
//   null      ~ null Null NULL and the empty value
//   booleans  true/false, yes/no, on/off in lower, Title or UPPER case
//   integers  1, -2, +3, 1_000, octal 0755 (= 493), 0x1F, 0b101, sexagesimal 1:30 (= 90)
//   floats    1.5, 1., .5, 1.0e-6, 1e-6, 1E+3, 1_0.5, 1:30.5, .inf -.inf +.inf .nan (those cases)
//   strings   everything else (-.5 and 2001-12-14 too), and every quoted or block scalar
// Tags !!str !!int !!float !!bool !!null !!map !!seq are honoured; other tags are refused.
// Mapping keys become strings (1 -> "1", true -> "true", null -> "null"); a duplicate key is an
// error (as OmegaConf makes it); merge keys (<<: *anchor) merge as in PyYAML. Aliases are
// expanded; a recursive alias, more than 100000 nodes or nesting over 512 levels is an error.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace verlpp::config {

// The JSON value of a YAML document (an empty document is {}); `origin` names it in errors,
// which give the line, the column and the key path.
nlohmann::json yaml_to_json(const std::string& text, const std::string& origin);
// The same, with each mapping's keys in the file's order (for what is rendered back as text in
// that order, such as a tool's JSON schema in a prompt).
nlohmann::ordered_json yaml_to_ordered_json(const std::string& text, const std::string& origin);

// The typed value of one plain YAML scalar, by the rules above; throws for the plain scalars
// PyYAML cannot construct (the value indicator '=', an integer with no digits such as 0x_).
nlohmann::json yaml_plain_scalar(const std::string& text);

}  // namespace verlpp::config
