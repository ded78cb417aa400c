#!/usr/bin/env python3
"""Writes tests/testdata/gguf/ from models/SmolLM2-135M-Instruct.Q4_1.gguf, with references
independent of headcount (run it through scripts/make_gguf_fixtures.sh, which makes the venv):

  reader.json     the `gguf` package's view of the file: version, alignment, data offset, every
                  metadata key with its type, the scalar values, array lengths and first elements,
                  and every tensor's name, ggml type, ne (innermost first) and offset.
  dequant.json    sha256 of every tensor dequantized to float32 by gguf.quants.dequantize
                  (row-major, little-endian bytes), and the sha256 of the file itself.
  rows_*.npy      the first rows of a few tensors (Q8_0, Q4_1, F32), dequantized the same way,
                  so a mismatch shows the first element that differs.
  hf_layer0_*.npy rows of layer 0's q_proj and k_proj as transformers loads them from the GGUF
                  (dequantized, llama.cpp's Q/K row permutation undone): the mapping docs/gguf.md
                  states, checked.
  tokenizer.json  ids of the Hugging Face `tokenizers` BPE built from the file's vocabulary and
                  merges with SmolLM2's pre-tokenizer (Digits(individual_digits=True), then
                  ByteLevel's GPT-2 regex; the same as llama.cpp's "smollm" pre-tokenizer and the
                  model's own tokenizer.json), for every line of data/pride-and-prejudice.txt
                  (ids for the first lines, the first 16 hex digits of a sha256 of the ids for all) and a hostile set
                  (bytes as hex: invalid UTF-8 is decoded with errors="replace", one U+FFFD per
                  maximal ill-formed subpart, as headcount does); decode() of each; and ChatML
                  renderings by transformers' jinja of the file's tokenizer.chat_template.

It also loads the same file with transformers' AutoTokenizer(gguf_file=...) and prints every line
where its ids differ: that converter drops tokenizer.ggml.pre and splits with the GPT-2 regex
alone, so it differs from SmolLM2's tokenizer where a digit follows whitespace runs.
"""
import hashlib
import importlib.metadata
import json
import os
import random
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
OUT = os.path.join(ROOT, "tests", "testdata", "gguf")
BOOK = os.path.join(ROOT, "data", "pride-and-prejudice.txt")
BOOK_IDS_LINES = 200  # lines whose ids are stored in full; every line also as a hash of its ids
HF_ROWS = {"q_proj": [0, 1, 31, 32, 33, 63, 64, 96, 575], "k_proj": [0, 1, 32, 33, 64, 100, 191]}
ROW_TENSORS = ["token_embd.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight", "output_norm.weight"]


def field_value(field):
    """A metadata field as JSON: scalars as values, arrays as length + first elements."""
    types = [t.name.lower() for t in field.types]
    if types[0] == "array":
        contents = field.contents()
        return {"type": "array", "element_type": types[1], "count": len(field.data),
                "first": [c if not isinstance(c, float) else float(c) for c in contents[:8]]}
    value = field.contents()
    if isinstance(value, (np.floating, float)):
        value = float(value)
    elif isinstance(value, (np.integer, int, bool, np.bool_)) and not isinstance(value, str):
        value = int(value)
    return {"type": types[0], "value": value}


def write_json(name, obj):
    with open(os.path.join(OUT, name), "w") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def make_reader_and_dequant(reader, file_sha):
    write_json("reader.json", {
        "source": "gguf " + importlib.metadata.version("gguf") + " GGUFReader",
        "alignment": int(reader.alignment),
        "data_offset": int(reader.data_offset),
        "metadata": {k: field_value(f) for k, f in reader.fields.items() if not k.startswith("GGUF.")},
        "tensors": [{"name": t.name, "type": t.tensor_type.name, "ne": [int(x) for x in t.shape],
                     "offset": int(t.data_offset) - int(reader.data_offset)} for t in reader.tensors],
    })
    # gguf.quants.dequantize: numpy code written from ggml's block layouts, not from headcount.
    hashes = {}
    for t in reader.tensors:
        values = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype="<f4")
        assert values.shape == tuple(int(x) for x in reversed(t.shape)), (t.name, values.shape, t.shape)
        hashes[t.name] = hashlib.sha256(values.tobytes()).hexdigest()
        if t.name in ROW_TENSORS:
            rows = values if values.ndim == 1 else values[:2]
            np.save(os.path.join(OUT, "rows_" + t.name.replace(".", "_") + ".npy"), rows)
    # Hugging Face's layout of the same weights: transformers' GGUF loader dequantizes (gguf.quants)
    # and undoes llama.cpp's Q/K row permutation; a few rows of layer 0's q_proj and k_proj,
    # including rows i and i + head_dim/2 of a head (the pair HF's RoPE rotates together).
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(MODEL), gguf_file=os.path.basename(MODEL))
    hf_rows = {}
    for name, weight in [("q_proj", model.model.layers[0].self_attn.q_proj.weight),
                         ("k_proj", model.model.layers[0].self_attn.k_proj.weight)]:
        rows = HF_ROWS[name]
        np.save(os.path.join(OUT, f"hf_layer0_{name}_rows.npy"), weight.detach().numpy()[rows].astype("<f4"))
        hf_rows[name] = {"rows": rows, "file": f"hf_layer0_{name}_rows.npy"}
    write_json("dequant.json", {"file_sha256": file_sha, "rows": {n: "rows_" + n.replace(".", "_") + ".npy"
                                                                   for n in ROW_TENSORS},
                                "tensor_sha256": hashes, "hf_layer0": hf_rows})


def smollm2_tokenizer(reader):
    """SmolLM2's tokenizer, built from the GGUF's vocabulary and merges (Hugging Face tokenizers)."""
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    merges = [tuple(m.split(" ")) for m in reader.fields["tokenizer.ggml.merges"].contents()]
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    # token_type 3 (CONTROL): the 17 special tokens; matched in the raw text before pre-tokenizing.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])
    return tok


def hostile_cases():
    """Bytes that stress the tokenizer; each is a case of its own."""
    cases = [
        b"", b" ", b"a", b"\n", b"Hello, world!", b"Hello world 12345",
        # invalid UTF-8: stray continuation, overlong, surrogate, above U+10FFFF, truncated
        b"ab\xffcd", b"\xc0\xaf", b"\xed\xa0\x80x", b"\xf4\x90\x80\x80", b"\xe2\x82", b"caf\xc3",
        b"\x80\x81\x82 \xfe\xff", bytes(range(0x80, 0x100)),
        # control characters and unusual whitespace
        bytes(range(0, 0x80)), b"\x00\x01\x07\x1b[31mred\x1b[0m\x7f", b"\t\ttabs\r\n\r\n",
        "a\u200bb\u200dc\ufeffd".encode(), "x\u0085y\u00a0z\u3000w\u2028v\u2029u".encode(),
        # long runs of spaces, newlines, digits
        b" " * 100, b" " * 100 + b"x", b"x" + b" " * 37 + b"y", b"\n" * 20, b"1" * 200,
        b"3.14159265358979323846", b"  12  345   6789", b"0x1F2E 1e-5 -42 +7 1,000,000",
        b"a  1", b"a   1", b"\t1\n 2", "\u0661\u0662\u0663 \u2167\u00bd\u00b2 \uff11\uff12".encode(),
        # emoji, CJK, mixed scripts, combining marks
        "\U0001F600".encode(), "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466".encode(),
        "\U0001F1EB\U0001F1F7 I \u2764\ufe0f NY \U0001F44D\U0001F3FD".encode(),
        "中文分词测试，标点。".encode(), "日本語のテキストです".encode(), "한국어 텍스트".encode(),
        "Hello Мир مرحبا שלום नमस्ते Γειά".encode(), "naïve café résumé e\u0301 \u01c4 \u03a3\u0391\u03a3".encode(),
        "\ufb01 ligature \U0001D518\U0001D52B\U0001D526 math".encode(),
        # special-token strings
        b"<|im_start|>user\nHi<|im_end|>\n", b"<|endoftext|>", b"<|im_start|><|im_end|>", b"a<|im_start|>b",
        b"<|im_start", b"<|IM_START|>", b"<repo_name>x<file_sep>y<filename>", b" <|im_end|> ",
        b"<|im_start|>" * 3, b"<<|im_start|>>", b"<|endoftext|><|endoftext|>text",
        # contractions, punctuation, code, URLs
        b"I'm you're he'll we've they'd it's don't", b"I'M YOU'RE 'S", b"'s'''t",
        b"!!!???... -- a...b", b"(parenthesis) [brackets] {braces}", b"https://example.com/path?q=1&r=2",
        b"def f(x):\n    return x**2\n", b"\tif (a && b) { return; }", b"trailing   ", b"  leading",
        b"a" * 500, b"supercalifragilisticexpialidocious",
    ]
    rng = random.Random(35)
    for n in (16, 64, 256):
        cases.append(bytes(rng.randrange(256) for _ in range(n)))
        cases.append("".join(chr(rng.choice([rng.randrange(0x20, 0x7f), rng.randrange(0xa0, 0x800),
                                             rng.randrange(0x3000, 0xa000), rng.randrange(0x1f300, 0x1f700)]))
                             for _ in range(n)).encode())
    return cases


def make_tokenizer(reader):
    tok = smollm2_tokenizer(reader)
    with open(BOOK, "rb") as f:
        book = f.read().split(b"\n")
    if book and book[-1] == b"":
        book.pop()

    def encode(raw):
        return tok.encode(raw.decode("utf-8", "replace"), add_special_tokens=False).ids

    book_ids = [encode(line) for line in book]
    hostile = []
    for raw in hostile_cases():
        ids = encode(raw)
        hostile.append({"hex": raw.hex(), "ids": ids, "decoded_hex": tok.decode(ids, skip_special_tokens=False).encode().hex()})

    template = reader.fields["tokenizer.chat_template"].contents()
    import jinja2
    env = jinja2.Environment()
    chats = []
    for messages, gen in [([{"role": "user", "content": "Hello!"}], True),
                          ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
                            {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}], True),
                          ([{"role": "user", "content": "No prompt"}], False)]:
        text = env.from_string(template).render(messages=messages, add_generation_prompt=gen)
        chats.append({"messages": messages, "add_generation_prompt": gen, "text": text,
                      "ids": tok.encode(text, add_special_tokens=False).ids})

    write_json("tokenizer.json", {
        "reference": "tokenizers " + importlib.metadata.version("tokenizers") +
                     ": BPE(vocab, merges from the GGUF), Sequence[Digits(individual_digits=True), "
                     "ByteLevel(add_prefix_space=False, use_regex=True)], special tokens = token_type 3",
        "book": "data/pride-and-prejudice.txt",
        "book_lines": len(book),
        "book_ids": book_ids[:BOOK_IDS_LINES],
        # for every line: the first 16 hex digits of sha256 over its ids as little-endian int32
        "book_ids_sha256_16": [hashlib.sha256(np.asarray(ids, dtype="<i4").tobytes()).hexdigest()[:16]
                               for ids in book_ids],
        "hostile": hostile,
        "chatml": chats,
    })

    # Cross-check: transformers' own GGUF tokenizer conversion.
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(os.path.dirname(MODEL), gguf_file=os.path.basename(MODEL))
    differ = [(raw, encode(raw), hf(raw.decode("utf-8", "replace"), add_special_tokens=False)["input_ids"])
              for raw in book + hostile_cases()]
    differ = [d for d in differ if d[1] != d[2]]
    print(f"transformers AutoTokenizer(gguf_file=...) differs on {len(differ)} of "
          f"{len(book) + len(hostile_cases())} lines", file=sys.stderr)
    for raw, ours, theirs in differ[:10]:
        print(f"  {raw[:60]!r}: tokenizers {ours[:12]} transformers {theirs[:12]}", file=sys.stderr)


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(MODEL, "rb") as f:
        file_sha = hashlib.sha256(f.read()).hexdigest()
    reader = GGUFReader(MODEL)
    make_reader_and_dequant(reader, file_sha)
    make_tokenizer(reader)
    for name in sorted(os.listdir(OUT)):
        print(f"{name}: {os.path.getsize(os.path.join(OUT, name))} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
