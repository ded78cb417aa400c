#!/usr/bin/env python3
"""Draws docs/claims/mqar-headdim.svg from E-D's pilot JSONs (and the test JSONs where there are
some): one panel per version, each cell's dev accuracy at every learning rate its pilot tried
(a dot per lr, shaded from light = low lr to dark = high lr), the test accuracy of each
evaluation seed as black ticks beside it, and the elimination guess H_N/N (the uniform guess
among the row's values not yet asked for) dashed. Plain SVG, no plotting library.

Usage: scripts/plot_mqar_headdim.py OUT.svg PILOT.json[,TEST.json] ...
(docs/claims/mqar-headdim.svg: v1 pilot, then v2, v3, v4 and v4-long as PILOT,TEST pairs)
"""
import json
import math
import sys

from claims_svg import dashed, open_svg, panel as framed_panel, write

CELLS = ["h=1", "h=4", "h=16", "h=32", "h=32 hd=16"]
LABELS = ["1 × 64", "4 × 16", "16 × 4", "32 × 2", "32 × 16"]
PANEL_W, PANEL_H, MARGIN = 300, 220, 56


def shade(lr):
    # 1e-4 -> light, 3e-2 -> dark, on a log scale.
    t = (math.log10(lr) + 4) / (math.log10(3e-2) + 4)
    level = int(200 - 170 * max(0.0, min(1.0, t)))
    return f"rgb({level},{level},255)"


def elimination_guess(pairs):
    return sum(1 / k for k in range(1, pairs + 1)) / pairs


def panel(svg, x0, y0, pilot, test):
    def y_of(acc):
        return y0 + PANEL_H * (1 - acc)

    def x_of(ci, offset=0.0):
        return x0 + (ci + 0.5) * PANEL_W / len(CELLS) + offset

    name = pilot["experiment"]["name"]
    task = pilot["runs"][0]["config"]["task"]
    steps = pilot["runs"][0]["config"]["train"]["steps"]
    framed_panel(svg, x0, y0, PANEL_W, PANEL_H, name, y_of, title_gap=22)
    svg.append(f'<text x="{x0 + PANEL_W / 2}" y="{y0 - 8}" text-anchor="middle">'
               f'{task["num_pairs"]} pairs, {task["keys"]} keys, seq {task["seq_len"]}, '
               f'{steps} steps</text>')
    dashed(svg, x0, x0 + PANEL_W, y_of(elimination_guess(task["num_pairs"])))
    for ci, cell in enumerate(CELLS):
        svg.append(f'<text x="{x_of(ci)}" y="{y0 + PANEL_H + 16}" text-anchor="middle">'
                   f'{LABELS[ci]}</text>')
        envelope = pilot["envelope"]["cells"].get(cell)
        if envelope:
            for point in envelope["points"]:
                svg.append(f'<circle cx="{x_of(ci, -6)}" cy="{y_of(point["metric"])}" r="4" '
                           f'fill="{shade(point["lr"])}" stroke="#335"/>')
    if test:
        for run in test["runs"]:
            ci = CELLS.index(run["cell"])
            acc = run["final"]["validation_accuracy"]
            svg.append(f'<line x1="{x_of(ci, 4)}" x2="{x_of(ci, 14)}" y1="{y_of(acc)}" '
                       f'y2="{y_of(acc)}" stroke="black" stroke-width="2"/>')


def main(out_path, specs):
    pairs = []
    for spec in specs:
        paths = spec.split(",")
        pilot = json.load(open(paths[0]))
        test = json.load(open(paths[1])) if len(paths) > 1 else None
        pairs.append((pilot, test))
    width = MARGIN + len(pairs) * (PANEL_W + MARGIN)
    height = PANEL_H + 2 * MARGIN + 40
    svg = open_svg(width, height)
    for i, (pilot, test) in enumerate(pairs):
        panel(svg, MARGIN + i * (PANEL_W + MARGIN), MARGIN, pilot, test)
    ly = MARGIN + PANEL_H + 44
    svg.append(f'<text x="{MARGIN}" y="{ly}">heads × head_dim. Dots: dev accuracy at each pilot '
               'lr (light 1e-4 … dark 3e-2); ticks: test accuracy per seed at the pick; dashed: '
               'the elimination guess H_N/N</text>')
    write(svg, out_path)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
