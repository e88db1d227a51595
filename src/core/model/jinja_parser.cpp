// The Jinja parser: statements over the lexed pieces, expressions over a tag's tokens, with
// Jinja2's precedence (conditional, or, and, not, comparisons and `in`, + -, ~, * / // %, **,
// unary minus, then postfix: attributes, subscripts, calls, filters and tests).
#include "jinja_internal.hpp"

#include <verlpp/core/error.hpp>

#include <algorithm>
#include <set>

namespace verlpp::model::jinja {
namespace {

// Deep enough for any real template; a hostile one fails instead of overflowing the stack.
constexpr int kMaxNesting = 200;

class Parser {
 public:
  Parser(std::vector<Piece> pieces, const std::string& origin) : pieces_(std::move(pieces)), origin_(origin) {}

  Program run() {
    Program program;
    std::string end;
    program.body = body({}, end);
    program.names_read.assign(names_.begin(), names_.end());
    return program;
  }

 private:
  std::vector<Piece> pieces_;
  const std::string& origin_;
  size_t piece_ = 0;
  const std::vector<Token>* tokens_ = nullptr;
  size_t at_ = 0;
  int nesting_ = 0;
  std::set<std::string> names_;

  [[noreturn]] void fail(int line, int col, const std::string& message) const {
    VERLPP_FAIL_AT(origin_, "line {}, column {}: {}", line, col, message);
  }
  [[noreturn]] void fail_here(const std::string& message) const {
    const Token& t = peek();
    fail(t.line, t.col, message);
  }

  // ---- tokens of the current tag ----
  const Token& peek(size_t ahead = 0) const {
    const size_t i = std::min(at_ + ahead, tokens_->size() - 1);
    return (*tokens_)[i];
  }
  const Token& next() {
    const Token& t = peek();
    if (at_ + 1 < tokens_->size()) ++at_;
    return t;
  }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::kOp && peek(ahead).text == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::kName && peek(ahead).text == name;
  }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool accept_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::kEnd:
        return "the end of the tag";
      case Token::Kind::kString:
        return "a string";
      case Token::Kind::kInt:
      case Token::Kind::kFloat:
        return "the number " + t.text;
      default:
        return "\"" + t.text + "\"";
    }
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail_here(fmt::format("expected \"{}\", found {}", op, describe(peek())));
  }
  std::string expect_name(const char* what) {
    if (peek().kind != Token::Kind::kName) fail_here(fmt::format("expected {}, found {}", what, describe(peek())));
    return next().text;
  }
  void expect_end() {
    if (peek().kind != Token::Kind::kEnd)
      fail_here(fmt::format("expected the end of the tag, found {}", describe(peek())));
  }

  ExprPtr make(Expr::Kind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->col = at.col;
    return e;
  }

  // ---- statements ----

  // Statements until a {% tag %} whose keyword is in `ends` (stored in `end`); at the top
  // level (`ends` empty) until the last piece.
  Body body(const std::vector<std::string>& ends, std::string& end) {
    Body out;
    if (++nesting_ > kMaxNesting) fail(pieces_[piece_ - 1].line, pieces_[piece_ - 1].col, "blocks nest too deeply");
    while (piece_ < pieces_.size()) {
      Piece& p = pieces_[piece_++];
      if (p.kind == Piece::Kind::kText) {
        Stmt s;
        s.kind = Stmt::Kind::kText;
        s.text = std::move(p.text);
        out.push_back(std::move(s));
        continue;
      }
      tokens_ = &p.tokens;
      at_ = 0;
      if (p.kind == Piece::Kind::kOutput) {
        Stmt s;
        s.kind = Stmt::Kind::kOutput;
        s.line = p.line;
        s.col = p.col;
        s.expr = expression();
        expect_end();
        out.push_back(std::move(s));
        continue;
      }
      const Token& keyword = peek();
      if (keyword.kind != Token::Kind::kName) fail_here("expected a statement name after \"{%\"");
      if (std::find(ends.begin(), ends.end(), keyword.text) != ends.end()) {
        end = keyword.text;
        next();
        --nesting_;
        return out;
      }
      out.push_back(statement(p));
    }
    if (!ends.empty())
      fail(pieces_.empty() ? 1 : pieces_.back().line, pieces_.empty() ? 1 : pieces_.back().col,
           fmt::format("the template ends inside a block: \"{{% {} %}}\" missing", ends.back()));
    --nesting_;
    return out;
  }

  Stmt statement(const Piece& p) {
    Stmt s;
    s.line = p.line;
    s.col = p.col;
    const std::string keyword = next().text;
    std::string end;
    if (keyword == "if") {
      ExprPtr cond = expression();
      expect_end();
      for (;;) {
        Body b = body({"elif", "else", "endif"}, end);
        s.branches.emplace_back(std::move(cond), std::move(b));
        if (end == "endif") break;
        if (end == "else") {
          expect_end();
          Body tail = body({"endif"}, end);
          expect_end();
          s.branches.emplace_back(nullptr, std::move(tail));
          break;
        }
        cond = expression();
        expect_end();
      }
      expect_end();
      s.kind = Stmt::Kind::kIf;
    } else if (keyword == "for") {
      s.kind = Stmt::Kind::kFor;
      do {
        s.targets.push_back(expect_name("a loop variable"));
      } while (accept_op(","));
      if (!accept_name("in")) fail_here(fmt::format("expected \"in\", found {}", describe(peek())));
      s.expr = expression(/*allow_cond=*/false);
      if (accept_name("if")) s.filter = expression(false);
      if (accept_name("recursive")) fail_here("recursive loops are not supported");
      expect_end();
      s.body = body({"else", "endfor"}, end);
      expect_end();
      if (end == "else") {
        s.else_body = body({"endfor"}, end);
        expect_end();
      }
    } else if (keyword == "set") {
      s.targets.push_back(expect_name("a variable name"));
      if (accept_op(".")) {
        s.attr = expect_name("an attribute name");
      } else {
        while (accept_op(",")) s.targets.push_back(expect_name("a variable name"));
      }
      if (accept_op("=")) {
        s.kind = Stmt::Kind::kSet;
        s.expr = expression();
        if (is_op(",")) {  // set a, b = 1, 2
          ExprPtr tuple = make(Expr::Kind::kTuple, peek());
          tuple->args.push_back(std::move(s.expr));
          while (accept_op(",")) tuple->args.push_back(expression());
          s.expr = std::move(tuple);
        }
        expect_end();
      } else {
        if (s.targets.size() != 1 || !s.attr.empty()) fail_here("a {% set %} block assigns one plain name");
        expect_end();
        s.kind = Stmt::Kind::kSetBlock;
        s.body = body({"endset"}, end);
        expect_end();
      }
    } else if (keyword == "macro") {
      s.kind = Stmt::Kind::kMacro;
      s.attr = expect_name("a macro name");
      expect_op("(");
      while (!is_op(")")) {
        std::string name = expect_name("a parameter name");
        ExprPtr def;
        if (accept_op("=")) def = expression();
        s.params.emplace_back(std::move(name), std::move(def));
        if (!accept_op(",")) break;
      }
      expect_op(")");
      expect_end();
      s.body = body({"endmacro"}, end);
      expect_end();
    } else if (keyword == "filter") {
      s.kind = Stmt::Kind::kFilterBlock;
      s.expr = filter_chain(nullptr);
      expect_end();
      s.body = body({"endfilter"}, end);
      expect_end();
    } else if (keyword == "break" || keyword == "continue") {
      s.kind = keyword == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      expect_end();
    } else if (keyword == "generation") {  // transformers' assistant-mask marker: renders its body
      s.kind = Stmt::Kind::kBlock;
      expect_end();
      s.body = body({"endgeneration"}, end);
      expect_end();
    } else if (keyword == "include" || keyword == "extends" || keyword == "import" || keyword == "from" ||
               keyword == "block" || keyword == "call" || keyword == "with" || keyword == "autoescape" ||
               keyword == "do") {
      fail(p.line, p.col, fmt::format("\"{{% {} %}}\" is not supported in chat templates", keyword));
    } else {
      fail(p.line, p.col, fmt::format("unknown statement \"{{% {} %}}\"", keyword));
    }
    return s;
  }

  // ---- expressions ----

  struct Depth {
    Parser& p;
    explicit Depth(Parser& parser) : p(parser) {
      if (++p.nesting_ > kMaxNesting) p.fail_here("the expression nests too deeply");
    }
    ~Depth() { --p.nesting_; }
  };

  ExprPtr expression(bool allow_cond = true) {
    Depth depth(*this);
    ExprPtr value = or_expr();
    if (allow_cond && is_name("if")) {
      const Token& at = next();
      ExprPtr e = make(Expr::Kind::kCond, at);
      e->args.push_back(or_expr());
      e->args.push_back(std::move(value));
      e->args.push_back(accept_name("else") ? expression() : nullptr);
      return e;
    }
    return value;
  }

  ExprPtr binary(ExprPtr left, const Token& at, std::string op, ExprPtr right) {
    ExprPtr e = make(Expr::Kind::kBinary, at);
    e->name = std::move(op);
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  ExprPtr or_expr() {
    ExprPtr left = and_expr();
    while (is_name("or")) {
      const Token& at = next();
      left = binary(std::move(left), at, "or", and_expr());
    }
    return left;
  }
  ExprPtr and_expr() {
    ExprPtr left = not_expr();
    while (is_name("and")) {
      const Token& at = next();
      left = binary(std::move(left), at, "and", not_expr());
    }
    return left;
  }
  ExprPtr not_expr() {
    if (is_name("not")) {
      Depth depth(*this);
      const Token& at = next();
      ExprPtr e = make(Expr::Kind::kUnary, at);
      e->name = "not";
      e->args.push_back(not_expr());
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr left = math1();
    for (;;) {
      const Token& at = peek();
      std::string op;
      if (at.kind == Token::Kind::kOp && (at.text == "==" || at.text == "!=" || at.text == "<" || at.text == "<=" ||
                                          at.text == ">" || at.text == ">="))
        op = at.text;
      else if (is_name("in"))
        op = "in";
      else if (is_name("not") && is_name("in", 1))
        op = "not in";
      else
        return left;
      next();
      if (op == "not in") next();
      left = binary(std::move(left), at, op, math1());
    }
  }
  ExprPtr math1() {
    ExprPtr left = concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = next();
      left = binary(std::move(left), at, at.text, concat());
    }
    return left;
  }
  ExprPtr concat() {
    ExprPtr left = math2();
    while (is_op("~")) {
      const Token& at = next();
      left = binary(std::move(left), at, "~", math2());
    }
    return left;
  }
  ExprPtr math2() {
    ExprPtr left = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = next();
      left = binary(std::move(left), at, at.text, power());
    }
    return left;
  }
  ExprPtr power() {
    ExprPtr left = unary();
    while (is_op("**")) {
      const Token& at = next();
      left = binary(std::move(left), at, "**", unary());
    }
    return left;
  }
  ExprPtr unary() {
    if (is_op("-") || is_op("+")) {
      Depth depth(*this);
      const Token& at = next();
      ExprPtr e = make(Expr::Kind::kUnary, at);
      e->name = at.text;
      e->args.push_back(unary());
      return e;
    }
    return filter_chain(postfix(primary()));
  }

  // Filters (`| name(args)`) and tests (`is [not] name(args)`) after a value; `value` null:
  // a {% filter %} block's chain, applied to the block's text.
  ExprPtr filter_chain(ExprPtr value) {
    bool first = value == nullptr;
    for (;;) {
      if (first || is_op("|")) {
        const Token& at = first ? peek() : next();
        first = false;
        ExprPtr e = make(Expr::Kind::kFilter, at);
        e->name = expect_name("a filter name");
        while (accept_op(".")) e->name += "." + expect_name("a filter name");
        if (!has_filter(e->name)) fail(at.line, at.col, fmt::format("unknown filter \"{}\"", e->name));
        e->args.push_back(std::move(value));
        if (accept_op("(")) call_arguments(*e);
        value = std::move(e);
      } else if (is_name("is")) {
        const Token& at = next();
        ExprPtr e = make(Expr::Kind::kTest, at);
        e->negated = accept_name("not");
        if (peek().kind == Token::Kind::kName)
          e->name = next().text;
        else if (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">="))
          e->name = next().text;
        else
          fail_here(fmt::format("expected a test name, found {}", describe(peek())));
        if (!has_test(e->name)) fail(at.line, at.col, fmt::format("unknown test \"{}\"", e->name));
        e->args.push_back(std::move(value));
        if (accept_op("(")) {
          call_arguments(*e);
        } else if (peek().kind == Token::Kind::kString || peek().kind == Token::Kind::kInt ||
                   peek().kind == Token::Kind::kFloat ||
                   (peek().kind == Token::Kind::kName && !is_name("and") && !is_name("or") && !is_name("if") &&
                    !is_name("else") && !is_name("in") && !is_name("not") && !is_name("is"))) {
          e->args.push_back(postfix(primary()));  // `x is divisibleby 3`, `x is sameas y`
        }
        value = std::move(e);
      } else {
        return value;
      }
    }
  }

  void call_arguments(Expr& e) {
    while (!is_op(")")) {
      if (peek().kind == Token::Kind::kName && is_op("=", 1)) {
        std::string name = next().text;
        next();
        e.kwargs.emplace_back(std::move(name), expression());
      } else {
        if (!e.kwargs.empty()) fail_here("a positional argument follows a keyword argument");
        e.args.push_back(expression());
      }
      if (!accept_op(",")) break;
    }
    expect_op(")");
  }

  ExprPtr postfix(ExprPtr value) {
    for (;;) {
      if (is_op(".")) {
        const Token& at = next();
        ExprPtr e = make(Expr::Kind::kAttr, at);
        if (peek().kind == Token::Kind::kInt) {  // foo.0 is foo[0]
          e->kind = Expr::Kind::kItem;
          e->args.push_back(std::move(value));
          ExprPtr index = make(Expr::Kind::kLiteral, peek());
          index->literal = next().number;
          e->args.push_back(std::move(index));
        } else {
          e->name = expect_name("an attribute name");
          e->args.push_back(std::move(value));
        }
        value = std::move(e);
      } else if (is_op("[")) {
        const Token& at = next();
        ExprPtr parts[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!is_op(":") && !is_op("]")) parts[k] = expression();
          if (k < 2 && accept_op(":")) {
            slice = true;
          } else {
            break;
          }
        }
        expect_op("]");
        ExprPtr e = make(slice ? Expr::Kind::kSlice : Expr::Kind::kItem, at);
        e->args.push_back(std::move(value));
        if (!slice && !parts[0]) fail(at.line, at.col, "an empty subscript");
        e->args.push_back(std::move(parts[0]));
        if (slice) {
          e->args.push_back(std::move(parts[1]));
          e->args.push_back(std::move(parts[2]));
        }
        value = std::move(e);
      } else if (is_op("(")) {
        const Token& at = next();
        ExprPtr e = make(Expr::Kind::kCall, at);
        e->line = value->line;  // errors point at the callee's name
        e->col = value->col;
        e->args.push_back(std::move(value));
        call_arguments(*e);
        value = std::move(e);
      } else {
        return value;
      }
    }
  }

  ExprPtr primary() {
    Depth depth(*this);
    const Token& t = peek();
    switch (t.kind) {
      case Token::Kind::kString: {
        ExprPtr e = make(Expr::Kind::kLiteral, t);
        std::string s;
        while (peek().kind == Token::Kind::kString) s += next().text;  // adjacent literals join
        e->literal = s;
        return e;
      }
      case Token::Kind::kInt:
      case Token::Kind::kFloat: {
        ExprPtr e = make(Expr::Kind::kLiteral, t);
        e->literal = next().number;
        return e;
      }
      case Token::Kind::kName: {
        ExprPtr e = make(Expr::Kind::kLiteral, t);
        const std::string& n = t.text;
        if (n == "true" || n == "True") {
          e->literal = true;
        } else if (n == "false" || n == "False") {
          e->literal = false;
        } else if (n == "none" || n == "None") {
          e->literal = nullptr;
        } else {
          e->kind = Expr::Kind::kName;
          e->name = n;
          names_.insert(n);
        }
        next();
        return e;
      }
      case Token::Kind::kOp: {
        if (t.text == "(") {
          next();
          if (accept_op(")")) return make(Expr::Kind::kTuple, t);
          ExprPtr first = expression();
          if (accept_op(")")) return first;
          ExprPtr e = make(Expr::Kind::kTuple, t);
          e->args.push_back(std::move(first));
          while (accept_op(",")) {
            if (is_op(")")) break;
            e->args.push_back(expression());
          }
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          next();
          ExprPtr e = make(Expr::Kind::kList, t);
          while (!is_op("]")) {
            e->args.push_back(expression());
            if (!accept_op(",")) break;
          }
          expect_op("]");
          return e;
        }
        if (t.text == "{") {
          next();
          ExprPtr e = make(Expr::Kind::kDict, t);
          while (!is_op("}")) {
            e->args.push_back(expression());
            expect_op(":");
            e->args.push_back(expression());
            if (!accept_op(",")) break;
          }
          expect_op("}");
          return e;
        }
        break;
      }
      case Token::Kind::kEnd:
        break;
    }
    fail_here(fmt::format("expected a value, found {}", describe(t)));
  }
};

}  // namespace

Program parse_pieces(std::vector<Piece> pieces, const std::string& origin) {
  return Parser(std::move(pieces), origin).run();
}

}  // namespace verlpp::model::jinja
