#!/usr/bin/env python3
"""Draws docs/claims/esp-paper.svg from an esp-paper test-stage JSON: for each graph (T8, K8*,
C8), every run's fraction of sequences answered right against d_model, one column of dots per
arm (H1, H2, H1+FFN), and the one-head ceiling 1 - MFAS/(2m) as a dashed line. Plain SVG, no
plotting library (the figure must be reproducible from the JSON alone).

Usage: scripts/plot_esp_paper.py RESULT.json OUT.svg
"""
import json
import sys

ARMS = {"H1": ("#c0392b", -14), "H2": ("#2471a3", 0), "H1+FFN": ("#7d8c3a", 14)}
GRAPHS = ["T8", "K8*", "C8"]
WIDTHS = [16, 64, 256]
PANEL_W, PANEL_H, MARGIN = 260, 220, 50


def main(result_path, out_path):
    with open(result_path) as f:
        r = json.load(f)
    labels = {c["id"]: c["labels"] for c in r["cells"]}
    svg = []
    width = MARGIN + len(GRAPHS) * (PANEL_W + MARGIN)
    height = PANEL_H + 2 * MARGIN + 30
    svg.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
               'font-family="sans-serif" font-size="12">')
    svg.append(f'<rect width="{width}" height="{height}" fill="white"/>')
    for gi, graph in enumerate(GRAPHS):
        x0 = MARGIN + gi * (PANEL_W + MARGIN)
        y0 = MARGIN

        def y_of(frac):
            return y0 + PANEL_H * (1 - frac)

        def x_of(wi, offset):
            return x0 + (wi + 0.5) * PANEL_W / len(WIDTHS) + offset

        svg.append(f'<rect x="{x0}" y="{y0}" width="{PANEL_W}" height="{PANEL_H}" fill="none" '
                   'stroke="#888"/>')
        svg.append(f'<text x="{x0 + PANEL_W / 2}" y="{y0 - 10}" text-anchor="middle" '
                   f'font-weight="bold">{graph}</text>')
        for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
            svg.append(f'<line x1="{x0 - 4}" x2="{x0}" y1="{y_of(tick)}" y2="{y_of(tick)}" '
                       'stroke="#888"/>')
            svg.append(f'<text x="{x0 - 6}" y="{y_of(tick) + 4}" text-anchor="end">{tick:g}</text>')
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
            svg.append(f'<line x1="{x0}" x2="{x0 + PANEL_W}" y1="{y_of(ceiling)}" '
                       f'y2="{y_of(ceiling)}" stroke="black" stroke-dasharray="5,4"/>')
            svg.append(f'<text x="{x0 + PANEL_W - 4}" y="{y_of(ceiling) - 4}" text-anchor="end">'
                       f'one-head ceiling {ceiling:.4g}</text>')
    ly = MARGIN + PANEL_H + 40
    lx = MARGIN
    for arm, (color, _) in ARMS.items():
        svg.append(f'<circle cx="{lx}" cy="{ly - 4}" r="4" fill="{color}"/>')
        svg.append(f'<text x="{lx + 8}" y="{ly}">{arm}</text>')
        lx += 90
    svg.append(f'<text x="{lx}" y="{ly}">fraction of the enumeration answered right, one dot per '
               'seed</text>')
    svg.append('</svg>')
    with open(out_path, "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
