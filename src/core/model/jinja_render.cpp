// The Jinja renderer: runs a parsed template over a context. Names resolve through the
// template's own assignments (a for loop's body is its own scope, as in Jinja, so a set inside
// a loop is gone after it: templates carry state out of loops in a namespace), then the
// context, then the globals. Loops, output and macro recursion are bounded so that a hostile
// template ends with an error instead of running away.
#include "jinja_internal.hpp"

#include <verlpp/core/error.hpp>

#include <cmath>

namespace verlpp::model::jinja {
namespace {

constexpr int64_t kMaxIterations = 10'000'000;    // loop iterations of one render
constexpr size_t kMaxOutput = size_t{256} << 20;  // bytes of one render
constexpr int kMaxCallDepth = 64;                 // nested macro calls

enum class Flow { kNormal, kBreak, kContinue };

struct Located {  // an error already carrying its template position
  std::string message;
};

class Renderer {
 public:
  Renderer(const std::string& origin, std::shared_ptr<const Json> context)
      : origin_(origin), context_(std::move(context)) {
    frames_.emplace_back();
  }

  std::string run(const Body& body) {
    std::string out;
    try {
      exec(body, out);
    } catch (const Located& e) {
      throw Error(origin_, e.message);
    }
    return out;
  }

 private:
  const std::string& origin_;
  std::shared_ptr<const Json> context_;
  std::vector<std::map<std::string, Value>> frames_;
  int64_t iterations_ = 0;
  int call_depth_ = 0;
  const Value* hole_ = nullptr;  // the text a {% filter %} block's chain applies to

  [[noreturn]] void fail_at(int line, int col, const std::string& message) const {
    throw Located{fmt::format("line {}, column {}: {}", line, col, message)};
  }

  Value lookup(const std::string& name) const {
    for (auto f = frames_.rbegin(); f != frames_.rend(); ++f) {
      auto it = f->find(name);
      if (it != f->end()) return it->second;
    }
    if (context_->is_object()) {
      auto it = context_->find(name);
      if (it != context_->end()) return Value::ref(context_, &*it);
    }
    const auto& g = globals();
    auto it = g.find(name);
    if (it != g.end()) return it->second;
    return Value::undefined(fmt::format("'{}' is undefined", name));
  }

  void emit(std::string& out, const std::string& text, int line, int col) {
    if (out.size() + text.size() > kMaxOutput)
      fail_at(line, col, fmt::format("the rendered text exceeds {} MiB", kMaxOutput >> 20));
    out += text;
  }

  // ---- statements ----

  Flow exec(const Body& body, std::string& out) {
    for (const Stmt& s : body) {
      const Flow flow = exec(s, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& s, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::kText:
        emit(out, s.text, s.line, s.col);
        return Flow::kNormal;
      case Stmt::Kind::kOutput:
        emit(out, to_str(eval(*s.expr)), s.line, s.col);
        return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (const auto& branch : s.branches)
          if (!branch.first || truthy(eval(*branch.first))) return exec(branch.second, out);
        return Flow::kNormal;
      case Stmt::Kind::kFor:
        return exec_for(s, out);
      case Stmt::Kind::kSet: {
        Value v = eval(*s.expr);
        if (!s.attr.empty()) {
          Value target = lookup(s.targets[0]);
          if (target.kind() != Value::Kind::kObject || target.object().type != "namespace")
            fail_at(s.line, s.col,
                    fmt::format("cannot set \"{}.{}\": {} is a {}, not a namespace", s.targets[0], s.attr, s.targets[0],
                                type_name(target)));
          target.object().fields[s.attr] = v;
        } else {
          assign(s.targets, v, s.line, s.col);
        }
        return Flow::kNormal;
      }
      case Stmt::Kind::kSetBlock: {
        std::string text;
        exec(s.body, text);
        frames_.back()[s.targets[0]] = Value(Json(text));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro:
        frames_.back()[s.attr] = macro(s);
        return Flow::kNormal;
      case Stmt::Kind::kFilterBlock: {
        std::string text;
        exec(s.body, text);
        const Value body_text{Json(text)};
        hole_ = &body_text;
        const Value filtered = eval(*s.expr);
        hole_ = nullptr;
        emit(out, to_str(filtered), s.line, s.col);
        return Flow::kNormal;
      }
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
      case Stmt::Kind::kBlock:
        return exec(s.body, out);
    }
    return Flow::kNormal;
  }

  void assign(const std::vector<std::string>& targets, const Value& v, int line, int col) {
    if (targets.size() == 1) {
      frames_.back()[targets[0]] = v;
      return;
    }
    if (!v.is_data() || !v.data().is_array() || v.data().size() != targets.size())
      fail_at(line, col, fmt::format("cannot unpack a {} into {} names", type_name(v), targets.size()));
    for (size_t i = 0; i < targets.size(); ++i) frames_.back()[targets[i]] = v.child(v.data()[i]);
  }

  std::vector<Value> iterate(const Value& v, int line, int col) {
    try {
      return items_of(v, "for");
    } catch (const UseError& u) {
      fail_at(line, col, u.message);
    }
  }

  Flow exec_for(const Stmt& s, std::string& out) {
    std::vector<Value> items = iterate(eval(*s.expr), s.expr->line, s.expr->col);
    frames_.emplace_back();
    if (s.filter) {  // `for x in xs if cond`: filtered before loop.* counts
      std::vector<Value> kept;
      for (const Value& item : items) {
        assign(s.targets, item, s.line, s.col);
        if (truthy(eval(*s.filter))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const size_t n = items.size();
    auto loop = std::make_shared<Object>();
    loop->type = "loop";
    const Value loop_value = Value::object(loop);
    for (size_t i = 0; i < n; ++i) {
      if (++iterations_ > kMaxIterations)
        fail_at(s.line, s.col, fmt::format("more than {} loop iterations", kMaxIterations));
      auto& f = loop->fields;
      const auto k = static_cast<int64_t>(i), len = static_cast<int64_t>(n);
      f["index"] = Value(Json(k + 1));
      f["index0"] = Value(Json(k));
      f["revindex"] = Value(Json(len - k));
      f["revindex0"] = Value(Json(len - k - 1));
      f["first"] = Value(Json(i == 0));
      f["last"] = Value(Json(i + 1 == n));
      f["length"] = Value(Json(len));
      f["depth"] = Value(Json(1));
      f["depth0"] = Value(Json(0));
      f["previtem"] = i > 0 ? items[i - 1] : Value::undefined("loop.previtem of the first item");
      f["nextitem"] = i + 1 < n ? items[i + 1] : Value::undefined("loop.nextitem of the last item");
      auto cycle = std::make_shared<Callable>();
      cycle->name = "loop.cycle";
      cycle->call = [i](Args& a, Kwargs&) {
        if (a.empty()) throw UseError{"loop.cycle expects at least one value"};
        return a[i % a.size()];
      };
      f["cycle"] = Value::callable(cycle);
      frames_.back()["loop"] = loop_value;
      assign(s.targets, items[i], s.line, s.col);
      if (exec(s.body, out) == Flow::kBreak) break;
    }
    frames_.pop_back();
    if (n == 0 && !s.else_body.empty()) return exec(s.else_body, out);
    return Flow::kNormal;
  }

  Value macro(const Stmt& s) {
    auto c = std::make_shared<Callable>();
    c->name = s.attr;
    const Stmt* def = &s;
    c->call = [this, def](Args& args, Kwargs& kwargs) {
      if (args.size() > def->params.size())
        throw UseError{
            fmt::format("macro \"{}\" takes {} arguments, got {}", def->attr, def->params.size(), args.size())};
      if (++call_depth_ > kMaxCallDepth) throw UseError{fmt::format("macro calls nest deeper than {}", kMaxCallDepth)};
      std::map<std::string, Value> frame;
      for (size_t i = 0; i < def->params.size(); ++i) {
        const auto& [name, fallback] = def->params[i];
        const Value* given = i < args.size() ? &args[i] : nullptr;
        for (auto& kv : kwargs)
          if (kv.first == name) given = &kv.second;
        frame[name] = given      ? *given
                      : fallback ? eval(*fallback)
                                 : Value::undefined(fmt::format("'{}' is undefined", name));
      }
      for (auto& kv : kwargs) {
        bool known = false;
        for (const auto& p : def->params) known = known || p.first == kv.first;
        if (!known) throw UseError{fmt::format("macro \"{}\" has no parameter \"{}\"", def->attr, kv.first)};
      }
      frames_.push_back(std::move(frame));
      std::string text;
      exec(def->body, text);
      frames_.pop_back();
      --call_depth_;
      return Value(Json(text));
    };
    return Value::callable(c);
  }

  // ---- expressions ----

  Value eval(const Expr& e) {
    try {
      return eval_node(e);
    } catch (const UseError& u) {
      fail_at(e.line, e.col, u.message);
    }
  }

  void arguments(const Expr& e, size_t first, Args& args, Kwargs& kwargs) {
    for (size_t i = first; i < e.args.size(); ++i) args.push_back(eval(*e.args[i]));
    for (const auto& kv : e.kwargs) kwargs.emplace_back(kv.first, eval(*kv.second));
  }

  static bool is_int(const Json& j) { return j.is_number_integer() || j.is_boolean(); }
  static int64_t as_int(const Json& j) { return j.is_boolean() ? (j.get<bool>() ? 1 : 0) : j.get<int64_t>(); }

  Value item(const Value& subject, const Value& key) {
    if (subject.is_undefined())
      throw UseError{fmt::format("{} (reading an item)", subject.what().empty() ? "undefined value" : subject.what())};
    if (subject.kind() == Value::Kind::kObject) {
      if (key.is_data() && key.data().is_string()) return attribute(subject, key.data().get<std::string>());
      return Value::undefined("no such item");
    }
    if (!subject.is_data()) return Value::undefined("no such item");
    const Json& j = subject.data();
    if (!key.is_data()) return Value::undefined("no such item");
    const Json& k = key.data();
    if ((j.is_array() || j.is_string()) && is_int(k)) {
      if (j.is_array()) {
        int64_t i = as_int(k), n = static_cast<int64_t>(j.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined(fmt::format("list index {} is out of range", as_int(k)));
        return subject.child(j[static_cast<size_t>(i)]);
      }
      const auto cps = code_points(j.get<std::string>());
      int64_t i = as_int(k), n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(fmt::format("string index {} is out of range", as_int(k)));
      return Value(Json(from_code_points(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1)));
    }
    if (j.is_object() && k.is_string()) {
      auto it = j.find(k.get<std::string>());
      if (it != j.end()) return subject.child(*it);
      return attribute(subject, k.get<std::string>());  // Jinja falls back to the attribute
    }
    if (k.is_string()) return attribute(subject, k.get<std::string>());
    return Value::undefined(fmt::format("no item {} in a {}", repr(k), type_name(subject)));
  }

  Value slice(const Value& subject, const Expr& e) {
    if (!subject.is_data() || !(subject.data().is_array() || subject.data().is_string()))
      throw UseError{fmt::format("cannot slice a {}", type_name(subject))};
    auto part = [&](size_t i, int64_t& out) {
      if (!e.args[i]) return false;
      const Value v = eval(*e.args[i]);
      if (v.is_data() && v.data().is_null()) return false;
      if (!v.is_data() || !is_int(v.data()))
        throw UseError{fmt::format("a slice bound is a {}, not an integer", type_name(v))};
      out = as_int(v.data());
      return true;
    };
    int64_t step = 1, start = 0, stop = 0;
    if (part(3, step) && step == 0) throw UseError{"a slice step of 0"};
    const Json& j = subject.data();
    std::vector<char32_t> cps;
    if (j.is_string()) cps = code_points(j.get<std::string>());
    const int64_t n = j.is_string() ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(j.size());
    // Python's slice.indices.
    auto clamp = [&](int64_t v, bool has, int64_t dflt) {
      if (!has) return dflt;
      if (v < 0) v += n;
      if (step > 0) return std::min(std::max<int64_t>(v, 0), n);
      return std::min(std::max<int64_t>(v, -1), n - 1);
    };
    const bool has_start = part(1, start), has_stop = part(2, stop);
    start = clamp(start, has_start, step > 0 ? 0 : n - 1);
    stop = clamp(stop, has_stop, step > 0 ? n : -1);
    std::vector<int64_t> picks;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picks.push_back(i);
    if (j.is_string()) {
      std::string out;
      for (int64_t i : picks) out += from_code_points(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1);
      return Value(Json(out));
    }
    Json out = Json::array();
    for (int64_t i : picks) out.push_back(j[static_cast<size_t>(i)]);
    return Value(out);
  }

  Value eval_node(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return Value(e.literal);
      case Expr::Kind::kName:
        return lookup(e.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        Json out = Json::array();
        for (const auto& a : e.args) out.push_back(to_data(eval(*a), "a list element"));
        return Value(out);
      }
      case Expr::Kind::kDict: {
        Json out = Json::object();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value k = eval(*e.args[i]);
          if (!k.is_data() || !k.data().is_string()) throw UseError{"a dict key must be a string"};
          out[k.data().get<std::string>()] = to_data(eval(*e.args[i + 1]), "a dict value");
        }
        return Value(out);
      }
      case Expr::Kind::kAttr:
        return attribute(eval(*e.args[0]), e.name);
      case Expr::Kind::kItem:
        return item(eval(*e.args[0]), eval(*e.args[1]));
      case Expr::Kind::kSlice:
        return slice(eval(*e.args[0]), e);
      case Expr::Kind::kCall: {
        const Value callee = eval(*e.args[0]);
        if (callee.kind() != Value::Kind::kCallable)
          throw UseError{callee.is_undefined() ? callee.what() + " (called as a function)"
                                               : fmt::format("a {} is not callable", type_name(callee))};
        Args args;
        Kwargs kwargs;
        arguments(e, 1, args, kwargs);
        try {
          return callee.callable().call(args, kwargs);
        } catch (const TemplateRaised& r) {
          fail_at(e.line, e.col, fmt::format("the template raised an exception: {}", r.message));
        }
      }
      case Expr::Kind::kFilter: {
        Args args;
        Kwargs kwargs;
        if (e.args[0])
          args.push_back(eval(*e.args[0]));
        else
          args.push_back(*hole_);
        arguments(e, 1, args, kwargs);
        return apply_filter(e.name, args, kwargs);
      }
      case Expr::Kind::kTest: {
        Args args;
        Kwargs kwargs;
        args.push_back(eval(*e.args[0]));
        arguments(e, 1, args, kwargs);
        return Value(Json(apply_test(e.name, args) != e.negated));
      }
      case Expr::Kind::kUnary: {
        const Value v = eval(*e.args[0]);
        if (e.name == "not") return Value(Json(!truthy(v)));
        if (!v.is_data() || !(v.data().is_number() || v.data().is_boolean()))
          throw UseError{fmt::format("unary {} of a {}", e.name, v.is_undefined() ? v.what() : type_name(v))};
        if (e.name == "+") return v;
        if (v.data().is_number_float()) return Value(Json(-v.data().get<double>()));
        return Value(Json(-as_int(v.data())));
      }
      case Expr::Kind::kBinary:
        return binary(e);
      case Expr::Kind::kCond: {
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined("the else of a conditional without one");
      }
    }
    throw UseError{"unknown expression"};
  }

  [[noreturn]] static void operand_error(const std::string& op, const Value& a, const Value& b) {
    const Value& bad = a.is_undefined() ? a : b;
    if (bad.is_undefined() && !bad.what().empty())
      throw UseError{fmt::format("{} (an operand of \"{}\")", bad.what(), op)};
    throw UseError{fmt::format("unsupported operand types for {}: {} and {}", op, type_name(a), type_name(b))};
  }

  static bool contains(const Value& container, const Value& needle) {
    if (!container.is_data())
      throw UseError{fmt::format("\"in\" a {}", container.is_undefined() ? container.what() : type_name(container))};
    const Json& c = container.data();
    if (c.is_string()) {
      if (!needle.is_data() || !needle.data().is_string())
        throw UseError{fmt::format("\"in <string>\" needs a string on the left, not a {}", type_name(needle))};
      return c.get_ref<const std::string&>().find(needle.data().get_ref<const std::string&>()) != std::string::npos;
    }
    if (c.is_object())
      return needle.is_data() && needle.data().is_string() && c.contains(needle.data().get<std::string>());
    if (c.is_array()) {
      for (const Json& x : c)
        if (equal(needle, container.child(x))) return true;
      return false;
    }
    throw UseError{fmt::format("\"in\" a {}", type_name(container))};
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    if (op == "or") {
      Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    const Value a = eval(*e.args[0]);
    const Value b = eval(*e.args[1]);
    if (op == "==") return Value(Json(equal(a, b)));
    if (op == "!=") return Value(Json(!equal(a, b)));
    if (op == "in") return Value(Json(contains(b, a)));
    if (op == "not in") return Value(Json(!contains(b, a)));
    if (op == "~") {
      if (a.is_undefined() && b.is_undefined()) return Value(Json(""));
      return Value(Json(to_str(a) + to_str(b)));
    }
    if (!a.is_data() || !b.is_data()) operand_error(op, a, b);
    const Json &x = a.data(), &y = b.data();
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      Args args{a, b};
      return Value(Json(apply_test(op, args)));
    }
    if (op == "+") {
      if (x.is_string() && y.is_string()) return Value(Json(x.get<std::string>() + y.get<std::string>()));
      if (x.is_array() && y.is_array()) {
        Json out = x;
        for (const Json& v : y) out.push_back(v);
        return Value(out);
      }
    }
    if (op == "*") {  // str * int, list * int
      const Json* seq = x.is_string() || x.is_array() ? &x : y.is_string() || y.is_array() ? &y : nullptr;
      const Json* count = seq == &x ? &y : &x;
      if (seq && is_int(*count)) {
        const int64_t n = std::max<int64_t>(0, as_int(*count));
        if (n * static_cast<int64_t>(seq->is_string() ? seq->get_ref<const std::string&>().size() : seq->size()) >
            static_cast<int64_t>(kMaxOutput))
          throw UseError{"the repetition is too large"};
        if (seq->is_string()) {
          std::string out;
          for (int64_t i = 0; i < n; ++i) out += seq->get_ref<const std::string&>();
          return Value(Json(out));
        }
        Json out = Json::array();
        for (int64_t i = 0; i < n; ++i)
          for (const Json& v : *seq) out.push_back(v);
        return Value(out);
      }
    }
    const bool numbers = (x.is_number() || x.is_boolean()) && (y.is_number() || y.is_boolean());
    if (!numbers) operand_error(op, a, b);
    const bool ints = is_int(x) && is_int(y);
    const double dx = x.is_boolean() ? as_int(x) : x.get<double>(), dy = y.is_boolean() ? as_int(y) : y.get<double>();
    if (op == "+") return ints ? Value(Json(as_int(x) + as_int(y))) : Value(Json(dx + dy));
    if (op == "-") return ints ? Value(Json(as_int(x) - as_int(y))) : Value(Json(dx - dy));
    if (op == "*") return ints ? Value(Json(as_int(x) * as_int(y))) : Value(Json(dx * dy));
    if (op == "/") {
      if (dy == 0) throw UseError{"division by zero"};
      return Value(Json(dx / dy));
    }
    if (op == "//" || op == "%") {
      if (dy == 0) throw UseError{op == "//" ? "integer division by zero" : "modulo by zero"};
      if (ints) {
        const int64_t p = as_int(x), q = as_int(y);
        int64_t d = p / q, m = p % q;
        if (m != 0 && ((m < 0) != (q < 0))) {  // Python floors toward negative infinity
          --d;
          m += q;
        }
        return Value(Json(op == "//" ? d : m));
      }
      const double d = std::floor(dx / dy);
      return Value(Json(op == "//" ? d : dx - d * dy));
    }
    if (op == "**") {
      if (ints && as_int(y) >= 0) {
        int64_t r = 1;
        for (int64_t i = 0; i < as_int(y); ++i) {
          r *= as_int(x);
          if (i > 64) break;
        }
        return Value(Json(r));
      }
      return Value(Json(std::pow(dx, dy)));
    }
    operand_error(op, a, b);
  }
};

}  // namespace

}  // namespace verlpp::model::jinja

namespace verlpp::model {

JinjaTemplate JinjaTemplate::parse(const std::string& source, const std::string& origin) {
  JinjaTemplate t;
  t.origin_ = origin;
  t.program_ = std::make_shared<const jinja::Program>(jinja::parse_pieces(jinja::lex(source, origin), origin));
  return t;
}

std::string JinjaTemplate::render(const nlohmann::ordered_json& context) const {
  VERLPP_CHECK(program_ != nullptr, "{}: render of a template that was never parsed", origin_);
  auto shared = std::make_shared<const nlohmann::ordered_json>(context);
  return jinja::Renderer(origin_, shared).run(program_->body);
}

bool JinjaTemplate::reads(const std::string& name) const {
  return program_ && std::binary_search(program_->names_read.begin(), program_->names_read.end(), name);
}

}  // namespace verlpp::model
