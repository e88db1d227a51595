// Command-line overrides in Hydra's override grammar (as verl's run scripts write them), parsed
// into a key, an action and a value typed the way Hydra and OmegaConf type it.
//
//   key=value     change a key (it must exist; inside a free-form section it may be new)
//   +key=value    add a key that is not set (an error when it holds a non-null value, unless
//                 the value is a list or a dict, which is merged)
//   ++key=value   add or change
//   ~key          delete; ~key=value deletes only when the key holds that value
//
// The key is a dotted path (letters, digits, '_', '-', '$'; a component may be a list index).
// Config-group keys (`group/name`, `key@package`) are refused: verlpp has one built-in tree.
// The value (leading and trailing blanks dropped; `key=` is the empty string):
//   null, true, false     any case (NULL, True, fAlSe)
//   ints                  -3, +7, 1_000 (underscores between digits), 0 (no leading zeros: 01
//                         is the string "01")
//   floats                1.5, 1., .5, 1e-6, -2.5E+3, 1_0.5, inf, -inf, nan (any case)
//   quoted strings        'a b', "a,b[c]": only a backslash run before a quote is an escape
//                         (\" is ", \\" ends the string after one \); nothing else is unescaped
//   unquoted strings      the other characters Hydra allows (letters, digits, _ - / \ + . $ % *
//                         @ ? | : and inner blanks), e.g. /data/a.parquet, token-mean, 2024-01;
//                         \( \) \[ \] \{ \} \: \= \, and "\ " are escapes for those characters
//   lists                 [a, 1, [true, null]]      (elements typed the same way)
//   dicts                 {k: v, k2: [1, 2]}        (keys unquoted, or quoted as a verlpp
//                                                    extension so JSON objects still parse)
//   interpolations        ${a.b}, ${oc.select:a.b,1}: kept as text, resolved by Config::resolve
// A value made of several tokens (`a b`, `10abc`, `x:${y}`) is the string of its text. Other
// ASCII characters (~ # ! & ' " ; < > ^ ` =) need quoting, as in Hydra; bytes of UTF-8 text are
// accepted unquoted (Hydra refuses them). Sweeps (a,b) and Hydra's functions (choice(...),
// range(...), int(...)) are refused: verlpp runs one configuration.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace verlpp::config {

// What an override does with its key.
enum class OverrideAction { change, add, add_or_change, remove };

// One parsed override.
struct Override {
  OverrideAction action = OverrideAction::change;
  std::string key;            // the dotted path, e.g. actor_rollout_ref.actor.optim.lr
  bool has_value = true;      // false only for `~key`
  nlohmann::json value;       // the typed value (null for `~key`)
  std::string value_text;     // the value's text with outer blanks dropped, as typed
  bool value_quoted = false;  // the whole value is one quoted string
};

// Parses one override. Errors name the override, the 1-based column and what was expected.
Override parse_override(const std::string& text);

// Parses a value alone in the same grammar (for interpolation arguments such as the default of
// ${oc.select:key,default}); `where` names it in errors. Commas at the top level are errors.
nlohmann::json parse_override_value(const std::string& text, const std::string& where);

}  // namespace verlpp::config
