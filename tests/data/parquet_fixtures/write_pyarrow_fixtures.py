"""Writes the pyarrow fixtures of tests/data/test_parquet.cpp: the writer verl's own preprocessing
uses (pandas' to_parquet and datasets go through pyarrow). Two tables, one in verl's schema and one
covering the physical and logical types with nulls at every level, under every combination of
codec, dictionary encoding and data page version (small pages, row groups of 7 rows), plus
pandas' DataFrame.to_parquet with its defaults and a file with pyarrow's explicit DELTA and
BYTE_STREAM_SPLIT column encodings. Beside them: <table>.expected.json (the records written) and
manifest.json. Run where pyarrow and pandas are installed:

    python3 write_pyarrow_fixtures.py OUT_DIR
    python3 write_pyarrow_fixtures.py OUT_DIR --expected-only   # the JSON alone (no pyarrow needed)
"""
import json
import os
import struct
import sys

out = sys.argv[1]
expected_only = "--expected-only" in sys.argv
os.makedirs(out, exist_ok=True)
if not expected_only:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq
else:  # stand-ins for the type constructors, enough to define the schemas below
    class _Any:
        def __getattr__(self, name):
            return lambda *args, **kwargs: None
    pa = _Any()

message = pa.struct([("role", pa.string()), ("content", pa.string())])
verl_schema = pa.schema([
    ("data_source", pa.string()),
    ("prompt", pa.list_(message)),
    ("ability", pa.string()),
    ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
    ("extra_info", pa.struct([("answer", pa.string()), ("index", pa.int64()), ("question", pa.string()),
                              ("split", pa.string())])),
])


def verl_rows():
    rows = []
    for i in range(24):
        a, b = (i * 41) % 100, (i * 13 + 7) % 100
        gsm = i % 3 == 1
        question = f"Ann reads {a} pages, then {b} more. How many pages?" if gsm else f"{a}+{b}="
        prompt = [{"role": "user", "content": question + (' Output the final answer after "####".' if gsm else "")}]
        if i % 5 == 2:
            prompt.insert(0, {"role": "system", "content": "Think, then answer. 答えだけ 🙂"})
        rows.append({
            "data_source": "openai/gsm8k" if gsm else "arith",
            "prompt": prompt,
            "ability": "math",
            "reward_model": {"ground_truth": str(a + b), "style": "rule"},
            "extra_info": {"answer": None if i % 7 == 4 else f"{a}+{b}={a + b}\n#### {a + b}", "index": i,
                           "question": question, "split": "test" if i % 4 == 3 else "train"},
        })
    return rows


types_schema = pa.schema([
    ("b", pa.bool_()), ("i8", pa.int8()), ("i32", pa.int32()), ("u32", pa.uint32()), ("i64", pa.int64()),
    ("u64", pa.uint64()), ("f32", pa.float32()), ("f64", pa.float64()), ("s", pa.string()), ("bin", pa.binary()),
    ("fixed", pa.binary(4)), ("ints", pa.list_(pa.int32())), ("nested", pa.list_(pa.list_(pa.string()))),
    ("record", pa.struct([("a", pa.int32()), ("inner", pa.struct([("x", pa.string()), ("y", pa.float64())])),
                          ("tags", pa.list_(pa.string()))])),
    ("records", pa.list_(pa.struct([("k", pa.string()), ("v", pa.list_(pa.int64()))]))),
    ("counts", pa.map_(pa.string(), pa.int32())),
])


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def types_rows():
    texts = ["", "plain", "ünïcödé", "数学", "emoji 🚀", 'quote " and \\ backslash', "line\nbreak"]
    rows = []
    for i in range(30):
        def nul(k):
            return i % k == k - 1
        rows.append({
            "b": None if nul(7) else i % 3 == 0,
            "i8": None if nul(5) else (i * 37) % 256 - 128,
            "i32": None if nul(6) else (-1 if i % 2 else 1) * ((i * 104729) % 2147483647),
            "u32": None if nul(8) else 4000000000 - i * 3,
            "i64": None if nul(9) else (-1 if i % 2 else 1) * (2**62 - i * 1000003),
            "u64": None if nul(10) else 2**63 + i * 7,
            "f32": None if nul(4) else f32(i * 1.1 - 20.25),
            "f64": None if nul(11) else (i - 17) / 3 * 1e-7,
            "s": None if nul(3) else texts[i % len(texts)] + (f" #{i}" if i > 20 else ""),
            "bin": None if nul(6) else f"bytes-{i % 4}".encode(),
            "fixed": None if nul(5) else f"f{i:03d}".encode(),
            "ints": None if i % 9 == 0 else [] if i % 9 == 1 else [None if k == 2 else k * i for k in range(i % 5)],
            "nested": None if i % 7 == 0 else [] if i % 7 == 1 else [[f"a{i}", None], [], None, [f"b{i}"]][:1 + i % 4],
            "record": None if i % 8 == 0 else {
                "a": None if i % 3 == 0 else i,
                "inner": None if i % 5 == 0 else {"x": None if i % 2 else f"x{i}", "y": i / 4},
                "tags": None if i % 4 == 0 else [f"t{k}" for k in range(i % 3)],
            },
            "records": None if i % 10 == 4 else [
                None if (k == 1 and i % 2) else {"k": f"k{k}", "v": None if k == 0 else [i * 100 + j for j in range(k)]}
                for k in range(i % 4)],
            "counts": None if i % 6 == 0 else [(f"c{k}", None if k == 1 else i + k) for k in range(i % 4)],
        })
    return rows


MAP_COLUMNS = {"counts"}  # written from lists of (key, value) pairs


def to_json(value):
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, dict):
        return {k: {kk: to_json(vv) for kk, vv in v} if k in MAP_COLUMNS and v is not None else to_json(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [to_json(e) for e in value]
    return value


manifest = []
tables = {"pyarrow_verl": (verl_schema, verl_rows()), "pyarrow_types": (types_schema, types_rows())}
for name, (schema, rows) in tables.items():
    with open(os.path.join(out, f"{name}.expected.json"), "w") as f:
        json.dump([to_json(r) for r in rows], f, ensure_ascii=False, indent=1)
        f.write("\n")
    if expected_only:
        continue
    table = pa.Table.from_pylist(rows, schema=schema)
    for codec in ["NONE", "SNAPPY", "GZIP", "ZSTD"]:
        for dictionary in [True, False]:
            for version in ["1.0", "2.0"]:
                file = f"{name}_{codec.lower()}_{'dict' if dictionary else 'plain'}_v{version[0]}.parquet"
                pq.write_table(table, os.path.join(out, file), compression=codec, use_dictionary=dictionary,
                               data_page_version=version, row_group_size=7, data_page_size=64, write_batch_size=3,
                               write_statistics=False)
                manifest.append({"file": file, "table": name, "codec": "UNCOMPRESSED" if codec == "NONE" else codec,
                                 "dictionary": dictionary, "page_version": int(version[0]), "small_pages": True,
                                 "row_group_rows": 7})
    # pyarrow's own choice of encodings, spelled out: DELTA for integers and text, BYTE_STREAM_SPLIT
    # for floats.
    if name == "pyarrow_types":
        present = {"i32": "DELTA_BINARY_PACKED", "i64": "DELTA_BINARY_PACKED", "s": "DELTA_BYTE_ARRAY",
                   "bin": "DELTA_LENGTH_BYTE_ARRAY", "f32": "BYTE_STREAM_SPLIT", "f64": "BYTE_STREAM_SPLIT"}
    else:
        present = {"data_source": "DELTA_BYTE_ARRAY", "ability": "DELTA_LENGTH_BYTE_ARRAY",
                   "extra_info.index": "DELTA_BINARY_PACKED", "prompt.list.element.content": "DELTA_BYTE_ARRAY"}
    file = f"{name}_encodings.parquet"
    pq.write_table(table, os.path.join(out, file), compression="ZSTD", use_dictionary=False, column_encoding=present,
                   row_group_size=11)
    manifest.append({"file": file, "table": name, "codec": "ZSTD", "dictionary": False, "page_version": 1,
                     "small_pages": False, "row_group_rows": 11, "column_encoding": present})

if expected_only:
    sys.exit(0)
# pandas, as verl's preprocessing writes (Dataset.to_parquet / DataFrame.to_parquet, defaults).
pd.DataFrame(verl_rows()).to_parquet(os.path.join(out, "pyarrow_verl_pandas.parquet"))
manifest.append({"file": "pyarrow_verl_pandas.parquet", "table": "pyarrow_verl", "codec": "SNAPPY",
                 "dictionary": True, "page_version": 1, "small_pages": False, "row_group_rows": 0,
                 "writer": "pandas.DataFrame.to_parquet"})
with open(os.path.join(out, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=1)
    f.write("\n")
print(f"wrote {len(manifest)} files with pyarrow {pa.__version__}, pandas {pd.__version__}")
