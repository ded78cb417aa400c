#!/usr/bin/env python3
"""Draws docs/claims/scale-envelope.svg from E-E's test-stage JSON: one panel per W_Q/W_K init
(0.02, 0.125), each arm's test loss per seed (dots) and mean (bar) on a shared loss axis, the arms
grouped by h, with each arm's pilot lr and its attention logit spread at init (mean over seeds)
written under it. Plain SVG, no plotting library (reproducible from the JSON alone).

Usage: scripts/plot_scale_envelope.py RESULT.json OUT.svg
"""
import json
import sys

from claims_svg import open_svg, panel, write

INITS = [("0.02", "W_Q, W_K init 0.02"), ("0.125", "W_Q, W_K init 0.125 = 1/sqrt(d_model)")]
ARMS = [(1, "none"), (1, "1/sqrt(dk)"), (16, "none"), (16, "1/sqrt(dk)"), (16, "1/sqrt(d)")]
PANEL_W, PANEL_H, MARGIN = 330, 240, 64
COLORS = {"none": "#c0392b", "1/sqrt(dk)": "#2471a3", "1/sqrt(d)": "#27ae60"}


def main(result_path, out_path):
    with open(result_path) as f:
        r = json.load(f)
    losses, stds = {}, {}
    for run in r["runs"]:
        losses.setdefault(run["cell"], []).append(run["final"]["validation_loss"])
        init = run.get("measures", {}).get("init", {}).get("attention", {})
        if "logit_std" in init:
            stds.setdefault(run["cell"], []).append(init["logit_std"])
    lrs = {c: v.get("lr") for c, v in r.get("envelope", {}).get("cells", {}).items()} \
        if isinstance(r.get("envelope", {}).get("cells"), dict) else {}
    values = [x for v in losses.values() for x in v]
    lo, hi = min(values) - 0.02, max(values) + 0.02
    ticks = [round(lo + (hi - lo) * k / 4, 3) for k in range(5)]
    width = MARGIN + len(INITS) * (PANEL_W + MARGIN)
    height = PANEL_H + 2 * MARGIN + 60
    svg = open_svg(width, height)
    for pi, (init, title) in enumerate(INITS):
        x0, y0 = MARGIN + pi * (PANEL_W + MARGIN), MARGIN

        def y_of(v):
            return y0 + PANEL_H * (hi - v) / (hi - lo)

        def x_of(ai, offset=0.0):
            return x0 + (ai + 0.5) * PANEL_W / len(ARMS) + offset

        panel(svg, x0, y0, PANEL_W, PANEL_H, title, y_of, ticks=ticks)
        for ai, (h, scale) in enumerate(ARMS):
            cell = f"h={h} {scale} init={init}"
            if cell not in losses:
                continue
            color = COLORS[scale]
            for k, v in enumerate(losses[cell]):
                svg.append(f'<circle cx="{x_of(ai, (k - 2) * 3)}" cy="{y_of(v)}" r="3" '
                           f'fill="{color}" fill-opacity="0.7"/>')
            mean = sum(losses[cell]) / len(losses[cell])
            svg.append(f'<line x1="{x_of(ai, -14)}" x2="{x_of(ai, 14)}" y1="{y_of(mean)}" '
                       f'y2="{y_of(mean)}" stroke="{color}" stroke-width="2"/>')
            lines = [f"h {h}", scale]
            if cell in stds:
                lines.append(f"std {sum(stds[cell]) / len(stds[cell]):.2g}")
            if lrs.get(cell):
                lines.append(f"lr {lrs[cell]:g}")
            for li, text in enumerate(lines):
                svg.append(f'<text x="{x_of(ai)}" y="{y0 + PANEL_H + 14 + 12 * li}" '
                           f'text-anchor="middle" font-size="10">{text}</text>')
    svg.append(f'<text x="{MARGIN}" y="{height - 10}">test loss (nats/char) per seed, bar = mean; '
               'under each arm its logit spread at init and its pilot lr</text>')
    write(svg, out_path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
