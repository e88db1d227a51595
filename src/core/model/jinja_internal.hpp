// Internals of the Jinja interpreter (jinja_*.cpp, not installed): the tokens a template's
// tags are cut into, the syntax tree the parser builds, and the values the renderer computes.
#pragma once

#include <verlpp/model/jinja_template.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace verlpp::model::jinja {

using Json = nlohmann::ordered_json;

// ---- Lexing (jinja_lexer.cpp) ----

struct Token {
  enum class Kind { kName, kString, kInt, kFloat, kOp, kEnd };
  Kind kind = Kind::kEnd;
  std::string text;  // the name, the operator, or the string's unescaped value
  Json number;       // kInt / kFloat
  int line = 0, col = 0;
};

// A piece of the template: literal text (whitespace control applied), an {{ output }} or a
// {% statement %}, the latter two as tokens ending with a kEnd token.
struct Piece {
  enum class Kind { kText, kOutput, kStatement };
  Kind kind = Kind::kText;
  std::string text;
  std::vector<Token> tokens;
  int line = 0, col = 0;
};

std::vector<Piece> lex(const std::string& source, const std::string& origin);

// ---- Syntax tree (jinja_parser.cpp) ----

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // [args...]
    kTuple,    // (args...)
    kDict,     // {args[0]: args[1], ...}
    kAttr,     // args[0].name
    kItem,     // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]] (null parts absent)
    kCall,     // args[0](args[1..], kwargs)
    kFilter,   // args[0] | name(args[1..], kwargs)
    kTest,     // args[0] is [not] name(args[1..])
    kUnary,    // name ("-", "+", "not") args[0]
    kBinary,   // args[0] name args[1]: + - * / // % ** ~ == != < <= > >= in "not in" and or
    kCond,     // args[1] if args[0] else args[2] (args[2] null: undefined)
  };
  Kind kind = Kind::kLiteral;
  int line = 0, col = 0;
  Json literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;  // kTest: `is not`
};

struct Stmt;
using Body = std::vector<Stmt>;

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches: (condition, body); the else branch has no condition
    kFor,          // for targets in expr [if filter] body [else else_body]
    kSet,          // set targets (or targets[0].attr) = expr
    kSetBlock,     // set targets[0] %} body {% endset
    kMacro,        // macro name(params) body
    kFilterBlock,  // filter expr (a kFilter whose args[0] is null) applied to body's text
    kBreak,
    kContinue,
    kBlock,  // a block rendered as its body ({% generation %})
  };
  Kind kind = Kind::kText;
  int line = 0, col = 0;
  std::string text;
  ExprPtr expr;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<std::string> targets;
  std::string attr;
  ExprPtr filter;
  Body body, else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters and their defaults
};

struct Program {
  Body body;
  std::vector<std::string> names_read;  // every kName in the template, sorted and unique
};

// Parses lexed pieces; `origin` names the template in errors.
Program parse_pieces(std::vector<Piece> pieces, const std::string& origin);

// ---- Values (jinja_value.cpp) ----

class Value;
struct Object;
struct Callable;
using Args = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;

// A value during rendering: undefined, data (JSON: none, booleans, numbers, strings, lists,
// dicts), an object with fields (a namespace, the loop variable) or something callable (a
// macro, a global, a bound method). Data read from the context is referenced, not copied.
class Value {
 public:
  enum class Kind { kUndefined, kData, kObject, kCallable };

  Value() = default;
  static Value undefined(std::string what = "") {
    Value v;
    v.what_ = std::move(what);
    return v;
  }
  Value(Json data);  // NOLINT(runtime/explicit): data is a value
  static Value ref(std::shared_ptr<const Json> owner, const Json* node);
  static Value object(std::shared_ptr<Object> o);
  static Value callable(std::shared_ptr<Callable> c);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_data() const { return kind_ == Kind::kData; }
  const Json& data() const { return *node_; }
  Object& object() const { return *object_; }
  const Callable& callable() const { return *callable_; }
  // What an undefined value stands for ("'x' is undefined"), for errors.
  const std::string& what() const { return what_; }

  // A child of data: the element or member, referencing the same owner.
  Value child(const Json& node) const { return ref(owner_, &node); }

 private:
  Kind kind_ = Kind::kUndefined;
  std::shared_ptr<const Json> owner_;
  const Json* node_ = nullptr;
  std::shared_ptr<Object> object_;
  std::shared_ptr<Callable> callable_;
  std::string what_;
};

struct Object {
  std::string type;  // "namespace", "loop"
  std::map<std::string, Value> fields;
};

struct Callable {
  std::string name;
  std::function<Value(Args&, Kwargs&)> call;
};

// Python's truth value (undefined is false).
bool truthy(const Value& v);
// Python's str() of a value: what {{ v }} writes (repr() inside lists and dicts).
std::string to_str(const Value& v);
// Python's repr() of data.
std::string repr(const Json& v);
// A name for the value's type in errors ("string", "list", "undefined", ...).
std::string type_name(const Value& v);
// Python's ==.
bool equal(const Value& a, const Value& b);
// Data for JSON or an Error (objects and callables have no JSON form).
Json to_data(const Value& v, const std::string& what);

// ---- Python string semantics (jinja_value.cpp) ----

std::vector<char32_t> code_points(const std::string& s);
std::string from_code_points(const std::vector<char32_t>& cps, size_t begin, size_t end);
std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_title(const std::string& s);
std::string py_capitalize(const std::string& s);
bool py_isspace(char32_t c);

// ---- Filters, tests, methods and globals (jinja_builtins.cpp) ----

// Raised by a builtin for an invalid use; the renderer adds the template position.
struct UseError {
  std::string message;
};

// The items a for loop or a filter iterates: a list's elements, a dict's keys, a string's
// characters; undefined iterates as empty (Jinja's Undefined). Throws UseError naming `what`.
std::vector<Value> items_of(const Value& v, const std::string& what);
// The filter `name` applied to `args[0]` with args[1..] and `kwargs`. Throws UseError.
Value apply_filter(const std::string& name, Args& args, Kwargs& kwargs);
bool has_filter(const std::string& name);
// The test `name` on `args[0]`. Throws UseError.
bool apply_test(const std::string& name, Args& args);
bool has_test(const std::string& name);
// The attribute `name` of `self` (a method bound to it, or a dict member); undefined if none.
Value attribute(const Value& self, const std::string& name);
// The global functions (range, namespace, dict, raise_exception, strftime_now).
const std::map<std::string, Value>& globals();
// The exception raise_exception throws: the template's own message.
struct TemplateRaised {
  std::string message;
};

}  // namespace verlpp::model::jinja
