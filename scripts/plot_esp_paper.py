#!/usr/bin/env python3
"""Draws docs/claims/esp-paper.svg from an esp-paper test-stage JSON: for each graph (T8, K8*,
C8), every run's fraction of sequences answered right against d_model, one column of dots per
arm (H1, H2, H1+FFN), and the one-head ceiling 1 - MFAS/(2m) as a dashed line. Plain SVG, no
plotting library (the figure must be reproducible from the JSON alone).

Usage: scripts/plot_esp_paper.py RESULT.json OUT.svg
"""
import json
import sys

from claims_svg import dashed, legend_dot, open_svg, panel, write

ARMS = {"H1": ("#c0392b", -14), "H2": ("#2471a3", 0), "H1+FFN": ("#7d8c3a", 14)}
GRAPHS = ["T8", "K8*", "C8"]
WIDTHS = [16, 64, 256]
PANEL_W, PANEL_H, MARGIN = 260, 220, 50


def main(result_path, out_path):
    with open(result_path) as f:
        r = json.load(f)
    labels = {c["id"]: c["labels"] for c in r["cells"]}
    width = MARGIN + len(GRAPHS) * (PANEL_W + MARGIN)
    height = PANEL_H + 2 * MARGIN + 30
    svg = open_svg(width, height)
    for gi, graph in enumerate(GRAPHS):
        x0 = MARGIN + gi * (PANEL_W + MARGIN)
        y0 = MARGIN

        def y_of(frac):
            return y0 + PANEL_H * (1 - frac)

        def x_of(wi, offset):
            return x0 + (wi + 0.5) * PANEL_W / len(WIDTHS) + offset

        panel(svg, x0, y0, PANEL_W, PANEL_H, graph, y_of)
        for wi, d in enumerate(WIDTHS):
            svg.append(f'<text x="{x_of(wi, 0)}" y="{y0 + PANEL_H + 16}" '
                       f'text-anchor="middle">d {d}</text>')
        ceiling = None
        for run in r["runs"]:
            lab = labels[run["cell"]]
            if lab["graph"] != graph:
                continue
            m = run["measures"]["final"]
            ceiling = m["ceiling_count"] / m["sequences"]
            frac = m["correct"] / m["sequences"]
            color, offset = ARMS[lab["arm"]]
            wi = WIDTHS.index(lab["d_model"])
            jitter = ((run["seed"] * 7) % 9 - 4) * 0.8
            svg.append(f'<circle cx="{x_of(wi, offset + jitter)}" cy="{y_of(frac)}" r="3" '
                       f'fill="{color}" fill-opacity="0.7"/>')
        if ceiling is not None:
            dashed(svg, x0, x0 + PANEL_W, y_of(ceiling))
            svg.append(f'<text x="{x0 + PANEL_W - 4}" y="{y_of(ceiling) - 4}" text-anchor="end">'
                       f'one-head ceiling {ceiling:.4g}</text>')
    ly = MARGIN + PANEL_H + 40
    lx = MARGIN
    for arm, (color, _) in ARMS.items():
        legend_dot(svg, lx, ly, color, arm)
        lx += 90
    svg.append(f'<text x="{lx}" y="{ly}">fraction of the enumeration answered right, one dot per '
               'seed</text>')
    write(svg, out_path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
