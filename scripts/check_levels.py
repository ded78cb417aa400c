#!/usr/bin/env python3
"""Checks that includes in src/ and include/headcount/ point down the levels of docs/architecture.md.

Each folder of src/ has a level; each public header has a home folder (the folder it fronts).
A file may include a header whose home is on its own level or below, never above: a kernel that
includes the encoder, or the model definition that includes the training executor, fails here
(the library is one target, so the compiler would not notice). The CLI, bench, fuzz and python
trees sit above everything and are not checked. Run by ctest (`levels`) and scripts/test.sh.

Usage: scripts/check_levels.py [repo root]   (exit 1 and one line per wrong-way include)
"""
import os
import re
import sys

# Bottom to top, as docs/architecture.md draws them; folders on one line share a level.
LEVELS = [
    ["core"],
    ["runtime"],
    ["simd"],
    ["kernels"],
    ["cache"],
    ["io"],
    ["text", "cost", "model", "layers"],
    ["train", "models"],
    # distributed sits with compress: the encoder's heads split cuts its slice as pruning does.
    ["analysis", "compress", "report", "experiments", "distributed"],
]

# The folder each public header fronts.
HOME = {
    "error.h": "core", "tensor.h": "core", "version.h": "core", "isa.h": "core",
    "context.h": "runtime", "work_counters.h": "runtime",
    "attention.h": "kernels", "attention_backward.h": "kernels", "decode.h": "kernels",
    "head_stats.h": "kernels",
    "kv_cache.h": "cache",
    "npy.h": "io", "safetensors.h": "io", "gguf.h": "io", "ggml.h": "io",
    "tokenizer.h": "text", "bpe.h": "text",
    "cost.h": "cost",
    "model.h": "model",
    "multi_head_attention.h": "layers",
    "encoder.h": "models", "sts.h": "models", "decoder.h": "models", "transformer.h": "models",
    "model_files.h": "models",
    "distributed.h": "distributed",
    "compress.h": "compress", "encoder_training.h": "compress", "decoder_training.h": "compress",
    "head_analysis.h": "analysis", "decoder_heads.h": "analysis",
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def level_of(folder):
    for i, group in enumerate(LEVELS):
        if folder in group:
            return i
    return None


def home_of(header):
    """The src/ folder a quoted include belongs to, or None for third-party headers."""
    parts = header.split("/")
    if parts[0] == "headcount":
        if len(parts) == 3 and parts[1] == "train":
            return "train"
        return HOME.get(parts[1], "?" + header)
    if level_of(parts[0]) is not None:
        return parts[0]
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    problems = []
    files = []
    for base in ("src", "include/headcount"):
        for d, _, names in os.walk(os.path.join(root, base)):
            files += [os.path.join(d, n) for n in names if n.endswith((".h", ".cpp"))]
    for path in sorted(files):
        rel = os.path.relpath(path, root)
        parts = rel.split(os.sep)
        if parts[0] == "src":
            folder = parts[1]
        elif len(parts) == 4 and parts[2] == "train":
            folder = "train"
        else:
            folder = HOME.get(parts[2], "?" + rel)
        here = level_of(folder)
        if here is None:
            problems.append(f"{rel}: folder '{folder}' has no level (add it to LEVELS / HOME)")
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for header in INCLUDE.findall(text):
            if "/" not in header:  # a header beside the file: the same folder
                continue
            home = home_of(header)
            if home is None:
                continue
            there = level_of(home)
            if there is None:
                problems.append(f"{rel}: includes {header}, which has no home (add it to HOME)")
            elif there > here:
                problems.append(f"{rel} ({folder}, level {here}) includes {header} "
                                f"({home}, level {there}): an include upwards")
    for p in problems:
        print("check_levels: " + p)
    if problems:
        return 1
    print(f"check_levels: {len(files)} files, every include points down or across a level")
    return 0


if __name__ == "__main__":
    sys.exit(main())
