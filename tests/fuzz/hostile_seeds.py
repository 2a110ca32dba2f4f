#!/usr/bin/env python3
"""Writes the hostile-input seeds of the fuzz corpus (tests/fuzz/corpus/<target>/), one file per case, so that
every case the parsers and the API must refuse is replayed by models_tests and fuzzed from by tools/fuzz.sh.

    python3 tests/fuzz/hostile_seeds.py [CORPUS_DIR]      (default: tests/fuzz/corpus beside this script)

The formats are those of tests/fuzz/fuzz_entries.h. Seeds found by fuzzing are added to the same folders by hand;
this script only rewrites the files it names.
"""
import json
import os
import struct
import sys

CORPUS = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    with open(os.path.join(CORPUS, target, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(header, data=b""):
    """[u64 header length][header][data]; `header` is text (it may be invalid JSON on purpose)."""
    h = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(h)) + h + data


def entry(name, dtype, shape, begin, end):
    return json.dumps(name) + ":" + json.dumps({"dtype": dtype, "shape": shape, "data_offsets": [begin, end]})


def many(n, duplicate_last=False):
    names = ["t%07d" % (0 if duplicate_last and i == n - 1 else i) for i in range(n)]
    body = ",".join(entry(names[i], "F32", [1], 4 * i, 4 * i + 4) for i in range(n))
    return safetensors("{" + body + "}", bytes(4 * n))


def deep(n, closed=True):
    return "[" * n + ("]" * n if closed else "")


# ---- safetensors_file: the file reader (inputs up to a few MB) ----------------------------------------------------
F = "safetensors_file"
write(F, "deep-shape-60000.safetensors",
      safetensors('{"a":{"dtype":"F32","shape":' + deep(60000) + ',"data_offsets":[0,4]}}', bytes(4)))
write(F, "deep-offsets-60000.safetensors",
      safetensors('{"a":{"dtype":"F32","shape":[1],"data_offsets":' + deep(60000) + '}}', bytes(4)))
write(F, "deep-unclosed-100000.safetensors", safetensors('{"a":' + deep(100000, closed=False)))
write(F, "deep-metadata-objects.safetensors", safetensors('{"__metadata__":' + '{"k":' * 30000 + '""' + "}" * 30001))
write(F, "many-tensors-30000.safetensors", many(30000))
write(F, "many-tensors-duplicate-last.safetensors", many(5000, duplicate_last=True))
write(F, "valid-2d.safetensors",
      safetensors("{" + entry("w", "BF16", [4, 3], 0, 24) + "," + entry("x", "F32", [2, 2], 24, 40) + "}",
                  bytes(range(40))))
write(F, "empty", b"")
write(F, "seven-bytes", b"\x10\x00\x00\x00\x00\x00\x00")
write(F, "length-past-file.safetensors", struct.pack("<Q", 1 << 40) + b"{}")

# ---- safetensors: the in-memory reader (inputs up to 64 KB) -------------------------------------------------------
S = "safetensors"
write(S, "overflow-shape.safetensors",
      safetensors("{" + entry("a", "F32", [4294967296, 4294967296, 4294967296], 0, 8) + "}", bytes(8)))
write(S, "dimension-past-int64.safetensors", safetensors("{" + entry("a", "F32", [2**63], 0, 8) + "}", bytes(8)))
write(S, "zero-dim-huge.safetensors", safetensors("{" + entry("a", "F32", [0, 2**62, 2**62], 0, 0) + "}"))
write(S, "negative-dim.safetensors", safetensors("{" + entry("a", "F32", [-2], 0, 8) + "}", bytes(8)))
write(S, "offsets-past-u64.safetensors",
      safetensors('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551620]}}', bytes(4)))
write(S, "control-char-names.safetensors",
      safetensors("{" + json.dumps("__metadata__") + ":" + json.dumps({"note\x1b[2J": "v\x1b]0;title\x07\u009b"}) +
                  "," + entry("evil\x1b]0;title\x07name\u009b", "F32", [1], 0, 4) + "}", bytes(4)))
write(S, "long-name.safetensors", safetensors("{" + entry("n" * 5000, "F64", [1], 0, 8) + "}", bytes(8)))
write(S, "deep-17.safetensors", safetensors('{"a":{"dtype":"F32","shape":' + deep(15) + ',"data_offsets":[0,4]}}'))
write(S, "duplicate-inner-key.safetensors",
      safetensors('{"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}', bytes(4)))
write(S, "duplicate-metadata.safetensors", safetensors('{"__metadata__":{},"__metadata__":{}}'))
write(S, "many-dims.safetensors", safetensors("{" + entry("a", "U8", [1] * 4000, 0, 1) + "}", bytes(1)))
write(S, "trailing-garbage.safetensors", safetensors("{}  x"))
write(S, "number-past-double.safetensors", safetensors('{"a":{"dtype":"F32","shape":[1e400],"data_offsets":[0,4]}}'))

# ---- set: one --set argument per line, on the tiny spec -----------------------------------------------------------
T = "set"
write(T, "valid", "run.tokens=512\nprecision.recipe=mxfp8\nmodel.block[1][0].layernorm_mlp.activation=swiglu\n")
write(T, "huge-hidden", "model.hidden=1048576\nmodel.block[0][0].layernorm_linear.out=1048576\n"
      "model.block[0][1].linear.out=1048576\nmodel.block[1][0].layernorm_mlp.ffn=1048576\nrun.tokens=65536\n")
write(T, "many-layers", "model.layers=100000\n")
write(T, "tokens-past-limit", "run.tokens=1073741825\n")
write(T, "long-value", "model.hidden=" + "7" * 5000 + "\n")
write(T, "long-path", "k" * 5000 + "=1\n")
write(T, "control-chars", 'name="evil\\x1b]0;title\\x07"\nrun.mode=\x1b[31mtrain\n')
write(T, "deep-yaml", "model.hidden=" + deep(5000) + "\n")
write(T, "no-equals", "model.hidden\n=1\nmodel..hidden=1\n")
write(T, "bad-index", "model.block[x][0].linear.out=1\nmodel.block[99][0].linear.out=1\nmodel.block[]=1\n")
write(T, "weights-device", "weights=/dev/zero\n")

# ---- output_set: lines "FLAG PATH" ("input PATH": an input of the run); an odd first byte commits ------------------
O = "output_set"
write(O, "plain", "--output o.safetensors\n--json m.json\n--save-weights w.safetensors\n")
write(O, "plain-dropped", "x\n--output o.safetensors\n--json m.json\n")
write(O, "devices", "--output /dev/null\n--json /dev/stdout\n--save-weights /dev/zero\n")
write(O, "fifo-like", "--json /proc/self/fd/1\n--output /dev/fd/0\n")
write(O, "stdout", "--json -\n--output -\n")
write(O, "same-twice", "--output a\n--json a\n")
write(O, "same-through-dots", "--output ./a\n--json a\n")
write(O, "input-as-output", "input in.safetensors\n--output in.safetensors\ninput /etc/hostname\n--json /etc/hostname\n")
write(O, "directories", "--json /tmp\n--output .\n--save-weights ..\n")
write(O, "missing-directory", "--output /nonexistent/dir/o.safetensors\n")
write(O, "long-name", "--output " + "a" * 300 + "\n")
write(O, "control-chars", "--output \x1b[2J\x07\n--json \x9b31m\n")


# ---- forward: byte 0 = rank | mode << 6, byte 1 = dtype index, int64 dimensions, then the bytes ---------------------
def request(dims, mode=0, dtype=0, data=b""):
    return bytes([len(dims) | mode << 6, dtype]) + b"".join(struct.pack("<q", d) for d in dims) + data


W = "forward"
f32 = struct.pack("<64f", *[0.1 * i for i in range(64)])
write(W, "valid", request([4, 16], data=f32))
write(W, "valid-staged-bf16", request([4, 16], mode=2, dtype=1, data=bytes(128)))
write(W, "valid-train", request([4, 16], mode=3, data=f32))
write(W, "train-on-inference-engine", request([4, 16], mode=1, data=f32))
write(W, "shape-2p62-by-256", request([1 << 62, 256]))
write(W, "shape-product-wraps", request([1 << 40, 1 << 40], dtype=1))
write(W, "huge-hidden-no-bytes", request([4, 1 << 20]))
write(W, "negative", request([-4, 16]))
write(W, "zero-then-negative", request([0, -16]))
write(W, "zero-tokens", request([0, 16]))
write(W, "bytes-short", request([4, 16], data=bytes(100)))
write(W, "one-dim", request([64], data=f32[:256]))
write(W, "three-dims", request([2, 2, 16], data=f32))
write(W, "tokens-not-divisible", request([3, 16], data=f32[:192]))
write(W, "f64", request([4, 16], dtype=3, data=bytes(512)))
write(W, "escape-dtype", request([4, 16], dtype=7, data=f32))
write(W, "nan", request([4, 16], data=struct.pack("<f", float("nan")) * 64))
