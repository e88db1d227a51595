// The tokenizer test corpus: diverse strings from a fixed seed (the same list on every run and
// every machine). Categories: English with contractions, code, digits and arithmetic, whitespace
// runs and newlines, CJK, emoji (ZWJ, skin tones, flags), accents (composed and decomposed),
// other scripts, special tokens inside text, the empty string, long runs, random mixes of all
// these, and random code points from many Unicode blocks.

// mulberry32: a small deterministic PRNG.
export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = ("the quick brown fox jumps over lazy dog I you we they it's don't can't won't we're you've " +
  "I'm she'll he'd They'RE YOU'VE WE'LL I'D It'S DON'T tokenizer model gradient policy reward value " +
  "Hello World hello world Python C++ LibTorch GRPO PPO advantage KL-divergence O'Neil rock'n'roll " +
  "naïve café résumé façade coöperate Ærøskøbing São Paulo Zürich straße ŒUVRE déjà-vu").split(" ");
const CODE = [
  "int main(int argc, char** argv) {\n  return 0;\n}\n",
  "def f(x):\n    return x ** 2  # square\n\n\nprint(f(3))",
  "for (size_t i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}",
  "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
  "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
  "const x = (a, b) => a?.b ?? `${b}`;\r\n",
  "if x != y and not z:\n        raise ValueError(f'bad {x!r}')",
  "#include <vector>\n#define MAX(a,b) ((a)>(b)?(a):(b))\n",
  "    \n    \n\t\t\n",
  "std::vector<std::pair<int, float>> v{{1, 2.5f}};",
  "$ ls -la | grep '^d' && echo \"done\" >> /tmp/log.txt",
  "<div class=\"x\">&nbsp;&lt;b&gt;</div>",
];
const CJK = ["你好，世界！", "机器学习是人工智能的一个分支。", "日本語のテキストとカタカナ、ひらがな。",
  "한국어 문장입니다. 안녕하세요!", "漢字かな交じり文", "中文标点：“引号”《书名》【括号】……",
  "数学：１２３＋４５６＝５７９", "龍と鳳凰", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ"];
const EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷🇯🇵", "❤️", "🧑🏿‍💻", "🎉🎉🎉", "☕", "🏳️‍🌈", "1️⃣", "🤖 + 🧠 = ✨"];
const ACCENTS = ["é", "e\u0301", "ñ", "n\u0303", "Å", "A\u030a", "ǅ", "ﬁ", "Ω", "Ω", "Việt Nam", "Tiếng Việt",
  "a\u0300\u0301\u0302", "Ångström", "ḱ\u0323", "\u1e9b\u0323", "한", "\u1112\u1161\u11ab"];
const SCRIPTS = ["Привет, мир!", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया",
  "สวัสดีชาวโลก", "Բարեւ", "ሰላም", "ᚠᚢᚦ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟙𝟚𝟛", "Ⅻ", "½ ¾ ⅞", "٣٤٥", "१२३"];
const SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
  "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
  "<|im_start", "im_end|>", "<|im_end|>>", "<<|im_start|>", "<|fim_prefix|>"];
const SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n ", "\u00a0", "\u3000", "\u2028", "\u0085",
  "\u2003", "\u200b", "\ufeff", "\f", "\v", "\t \t", "      \n"];
const PUNCT = [".", ",", "!", "?", "...", "'", "\"", "(", ")", "[", "]", "{", "}", "-", "--", "—", "_", "/",
  "\\", "@", "#", "$", "%", "^", "&", "*", "+", "=", "<", ">", "|", "~", "`", ":", ";", "'s", "'S", "''"];

// Code point ranges for random strings: long-assigned blocks only (Unicode <= 14), so the
// character classes agree between the peer's ICU and the system's; unassigned points inside
// them are unassigned in every version both could use.
const RANGES = [[0x20, 0x7e], [0xa0, 0x24f], [0x300, 0x36f], [0x370, 0x3ff], [0x400, 0x4ff], [0x590, 0x5ff],
  [0x600, 0x6ff], [0x900, 0x97f], [0xe00, 0xe7f], [0x1100, 0x11ff], [0x2000, 0x206f], [0x2070, 0x209f],
  [0x20a0, 0x20bf], [0x2100, 0x218f], [0x2190, 0x22ff], [0x2460, 0x257f], [0x3000, 0x30ff], [0x4e00, 0x9fa5],
  [0xac00, 0xd7a3], [0xff00, 0xffef], [0x1d400, 0x1d7ff], [0x1f300, 0x1f64f], [0x1f900, 0x1f9ff], [0x10000, 0x1007f],
  [0x9, 0xd], [0x85, 0x85]];

function pick(r, list) { return list[Math.floor(r() * list.length)]; }
function int(r, lo, hi) { return lo + Math.floor(r() * (hi - lo + 1)); }

function sentence(r) {
  const n = int(r, 1, 14);
  let s = "";
  for (let i = 0; i < n; ++i) s += (i ? pick(r, [" ", " ", " ", "  ", ", ", "\n"]) : "") + pick(r, WORDS);
  return s + pick(r, [".", "!", "?", "", "\n", " "]);
}
function digits(r) {
  const kind = int(r, 0, 5);
  if (kind === 0) return String(int(r, 0, 1e9)) + String(int(r, 0, 1e9));
  if (kind === 1) return `${int(r, 0, 999)} + ${int(r, 0, 999)} = ${int(r, 0, 1999)}`;
  if (kind === 2) return `${(r() * 1e4).toFixed(int(r, 0, 6))}e-${int(r, 1, 30)}`;
  if (kind === 3) return `What is ${int(r, 0, 99)}*${int(r, 0, 99)}?\nAnswer: ${int(r, 0, 9801)}`;
  if (kind === 4) return `${int(r, 1, 9)},${String(int(r, 0, 999)).padStart(3, "0")},${String(int(r, 0, 999)).padStart(3, "0")}`;
  return `v${int(r, 0, 9)}.${int(r, 0, 99)}.${int(r, 0, 999)}-rc${int(r, 1, 5)} (2024-0${int(r, 1, 9)}-1${int(r, 0, 9)})`;
}
function whitespace(r) {
  let s = "";
  const n = int(r, 1, 8);
  for (let i = 0; i < n; ++i) s += pick(r, SPACES) + (r() < 0.5 ? pick(r, WORDS) : "");
  return s;
}
function random_code_points(r) {
  let s = "";
  const n = int(r, 1, 24);
  for (let i = 0; i < n; ++i) {
    const [lo, hi] = pick(r, RANGES);
    s += String.fromCodePoint(int(r, lo, hi));
  }
  return s;
}
function mix(r) {
  const pools = [WORDS, CODE, CJK, EMOJI, ACCENTS, SCRIPTS, SPECIALS, SPACES, PUNCT];
  let s = "";
  const n = int(r, 1, 12);
  for (let i = 0; i < n; ++i) s += pick(r, pick(r, pools));
  return s;
}
function with_specials(r) {
  let s = "";
  const n = int(r, 1, 6);
  for (let i = 0; i < n; ++i) s += pick(r, [sentence(r), pick(r, SPECIALS), pick(r, SPACES), pick(r, CJK)]);
  return s;
}

// `count` strings (at least the fixed edge cases) from `seed`.
export function make_corpus(seed = 20241129, count = 2400) {
  const r = rng(seed);
  const out = ["", " ", "\n", "a", "  ", "\t\n", "'s", "'S", "'ll've", "don't", "I'M", "x'Re",
    "<|im_start|>", "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><|endoftext|>", "a<|im_end|>b", "<think>\nreasoning\n</think>\n\nanswer",
    " ".repeat(300), "\n".repeat(50), " \n".repeat(40), "a".repeat(700), "的".repeat(400),
    "0123456789".repeat(30), "😀".repeat(100), "e\u0301".repeat(50), "!@#$%^&*()".repeat(20),
    "x" + " ".repeat(100) + "y", "\r\n\r\n", "\u00a0\u00a0b", "abc   ", "   abc", "\u3000\u3000テスト"];
  const makers = [sentence, digits, whitespace, mix, with_specials, random_code_points, random_code_points,
    (r) => pick(r, CODE) + (r() < 0.5 ? pick(r, CODE) : ""), (r) => pick(r, CJK) + pick(r, SPACES) + pick(r, CJK),
    (r) => pick(r, EMOJI) + pick(r, WORDS) + pick(r, EMOJI), (r) => pick(r, ACCENTS) + pick(r, ACCENTS) + sentence(r),
    (r) => pick(r, SCRIPTS) + " " + pick(r, SCRIPTS)];
  while (out.length < count) out.push(pick(r, makers)(r));
  return out;
}
