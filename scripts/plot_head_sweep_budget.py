#!/usr/bin/env python3
"""Draws docs/claims/head-sweep-budget.svg from head-sweep-budget[-long] test-stage JSONs (E-C d),
one panel each: the gap Δ = test loss(h = 4) − test loss(h = 1) in nats/char at the panel's two
budgets, one thin line per seed (paired: the same seed at both budgets), the mean in black, zero
dashed, and the pre-registered slope per doubling with its 95 % interval under the panel.
Plain SVG, no plotting library (the figure must be reproducible from the JSON alone).

Usage: scripts/plot_head_sweep_budget.py OUT.svg RESULT.json [RESULT.json ...]
"""
import json
import sys

from claims_svg import dashed, open_svg, panel, write

W, H, M = 360, 260, 64
SEED, MEAN = "#2471a3", "#000000"


def draw_panel(svg, x0, n, lo, hi):
    budgets = n["budgets"]
    per_seed = n["per_seed"]

    def y_of(v):
        return M + H * (hi - v) / (hi - lo)

    xs = [x0 + W * 0.2, x0 + W * 0.8]
    step = 0.025  # round ticks inside the range
    ticks = [k * step for k in range(int(lo // step) + 1, int(hi // step) + 1)]
    panel(svg, x0, M, W, H, "Δ = loss(h=4) − loss(h=1), nats/char", y_of, title_gap=14, ticks=ticks)
    dashed(svg, x0, x0 + W, y_of(0.0))
    for s in per_seed:
        a, b = y_of(s["delta_short"]), y_of(s["delta_full"])
        svg.append(f'<line x1="{xs[0]}" x2="{xs[1]}" y1="{a}" y2="{b}" stroke="{SEED}" '
                   'stroke-opacity="0.6"/>')
    a, b = y_of(n["delta_short_mean"]), y_of(n["delta_full_mean"])
    svg.append(f'<line x1="{xs[0]}" x2="{xs[1]}" y1="{a}" y2="{b}" stroke="{MEAN}" stroke-width="3"/>')
    for x, steps in zip(xs, budgets):
        svg.append(f'<text x="{x}" y="{M + H + 18}" text-anchor="middle">{steps:,} steps</text>')
    low, high = n["interval"]
    svg.append(f'<text x="{x0}" y="{M + H + 40}">slope per doubling {n["slope"]:+.4f} '
               f'[{low:+.4f}, {high:+.4f}]</text>')
    svg.append(f'<text x="{x0}" y="{M + H + 56}">seeds {per_seed[0]["seed"]}–{per_seed[-1]["seed"]}; '
               'black: mean</text>')


def main(out_path, result_paths):
    numbers = []
    for path in result_paths:
        with open(path) as f:
            numbers.append(json.load(f)["verdicts"][0]["numbers"])
    values = [s[k] for n in numbers for s in n["per_seed"] for k in ("delta_short", "delta_full")]
    lo, hi = min(values + [0.0]) - 0.01, max(values + [0.0]) + 0.01
    svg = open_svg(len(numbers) * (W + M) + M + 40, H + 2 * M + 40)
    for i, n in enumerate(numbers):
        draw_panel(svg, M + i * (W + M), n, lo, hi)
    write(svg, out_path)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
