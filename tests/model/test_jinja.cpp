// The Jinja interpreter against Jinja2's documented semantics (as transformers configures it:
// trim_blocks, lstrip_blocks, loopcontrols): whitespace control, scoping, loops, filters,
// tests, Python's str()/repr() and string methods, json.dumps's layout in tojson, and errors
// that name the line and column. Each expected text is derived by hand from Jinja2's rules;
// the real chat templates are compared with @huggingface/jinja by the peer test.
#include <catch2/catch.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/model/jinja_template.hpp>

#include "../error_of.hpp"

using verlpp::model::JinjaTemplate;
using verlpp::test::error_of;
using Json = nlohmann::ordered_json;

namespace {

std::string render(const std::string& source, const Json& context = Json::object()) {
  return JinjaTemplate::parse(source, "t").render(context);
}

}  // namespace

TEST_CASE("jinja: whitespace control as transformers sets it", "[jinja]") {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before one.
  CHECK(render("{% if true %}\n  a\n  {% endif %}\nb") == "  a\nb");
  // An output tag keeps both; "-" strips all whitespace on its side, newlines included.
  CHECK(render("x\n  {{ 1 }}\ny") == "x\n  1\ny");
  CHECK(render("x  \n {{- 1 -}} \n y") == "x1y");
  // "+" turns lstrip_blocks off for that tag; a tag after text on its line is not stripped.
  CHECK(render("  {%+ if true %}a{% endif %}") == "  a");
  CHECK(render("t  {% if true %}a{% endif %}") == "t  a");
  // Comments strip like blocks; one trailing newline of the source is dropped.
  CHECK(render("a\n  {# note #}\nb\n") == "a\nb");
  CHECK(render("{% raw %}{{ not parsed }}{% endraw %}") == "{{ not parsed }}");
}

TEST_CASE("jinja: expressions with Python's semantics", "[jinja]") {
  CHECK(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }}") ==
        "3 -4 2 3.5 1024 7");
  CHECK(render("{{ 'a' ~ 1 ~ none }} {{ 'ab' * 3 }} {{ [1] + [2] }}") == "a1None ababab [1, 2]");
  // str() of data: Python's repr inside containers, True/False/None.
  CHECK(render("{{ x }}", {{"x", {{"k", "it's"}, {"n", {1.0, true, nullptr}}}}}) ==
        "{'k': \"it's\", 'n': [1.0, True, None]}");
  CHECK(render("{{ 'b' if x else 'c' }}{{ 'd' if y }}|", {{"x", Json::array()}}) == "c|");
  CHECK(render("{{ 'x' in 'axb' }} {{ 2 not in [1, 3] }} {{ 'k' in {'k': 1} }}") == "True True True");
  CHECK(render("{{ (1, 2)[1] }} {{ 'héllo'[1] }} {{ 'abc'[::-1] }} {{ [0,1,2,3,4][1:4:2] }} {{ [1,2,3][-1] }}") ==
        "2 é cba [1, 3] 3");
  CHECK(render("{{ x.a.b }}|{{ x['a']['c'] }}|{{ x.missing }}|", {{"x", {{"a", {{"b", 5}}}}}}) == "5|||");
  // and/or return an operand; comparisons chain with not.
  CHECK(render("{{ 0 or 'z' }} {{ 'y' and 3 }} {{ not 1 == 2 }}") == "z 3 True");
}

TEST_CASE("jinja: scoping, loops and namespaces", "[jinja]") {
  // A set inside a loop is gone after it; a namespace carries state out.
  CHECK(render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}") == "1");
  CHECK(
      render("{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}") ==
      "6");
  CHECK(render("{% for i in 'ab' %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
               "{{ loop.length }}{{ loop.revindex }};{% endfor %}") == "10TrueFalse22;21FalseTrue21;");
  // A loop filter runs before loop.* counts; else runs on no items; break and continue.
  CHECK(render("{% for i in range(6) if i is odd %}{{ loop.index }}:{{ i }} {% endfor %}") == "1:1 2:3 3:5 ");
  CHECK(render("{% for i in [] %}x{% else %}empty{% endfor %}") == "empty");
  CHECK(render("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}"
               "{{ i }}{% endfor %}") == "013");
  CHECK(render("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}", {{"d", {{"b", 1}, {"a", 2}}}}) == "b=1,a=2,");
  CHECK(render("{% for m in ms %}{{ loop.previtem | default('-') }}{{ m }}{% endfor %}", {{"ms", {"a", "b"}}}) ==
        "-aab");
  // Top-level sets override the context (Llama's `set messages = messages[1:]`).
  CHECK(render("{% set messages = messages[1:] %}{{ messages | length }}", {{"messages", {1, 2, 3}}}) == "2");
  CHECK(
      render(
          "{% macro greet(name, p='Hi') %}{{ p }} {{ name }}{% endmacro %}{{ greet('a') }}/{{ greet('b', p='Yo') }}") ==
      "Hi a/Yo b");
  CHECK(render("{% set block %}in{{ 1 }}{% endset %}[{{ block }}]") == "[in1]");
  CHECK(render("{% filter upper %}ab{{ 'c' }}{% endfilter %}") == "ABC");
}

TEST_CASE("jinja: filters, tests and string methods", "[jinja]") {
  CHECK(render("{{ '  a b \n' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ ' a '.strip() }}|{{ 'a,b,,c'.split(',') }}|"
               "{{ ' a  b '.split() }}|{{ 'a-b-c'.rsplit('-', 1) }}") ==
        "a b|a|a|['a', 'b', '', 'c']|['a', 'b']|['a-b', 'c']");
  CHECK(render("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'ß'.upper() }}{{ 'ÀB' | lower }}"
               "{{ 'hello world' | title }}{{ 'hELLO' | capitalize }}") == "TrueTrueSSàbHello WorldHello");
  CHECK(render("{{ [3, 1, 2] | sort | join(',') }} {{ [1, 2] | reverse | list }} {{ 'x' | length }} "
               "{{ ['a', 'b'] | first }}{{ ['a', 'b'] | last }} {{ [1, 1, 2] | unique | list }} {{ '3' | int + 1 }}") ==
        "1,2,3 [2, 1] 1 ab [1, 2] 4");
  const Json people = {{"ps", {{{"n", "a"}, {"ok", true}}, {{"n", "b"}, {"ok", false}}}}};
  CHECK(render("{{ ps | selectattr('ok') | map(attribute='n') | join }}{{ ps | rejectattr('ok') | map(attribute='n') | "
               "list }}",
               people) == "a['b']");
  CHECK(
      render("{{ undefined_name | default('d') }} {{ '' | default('e', true) }} {{ x is defined }} "
             "{{ none is none }} {{ 'a' is string }} {{ {} is mapping }} {{ 3 is divisibleby 3 }} {{ 1 is number }}") ==
      "d e False True True True True True");
  CHECK(render("{{ 'a\nb' | indent(2) }}|{{ 'a<b' | e }}|{{ 'aXbX' | replace('X', '-') }}|{{ [1, 2] | sum }}") ==
        "a\n  b|a&lt;b|a-b-|3");
}

TEST_CASE("jinja: tojson writes what Python's json.dumps writes", "[jinja]") {
  const Json ctx = {{"t", {{"name", "f"}, {"args", {{"x", 1.5}, {"s", "é\"\n"}}}, {"l", Json::array()}}}};
  CHECK(render("{{ t | tojson }}", ctx) == "{\"name\": \"f\", \"args\": {\"x\": 1.5, \"s\": \"é\\\"\\n\"}, \"l\": []}");
  CHECK(render("{{ t.args | tojson(indent=2) }}", ctx) == "{\n  \"x\": 1.5,\n  \"s\": \"é\\\"\\n\"\n}");
  CHECK(render("{{ t.args | tojson(ensure_ascii=true, sort_keys=true) }}", ctx) ==
        "{\"s\": \"\\u00e9\\\"\\n\", \"x\": 1.5}");
  CHECK(render("{{ {'b': [1, 2]} | tojson(separators=(',', ':')) }}") == "{\"b\":[1,2]}");
}

TEST_CASE("jinja: errors name the template, line and column", "[jinja]") {
  CHECK_THAT(error_of([] { render("a\n{{ raise_exception('Roles must alternate') }}"); }),
             Catch::Contains("t") && Catch::Contains("line 2, column 4") && Catch::Contains("Roles must alternate"));
  CHECK_THAT(error_of([] { JinjaTemplate::parse("{% if x %}never closed", "my.jinja"); }),
             Catch::Contains("my.jinja") && Catch::Contains("endif"));
  CHECK_THAT(error_of([] { JinjaTemplate::parse("{% include 'other' %}"); }), Catch::Contains("not supported"));
  CHECK_THAT(error_of([] { JinjaTemplate::parse("{{ x | no_such_filter }}"); }), Catch::Contains("no_such_filter"));
  CHECK_THAT(error_of([] { render("{{ x.y }}"); }), Catch::Contains("'x' is undefined"));
  CHECK_THAT(error_of([] { render("{{ 'a' + 1 }}"); }), Catch::Contains("string and integer"));
  CHECK_THAT(error_of([] { render("{% set x = 1 %}{% set x.y = 2 %}"); }), Catch::Contains("not a namespace"));
  CHECK_THAT(error_of([] { render("{{ x | tojson }}"); }), Catch::Contains("undefined"));
  // A hostile template ends with an error, not a hang or a stack overflow.
  CHECK_THAT(error_of([] { render("{% for i in range(100000000) %}{% endfor %}"); }), Catch::Contains("range"));
  CHECK_THAT(error_of([] { render("{% for i in range(5000) %}{% for j in range(5000) %}{% endfor %}{% endfor %}"); }),
             Catch::Contains("loop iterations"));
  CHECK_THAT(
      error_of([] { JinjaTemplate::parse("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}"); }),
      Catch::Contains("nests too deeply"));
  CHECK_THAT(error_of([] { render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"); }),
             Catch::Contains("nest deeper"));
  // What the template reads is known without rendering.
  const JinjaTemplate t = JinjaTemplate::parse("{% if tools %}{{ tools | length }}{% endif %}{{ messages }}");
  CHECK(t.reads("tools"));
  CHECK_FALSE(t.reads("documents"));
}
