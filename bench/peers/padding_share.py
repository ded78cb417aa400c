#!/usr/bin/env python3
"""How many of the tokens a batched `embed` computes are padding: the STS-B sentences (both
columns) tokenised with all-MiniLM-L6-v2's tokenizer (the one the peers use; headcount's
WordPiece is tested equal to it), sorted by length and cut into batches as headcount's
batch_by_length does (stable sort, consecutive chunks), each padded to its longest.

    bench/peers/.venv/bin/python bench/peers/padding_share.py [--batch 32] [--sts FILE]
"""
import argparse
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--sts", default=str(ROOT.parent / "shared" / "data" / "stsb" / "sts-test.tsv"))
    args = parser.parse_args()
    if args.batch < 1:
        parser.error(f"--batch: expected >= 1, got {args.batch}")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(ROOT / "models" / "all-MiniLM-L6-v2"))
    columns = ([], [])
    with open(args.sts, encoding="utf-8", newline="\n") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            columns[0].append(fields[5])
            columns[1].append(fields[6])
    lengths = sorted(len(tokenizer(s, truncation=True, max_length=256)["input_ids"]) for s in columns[0] + columns[1])
    real = sum(lengths)
    computed = sum(len(chunk) * max(chunk) for chunk in
                   (lengths[i:i + args.batch] for i in range(0, len(lengths), args.batch)))
    print(f"{len(lengths)} sentences, batch {args.batch}: {real} real tokens, {computed} computed, "
          f"padding {100 * (computed - real) / computed:.2f}% of computed ({computed / real:.4f}x the real ones)")


if __name__ == "__main__":
    main()
