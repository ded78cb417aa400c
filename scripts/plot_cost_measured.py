#!/usr/bin/env python3
"""Draws docs/claims/cost-measured.svg from a cost-measured JSON (E-H): one panel per series (the
seeds' layer at d_model 512, n 1,000; one training step of E-C's model; one of head-sweep's), each
measured quantity divided by its value at h = 1, against h, both axes log2: the weights and the
multiply-adds the kernels counted stay at 1 (the split is free), the exponentials grow as h (the
cost the split adds, beside score storage), and the median time shows where small heads stop being
free. Plain SVG, no plotting library (the figure must be reproducible from the JSON alone).

Usage: scripts/plot_cost_measured.py RESULT.json OUT.svg
"""
import json
import math
import sys

from claims_svg import legend_dot, open_svg, panel, write

SERIES = [("layer d512 n1000", "layer, d_model 512, n 1,000"), ("E-C step", "E-C training step"),
          ("head-sweep step", "head-sweep training step")]
QUANTITIES = [("parameters", "weights", "#2471a3"), ("macs", "multiply-adds counted", "#27ae60"),
              ("exponentials", "exponentials counted", "#c0392b"),
              ("median_seconds", "median time", "#7f8c8d")]
PANEL_W, PANEL_H, MARGIN = 240, 220, 56
Y_TOP = 64.0  # ratios from 1/2 to 64 on a log2 axis


def main(result_path, out_path):
    with open(result_path) as f:
        r = json.load(f)
    width = MARGIN + len(SERIES) * (PANEL_W + MARGIN)
    height = PANEL_H + 2 * MARGIN + 40
    svg = open_svg(width, height)
    lo, hi = math.log2(0.5), math.log2(Y_TOP)
    for si, (key, title) in enumerate(SERIES):
        rows = sorted(r["series"][key], key=lambda row: row["heads"])
        x0, y0 = MARGIN + si * (PANEL_W + MARGIN), MARGIN
        hs = [row["heads"] for row in rows]
        top = math.log2(max(hs))

        def x_of(h):
            return x0 + 10 + (PANEL_W - 20) * math.log2(h) / top

        def y_of(ratio):
            return y0 + PANEL_H * (hi - math.log2(ratio)) / (hi - lo)

        panel(svg, x0, y0, PANEL_W, PANEL_H, title, y_of, ticks=(0.5, 1, 2, 4, 8, 16, 32, 64))
        for h in hs:
            svg.append(f'<text x="{x_of(h)}" y="{y0 + PANEL_H + 16}" text-anchor="middle">{h}</text>')
        for field, _, color in QUANTITIES:
            base = rows[0][field]
            points = " ".join(f"{x_of(row['heads'])},{y_of(row[field] / base)}" for row in rows)
            # The multiply-adds lie on the weights' line: dashed, so both show.
            dash = ' stroke-dasharray="6,4"' if field == "macs" else ""
            svg.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
            for row in rows:
                svg.append(f'<circle cx="{x_of(row["heads"])}" cy="{y_of(row[field] / base)}" r="2.5" '
                           f'fill="{color}"/>')
    ly, lx = MARGIN + PANEL_H + 40, MARGIN
    for _, name, color in QUANTITIES:
        legend_dot(svg, lx, ly, color, name)
        lx += 165
    svg.append(f'<text x="{MARGIN}" y="{ly + 20}">each quantity / its value at h = 1 (log2); x: heads</text>')
    write(svg, out_path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
