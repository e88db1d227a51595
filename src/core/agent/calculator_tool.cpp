// verlpp.tools.Calculator: {"expression": "<arithmetic>"} evaluated exactly with Boost's
// arbitrary-precision rationals (no rounding: 1/3*3 is 1), so a model that learns to call it
// gets the true value of a product it cannot compute itself. Grammar: numbers (123, 1.25),
// + - * / % (integers only) and ** or ^ (integer exponents), unary signs and parentheses.
// Errors (division by zero, a syntax error with its column, a result over kMaxBits) are the
// reply's text, as any tool error is.
#include "builtin_tools.hpp"

#include <verlpp/core/error.hpp>

// GCC 12 sees Boost's small-integer storage as maybe uninitialised inside cpp_int's inlined
// arithmetic (a false positive of -Wmaybe-uninitialized in a system header's templates).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/multiprecision/cpp_int.hpp>

#include <cctype>

namespace verlpp::agent {
namespace {

using Integer = boost::multiprecision::cpp_int;
using Rational = boost::multiprecision::cpp_rational;

constexpr size_t kMaxExpression = 2000;  // characters
constexpr size_t kMaxBits = 16384;       // of a numerator or a denominator (about 4900 digits)
constexpr int kMaxDepth = 100;           // nested parentheses and unary signs

class Parser {
 public:
  explicit Parser(const std::string& text) : text_(text) {}

  Rational parse() {
    Rational value = sum(0);
    skip_space();
    if (pos_ < text_.size()) fail(fmt::format("unexpected '{}'", text_[pos_]));
    return value;
  }

 private:
  const std::string& text_;
  size_t pos_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("calculator", fmt::format("{} at column {}", what, pos_ + 1));
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool take(const char* token) {
    skip_space();
    const size_t n = std::char_traits<char>::length(token);
    if (text_.compare(pos_, n, token) != 0) return false;
    pos_ += n;
    return true;
  }
  static Rational checked(Rational value) {
    if (boost::multiprecision::msb(abs(boost::multiprecision::numerator(value)) + 1) > kMaxBits ||
        boost::multiprecision::msb(boost::multiprecision::denominator(value)) > kMaxBits)
      throw Error("calculator", fmt::format("the result is too large (over {} bits)", kMaxBits));
    return value;
  }

  Rational sum(int depth) {
    Rational value = product(depth);
    while (true) {
      if (take("+"))
        value = checked(value + product(depth));
      else if (take("-"))
        value = checked(value - product(depth));
      else
        return value;
    }
  }
  Rational product(int depth) {
    Rational value = unary(depth);
    while (true) {
      skip_space();
      if (text_.compare(pos_, 2, "**") == 0) return value;  // handled by power()
      if (take("*")) {
        value = checked(value * unary(depth));
      } else if (take("/")) {
        const size_t at = pos_;
        Rational divisor = unary(depth);
        if (divisor == 0) {
          pos_ = at;
          fail("division by zero");
        }
        value = checked(value / divisor);
      } else if (take("%")) {
        Rational divisor = unary(depth);
        if (boost::multiprecision::denominator(value) != 1 || boost::multiprecision::denominator(divisor) != 1)
          fail("% takes integers");
        if (divisor == 0) fail("modulo by zero");
        Integer a = boost::multiprecision::numerator(value), b = boost::multiprecision::numerator(divisor);
        Integer r = a % b;
        if (r != 0 && ((r < 0) != (b < 0))) r += b;  // Python's sign: that of the divisor
        value = Rational(r);
      } else {
        return value;
      }
    }
  }
  Rational unary(int depth) {
    if (depth > kMaxDepth) fail(fmt::format("nested deeper than {} levels", kMaxDepth));
    if (take("-")) return -unary(depth + 1);
    if (take("+")) return unary(depth + 1);
    return power(depth);
  }
  Rational power(int depth) {
    Rational base = primary(depth);
    if (!take("**") && !take("^")) return base;
    const size_t at = pos_;
    Rational exponent = unary(depth + 1);  // right-associative, binds tighter than a sign on its left
    if (boost::multiprecision::denominator(exponent) != 1) {
      pos_ = at;
      fail("the exponent must be an integer");
    }
    Integer e = boost::multiprecision::numerator(exponent);
    if (e > 100000 || e < -100000) fail("the exponent is too large");
    const long n = e.convert_to<long>();
    if (base == 0 && n < 0) fail("division by zero");
    const unsigned magnitude = static_cast<unsigned>(n < 0 ? -n : n);
    Integer num = boost::multiprecision::numerator(base), den = boost::multiprecision::denominator(base);
    const size_t bits = std::max(boost::multiprecision::msb(abs(num) + 1), boost::multiprecision::msb(den)) + 1;
    if (bits * magnitude > kMaxBits && !(abs(num) == 1 && den == 1))
      throw Error("calculator", fmt::format("the result is too large (over {} bits)", kMaxBits));
    Rational value(boost::multiprecision::pow(num, magnitude), boost::multiprecision::pow(den, magnitude));
    return n < 0 ? Rational(1) / value : value;
  }
  Rational primary(int depth) {
    skip_space();
    if (take("(")) {
      Rational value = sum(depth + 1);
      if (!take(")")) fail("a ')' is missing");
      return value;
    }
    const size_t begin = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    size_t digits = pos_ - begin, fraction = 0;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      const size_t dot = ++pos_;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
      fraction = pos_ - dot;
    }
    if (digits + fraction == 0) {
      pos_ = begin;
      fail(pos_ < text_.size() ? fmt::format("expected a number, got '{}'", text_[pos_]) : "expected a number");
    }
    std::string all;
    for (size_t i = begin; i < pos_; ++i)
      if (text_[i] != '.') all += text_[i];
    all.erase(0, std::min(all.find_first_not_of('0'), all.size() - 1));  // Boost reads a leading 0 as octal
    Integer scale = boost::multiprecision::pow(Integer(10), static_cast<unsigned>(fraction));
    return checked(Rational(Integer(all), scale));
  }
};

// An integer as its digits, any other rational as "p/q" in lowest terms.
std::string exact_text(const Rational& value) {
  if (boost::multiprecision::denominator(value) == 1) return boost::multiprecision::numerator(value).str();
  return boost::multiprecision::numerator(value).str() + "/" + boost::multiprecision::denominator(value).str();
}

class CalculatorTool : public Tool {
 public:
  CalculatorTool(const nlohmann::ordered_json& schema, const std::string& where) : Tool(schema, where) {}

  ToolResult call(const nlohmann::ordered_json& arguments, const nlohmann::json&) const override {
    if (!arguments.is_object() || !arguments.contains("expression") || !arguments["expression"].is_string())
      throw Error("calculator", "expected the argument \"expression\" (a string)");
    const std::string expression = arguments["expression"].get<std::string>();
    if (expression.size() > kMaxExpression)
      throw Error("calculator", fmt::format("the expression is longer than {} characters", kMaxExpression));
    return ToolResult{exact_text(Parser(expression).parse()), 0.0};
  }
};

}  // namespace

// The value of an arithmetic expression, exactly (for tests and for the demo's teacher).
std::string calculate(const std::string& expression) { return exact_text(Parser(expression).parse()); }

std::unique_ptr<Tool> make_calculator_tool(const nlohmann::json&, const nlohmann::ordered_json& schema,
                                           const std::string& where) {
  return std::make_unique<CalculatorTool>(schema, where);
}

}  // namespace verlpp::agent
