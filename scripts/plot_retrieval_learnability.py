#!/usr/bin/env python3
"""Draws docs/claims/retrieval-learnability.svg from a retrieval-learnability test-stage JSON:
one panel per architecture (attention + MLP, attention-only), every run's final test accuracy on
key-value against h (one dot per seed), the success line at 0.95 dashed, each column's success
count above it, and the pair control's runs (h = 1 and 8) in grey in the attention + MLP panel.
Plain SVG, no plotting library (the figure must be reproducible from the JSON alone).

Usage: scripts/plot_retrieval_learnability.py RESULT.json OUT.svg
"""
import json
import sys

from claims_svg import dashed, legend_dot, open_svg, panel, write

ARCHS = [("attn+MLP", "attention + MLP"), ("attn-only", "attention-only")]
HEADS = [1, 2, 4, 8]
SUCCESS = 0.95
PANEL_W, PANEL_H, MARGIN = 300, 240, 56
KEY_VALUE, CONTROL = "#2471a3", "#999999"


def main(result_path, out_path):
    with open(result_path) as f:
        r = json.load(f)
    labels = {c["id"]: c["labels"] for c in r["cells"]}
    width = MARGIN + len(ARCHS) * (PANEL_W + MARGIN)
    height = PANEL_H + 2 * MARGIN + 34
    svg = open_svg(width, height)
    for ai, (arch, title) in enumerate(ARCHS):
        x0, y0 = MARGIN + ai * (PANEL_W + MARGIN), MARGIN

        def y_of(acc):
            return y0 + PANEL_H * (1 - acc)

        def x_of(hi, offset=0.0):
            return x0 + (hi + 0.5) * PANEL_W / len(HEADS) + offset

        panel(svg, x0, y0, PANEL_W, PANEL_H, title, y_of, title_gap=24)
        dashed(svg, x0, x0 + PANEL_W, y_of(SUCCESS))
        counts = {}
        for run in r["runs"]:
            lab = labels[run["cell"]]
            if lab["arch"] != arch:
                continue
            acc = run["measures"]["final"]["test_accuracy"]
            control = lab["task"] == "pair"
            hi = HEADS.index(lab["heads"])
            jitter = ((run["seed"] * 7) % 9 - 4) * 1.2
            color = CONTROL if control else KEY_VALUE
            svg.append(f'<circle cx="{x_of(hi, (14 if control else 0) + jitter)}" '
                       f'cy="{y_of(acc)}" r="3" fill="{color}" fill-opacity="0.75"/>')
            if not control:
                wins, runs = counts.get(hi, (0, 0))
                counts[hi] = (wins + (acc >= SUCCESS), runs + 1)
        for hi, h in enumerate(HEADS):
            svg.append(f'<text x="{x_of(hi)}" y="{y0 + PANEL_H + 16}" '
                       f'text-anchor="middle">h {h}</text>')
            if hi in counts:
                wins, runs = counts[hi]
                svg.append(f'<text x="{x_of(hi)}" y="{y0 - 6}" text-anchor="middle">'
                           f'{wins}/{runs}</text>')
    ly, lx = MARGIN + PANEL_H + 44, MARGIN
    for name, color in (("key-value", KEY_VALUE), ("pair control", CONTROL)):
        legend_dot(svg, lx, ly, color, name)
        lx += 110
    svg.append(f'<text x="{lx}" y="{ly}">test accuracy per seed; on top: runs at or above '
               '0.95 (dashed)</text>')
    write(svg, out_path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
