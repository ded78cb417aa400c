#!/usr/bin/env python3
"""Draws docs/claims/head-sweep-tuned.svg from a head-sweep-tuned test-stage JSON: test loss
against h (log2 axis) for the main series, one thin line per seed and the mean, the head_dim-16
control at h = 32 as separate points, and the bigram baseline minus the gate margin. Plain SVG.

Usage: scripts/plot_head_sweep_tuned.py RESULT.json OUT.svg
"""
import json
import math
import sys

W, H, M = 560, 320, 60


def main(result_path, out_path):
    with open(result_path) as f:
        r = json.load(f)
    main_cells = [c for c in r["cells"] if c["labels"]["series"].startswith("main")]
    control = [c for c in r["cells"] if not c["labels"]["series"].startswith("main")]
    hs = [c["labels"]["heads"] for c in main_cells]
    values = [v for c in r["cells"] for v in c["stats"]["values"]]
    lo, hi = min(values) - 0.01, max(values) + 0.01

    def x_of(h):
        return M + (math.log2(h) - math.log2(min(hs))) / (math.log2(max(hs)) - math.log2(min(hs))) * W

    def y_of(v):
        return M + (hi - v) / (hi - lo) * H

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W + 2 * M + 120}" height="{H + 2 * M}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="100%" height="100%" fill="white"/>',
           f'<rect x="{M}" y="{M}" width="{W}" height="{H}" fill="none" stroke="#888"/>',
           f'<text x="{M + W / 2}" y="{M - 20}" text-anchor="middle" font-weight="bold">'
           'char LM, test loss (nats/char) against heads at d_model 64</text>']
    for h in hs:
        out.append(f'<text x="{x_of(h)}" y="{M + H + 18}" text-anchor="middle">{h}</text>')
    out.append(f'<text x="{M + W / 2}" y="{M + H + 38}" text-anchor="middle">heads h (head_dim 64/h)</text>')
    steps = 6
    for k in range(steps + 1):
        v = lo + (hi - lo) * k / steps
        out.append(f'<text x="{M - 6}" y="{y_of(v) + 4}" text-anchor="end">{v:.3f}</text>')
    seeds = len(main_cells[0]["stats"]["values"])
    for s in range(seeds):
        pts = " ".join(f'{x_of(c["labels"]["heads"])},{y_of(c["stats"]["values"][s])}' for c in main_cells)
        out.append(f'<polyline points="{pts}" fill="none" stroke="#2471a3" stroke-opacity="0.35"/>')
    pts = " ".join(f'{x_of(c["labels"]["heads"])},{y_of(c["stats"]["mean"])}' for c in main_cells)
    out.append(f'<polyline points="{pts}" fill="none" stroke="#2471a3" stroke-width="3"/>')
    for c in control:
        for v in c["stats"]["values"]:
            out.append(f'<circle cx="{x_of(c["labels"]["heads"]) + 8}" cy="{y_of(v)}" r="3" fill="#c0392b"/>')
    lx = M + W + 20
    out.append(f'<line x1="{lx}" x2="{lx + 20}" y1="{M + 10}" y2="{M + 10}" stroke="#2471a3" stroke-width="3"/>')
    out.append(f'<text x="{lx + 26}" y="{M + 14}">mean (thin: seeds)</text>')
    out.append(f'<circle cx="{lx + 10}" cy="{M + 30}" r="3" fill="#c0392b"/>')
    out.append(f'<text x="{lx + 26}" y="{M + 34}">h 32, head_dim 16</text>')
    out.append("</svg>")
    with open(out_path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
