// Writes the parquet fixtures that tests/data/test_parquet.cpp reads, with a writer independent of
// verlpp: tables built with apache-arrow, written by arrow-rs (the npm package parquet-wasm) under
// every combination of codec, dictionary encoding and data page version, with small pages and
// several row groups, plus the same data in one row group and one page per column. Beside the
// .parquet files it writes, for each table, the JSON of the records it was built from
// (<table>.expected.json) and manifest.json (each file, its table and its settings); the test
// compares the reader's rows with those records field for field.
//
//   npm ci && node write_fixtures.mjs [--arith DATA_DIR]
//
// --arith DATA_DIR also converts the demo's arith_train.jsonl and arith_val.jsonl (as `verlpp
// train` writes them under <default_local_dir>/data) into arith_train.parquet / arith_val.parquet.
import * as arrow from 'apache-arrow';
import * as pq from 'parquet-wasm';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const out = path.join(here, 'files');
fs.mkdirSync(out, { recursive: true });

const utf8 = () => new arrow.Utf8();
const field = (name, type, nullable = true) => new arrow.Field(name, type, nullable);
const struct = (...fields) => new arrow.Struct(fields);
const list = (type) => new arrow.List(field('element', type));

// verl's schema: a chat prompt as list<struct{role, content}>, reward_model and extra_info as
// structs (what datasets.Dataset.to_parquet writes for verl's examples/data_preprocess scripts).
const message = struct(field('role', utf8()), field('content', utf8()));
const verlTypes = {
  data_source: utf8(),
  prompt: list(message),
  ability: utf8(),
  reward_model: struct(field('ground_truth', utf8()), field('style', utf8())),
  extra_info: struct(field('answer', utf8()), field('index', new arrow.Int64()), field('question', utf8()),
                     field('split', utf8())),
};

function verlRows() {
  const rows = [];
  for (let i = 0; i < 24; ++i) {
    const a = (i * 37) % 100, b = (i * 59 + 11) % 100;
    const gsm = i % 3 === 2;
    const question = gsm ? `Tom has ${a} apples and buys ${b} more. How many apples does he have?` : `${a}+${b}=`;
    const prompt = [{ role: 'user', content: gsm ? `${question} Let's think step by step and output the final answer after "####".` : question }];
    if (i % 4 === 1) prompt.unshift({ role: 'system', content: 'You are a careful calculator. Réponds brièvement 🙂.' });
    rows.push({
      data_source: gsm ? 'openai/gsm8k' : 'arith',
      prompt,
      ability: gsm ? 'math' : 'arithmetic',
      reward_model: { ground_truth: String(a + b), style: 'rule' },
      extra_info: {
        answer: i % 5 === 3 ? null : `${a} + ${b} = ${a + b}\n#### ${a + b}`,
        index: BigInt(i),
        question,
        split: i % 6 === 5 ? 'test' : 'train',
      },
    });
  }
  return rows;
}

// Every physical type, logical annotations, and nulls at every level of nesting.
const typesTypes = {
  b: new arrow.Bool(),
  i8: new arrow.Int8(),
  i32: new arrow.Int32(),
  u32: new arrow.Uint32(),
  i64: new arrow.Int64(),
  u64: new arrow.Uint64(),
  f32: new arrow.Float32(),
  f64: new arrow.Float64(),
  s: utf8(),
  bin: new arrow.Binary(),
  fixed: new arrow.FixedSizeBinary(4),
  ints: list(new arrow.Int32()),
  nested: list(list(utf8())),
  record: struct(field('a', new arrow.Int32()), field('inner', struct(field('x', utf8()), field('y', new arrow.Float64()))),
                 field('tags', list(utf8()))),
  records: list(struct(field('k', utf8()), field('v', list(new arrow.Int64())))),
  counts: new arrow.Map_(field('entries', struct(field('key', utf8(), false), field('value', new arrow.Int32())), false)),
};

function typesRows() {
  const rows = [];
  const texts = ['', 'plain', 'ünïcödé', '数学', 'emoji 🚀', 'quote " and \\ backslash', 'line\nbreak'];
  for (let i = 0; i < 30; ++i) {
    const nul = (k) => i % k === k - 1;
    rows.push({
      b: nul(7) ? null : i % 3 === 0,
      i8: nul(5) ? null : ((i * 37) % 256) - 128,
      i32: nul(6) ? null : (i % 2 ? -1 : 1) * (i * 104729) % 2147483647,
      u32: nul(8) ? null : 4000000000 - i * 3,
      i64: nul(9) ? null : (i % 2 ? -1n : 1n) * (2n ** 62n - BigInt(i) * 1000003n),
      u64: nul(10) ? null : 2n ** 63n + BigInt(i) * 7n,
      f32: nul(4) ? null : Math.fround(i * 1.1 - 20.25),
      f64: nul(11) ? null : (i - 17) / 3 * 1e-7,
      s: nul(3) ? null : texts[i % texts.length] + (i > 20 ? ` #${i}` : ''),
      bin: nul(6) ? null : new TextEncoder().encode(`bytes-${i % 4}`),
      fixed: nul(5) ? null : new TextEncoder().encode(`f${String(i).padStart(3, '0')}`),
      ints: i % 9 === 0 ? null : i % 9 === 1 ? [] : Array.from({ length: i % 5 }, (_, k) => (k === 2 ? null : k * i)),
      nested: i % 7 === 0 ? null : i % 7 === 1 ? [] : [[`a${i}`, null], [], null, [`b${i}`]].slice(0, 1 + (i % 4)),
      record: i % 8 === 0 ? null : {
        a: i % 3 === 0 ? null : i,
        inner: i % 5 === 0 ? null : { x: i % 2 ? null : `x${i}`, y: i / 4 },
        tags: i % 4 === 0 ? null : Array.from({ length: i % 3 }, (_, k) => `t${k}`),
      },
      records: i % 10 === 4 ? null : Array.from({ length: i % 4 }, (_, k) => (k === 1 && i % 2 ? null : {
        k: `k${k}`, v: k === 0 ? null : Array.from({ length: k }, (_, j) => BigInt(i * 100 + j)),
      })),
      counts: i % 6 === 0 ? null : new Map(Array.from({ length: i % 4 }, (_, k) => [`c${k}`, k === 1 ? null : i + k])),
    });
  }
  return rows;
}

function arithTypes() {
  return {
    data_source: utf8(),
    prompt: list(message),
    ability: utf8(),
    reward_model: struct(field('ground_truth', utf8()), field('style', utf8())),
    extra_info: struct(field('index', new arrow.Int64()), field('split', utf8())),
    response: utf8(),
  };
}

function readArith(file) {
  return fs.readFileSync(file, 'utf8').split('\n').filter((l) => l.trim()).map((l) => {
    const row = JSON.parse(l);
    row.extra_info.index = BigInt(row.extra_info.index);
    return row;
  });
}

function makeTable(types, rows) {
  const columns = {};
  for (const [name, type] of Object.entries(types)) columns[name] = arrow.vectorFromArray(rows.map((r) => r[name]), type);
  return new arrow.Table(columns);
}

// The records as JSON, as a JSONL row of the same data holds them: 64-bit integers exactly,
// byte arrays as their text, maps as objects.
function toJson(value) {
  if (value === null || value === undefined) return null;
  if (typeof value === 'bigint') return { __bigint: value.toString() };
  if (value instanceof Uint8Array) return new TextDecoder().decode(value);
  if (value instanceof Map) return Object.fromEntries([...value].map(([k, v]) => [k, toJson(v)]));
  if (Array.isArray(value)) return value.map(toJson);
  if (typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, toJson(v)]));
  return value;
}
function jsonText(rows) {
  return JSON.stringify(rows.map(toJson), null, 1).replace(/\{\s*"__bigint": "(-?\d+)"\s*\}/g, '$1') + '\n';
}

function write(table, name, settings) {
  let b = new pq.WriterPropertiesBuilder()
    .setCompression(pq.Compression[settings.codec])
    .setDictionaryEnabled(settings.dictionary)
    .setWriterVersion(settings.page_version === 2 ? pq.WriterVersion.V2 : pq.WriterVersion.V1)
    .setCreatedBy('verlpp fixtures (parquet-wasm 0.8.0)')
    .setStatisticsEnabled(pq.EnabledStatistics.None);
  if (settings.small_pages) b = b.setDataPageSizeLimit(96).setWriteBatchSize(3).setDictionaryPageSizeLimit(256);
  if (settings.row_group_rows) b = b.setMaxRowGroupSize(settings.row_group_rows);
  const bytes = pq.writeParquet(pq.Table.fromIPCStream(arrow.tableToIPC(table, 'stream')), b.build());
  fs.writeFileSync(path.join(out, name), bytes);
  return bytes.length;
}

const manifest = [];
const tables = { verl: [verlTypes, verlRows()], types: [typesTypes, typesRows()] };
for (const [tableName, [types, rows]] of Object.entries(tables)) {
  const table = makeTable(types, rows);
  fs.writeFileSync(path.join(out, `${tableName}.expected.json`), jsonText(rows));
  for (const codec of ['UNCOMPRESSED', 'SNAPPY', 'GZIP', 'ZSTD'])
    for (const dictionary of [true, false])
      for (const page_version of [1, 2]) {
        const settings = { codec, dictionary, page_version, small_pages: true, row_group_rows: 7 };
        const name = `${tableName}_${codec.toLowerCase()}_${dictionary ? 'dict' : 'plain'}_v${page_version}.parquet`;
        manifest.push({ file: name, table: tableName, bytes: write(table, name, settings), ...settings });
      }
  const settings = { codec: 'SNAPPY', dictionary: true, page_version: 1, small_pages: false, row_group_rows: 0 };
  const name = `${tableName}_default.parquet`;
  manifest.push({ file: name, table: tableName, bytes: write(table, name, settings), ...settings });
}
// The base of the dictionary-index corruption test: one required text column of two values, one
// uncompressed page of dictionary indices at the end of the only column chunk.
{
  const rows = Array.from({ length: 8 }, (_, i) => ({ letter: i % 2 ? 'b' : 'a' }));
  const letters = arrow.vectorFromArray(rows.map((r) => r.letter), utf8());
  const schema = new arrow.Schema([field('letter', utf8(), false)]);
  const batch = new arrow.RecordBatch(schema, arrow.makeData({ type: new arrow.Struct(schema.fields), length: rows.length,
                                                               nullCount: 0, children: [letters.data[0]] }));
  const requiredTable = new arrow.Table([batch]);
  fs.writeFileSync(path.join(out, 'letters.expected.json'), jsonText(rows));
  const settings = { codec: 'UNCOMPRESSED', dictionary: true, page_version: 1, small_pages: false, row_group_rows: 0 };
  manifest.push({ file: 'letters.parquet', table: 'letters', bytes: write(requiredTable, 'letters.parquet', settings),
                  ...settings });
}
// Codecs verlpp does not read, for the refusal tests.
for (const codec of ['LZ4_RAW', 'BROTLI']) {
  const settings = { codec, dictionary: true, page_version: 1, small_pages: false, row_group_rows: 0 };
  const name = `verl_${codec.toLowerCase()}.parquet`;
  manifest.push({ file: name, table: 'verl', bytes: write(makeTable(verlTypes, verlRows()), name, settings), ...settings });
}

const arithAt = process.argv.indexOf('--arith');
if (arithAt > 0) {
  const dir = process.argv[arithAt + 1];
  for (const split of ['train', 'val']) {
    const rows = readArith(path.join(dir, `arith_${split}.jsonl`));
    const settings = { codec: 'SNAPPY', dictionary: true, page_version: 1, small_pages: false, row_group_rows: 0 };
    const name = `arith_${split}.parquet`;
    manifest.push({ file: name, table: `arith_${split}`, bytes: write(makeTable(arithTypes(), rows), name, settings),
                    ...settings });
  }
} else {
  for (const old of fs.readdirSync(out).filter((f) => f.startsWith('arith_')))
    manifest.push(JSON.parse(fs.readFileSync(path.join(out, 'manifest.json'), 'utf8')).find((m) => m.file === old));
}
fs.writeFileSync(path.join(out, 'manifest.json'), JSON.stringify(manifest.filter(Boolean), null, 1) + '\n');
console.log(`wrote ${manifest.length} parquet files to ${out}`);
