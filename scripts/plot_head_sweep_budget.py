#!/usr/bin/env python3
"""Draws docs/claims/head-sweep-budget.svg from a head-sweep-budget test-stage JSON (E-C d): the
gap Δ = test loss(h = 4) − test loss(h = 1) in nats/char at the short budget and at N, one thin
line per seed (paired: the same seed at both budgets), the mean in black, zero dashed, and the
pre-registered slope per doubling with its 95 % interval written under the panel.
Plain SVG, no plotting library (the figure must be reproducible from the JSON alone).

Usage: scripts/plot_head_sweep_budget.py RESULT.json OUT.svg
"""
import json
import sys

from claims_svg import dashed, open_svg, panel, write

W, H, M = 360, 260, 64
SEED, MEAN = "#2471a3", "#000000"


def main(result_path, out_path):
    with open(result_path) as f:
        r = json.load(f)
    n = r["verdicts"][0]["numbers"]
    budgets = n["budgets"]
    per_seed = n["per_seed"]
    values = [s[k] for s in per_seed for k in ("delta_short", "delta_full")] + [0.0]
    lo, hi = min(values) - 0.01, max(values) + 0.01
    svg = open_svg(W + 2 * M + 160, H + 2 * M + 30)

    def y_of(v):
        return M + H * (hi - v) / (hi - lo)

    xs = [M + W * 0.2, M + W * 0.8]
    step = 0.025  # round ticks inside the range
    ticks = [k * step for k in range(int(lo // step) + 1, int(hi // step) + 1)]
    panel(svg, M, M, W, H, "Δ = loss(h=4) − loss(h=1), nats/char", y_of, title_gap=14, ticks=ticks)
    dashed(svg, M, M + W, y_of(0.0))
    for s in per_seed:
        a, b = y_of(s["delta_short"]), y_of(s["delta_full"])
        svg.append(f'<line x1="{xs[0]}" x2="{xs[1]}" y1="{a}" y2="{b}" stroke="{SEED}" '
                   'stroke-opacity="0.6"/>')
    a, b = y_of(n["delta_short_mean"]), y_of(n["delta_full_mean"])
    svg.append(f'<line x1="{xs[0]}" x2="{xs[1]}" y1="{a}" y2="{b}" stroke="{MEAN}" stroke-width="3"/>')
    for x, steps in zip(xs, budgets):
        svg.append(f'<text x="{x}" y="{M + H + 18}" text-anchor="middle">{steps:,} steps</text>')
    low, high = n["interval"]
    svg.append(f'<text x="{M}" y="{M + H + 44}">slope per doubling {n["slope"]:+.4f} '
               f'[{low:+.4f}, {high:+.4f}] (seeds {per_seed[0]["seed"]}–{per_seed[-1]["seed"]}; '
               f'black: mean)</text>')
    write(svg, out_path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
