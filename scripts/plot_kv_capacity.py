#!/usr/bin/env python3
"""Draws docs/claims/kv-capacity.svg from a kv-capacity test-stage JSON: every run's test
accuracy (one dot per seed, a bar at the mean) for the models trained from scratch (kv 8, 2, 1
and the equal-KV-bytes arm, each labelled with its KV bytes per token) and, from the MHA runs,
the models mean-pooled to G = 2 and 1 just after conversion and after uptraining, beside
control A (the MHA model trained for the same extra steps). The gate (0.90) is dashed.
Plain SVG, no plotting library (the figure must be reproducible from the JSON alone).

Usage: scripts/plot_kv_capacity.py RESULT.json OUT.svg
"""
import json
import sys

from claims_svg import dashed, legend_dot, open_svg, panel, write

GATE = 0.90
PANEL_W, PANEL_H, MARGIN = 720, 260, 56
SCRATCH, CONVERTED, UPTRAINED, CONTROL = "#2471a3", "#c0392b", "#27ae60", "#7f8c8d"


def columns(r):
    """(label, second label, colour, per-seed accuracies) in drawing order."""
    by_cell = {}
    bytes_of = {}
    for c in r["cells"]:
        bytes_of[c["id"]] = c["cost"]["kv_cache_bytes_per_token"]
    for run in r["runs"]:
        by_cell.setdefault(run["cell"], []).append(run)
    out = []
    for cell in ("kv=8", "kv=2", "kv=1", "kv=1 hd=64"):
        if cell in by_cell:
            values = [run["final"]["validation_accuracy"] for run in by_cell[cell]]
            out.append((cell, f"{bytes_of[cell]} B", SCRATCH, values))
    mha = by_cell.get("kv=8", [])
    finals = [run["measures"]["final"] for run in mha if run["measures"].get("final")]
    if finals:
        out.append(("control A", "kv=8 + U steps", CONTROL,
                    [m["control_a"]["validation_accuracy"] for m in finals]))
        for g in (2, 1):
            entries = [next(c for c in m["conversion"] if c["kv_heads"] == g) for m in finals]
            out.append((f"8→{g}", "pooled", CONVERTED,
                        [e["converted"]["validation_accuracy"] for e in entries]))
            out.append((f"8→{g}", "+ U steps", UPTRAINED,
                        [e["uptrained"]["validation_accuracy"] for e in entries]))
    return out


def main(result_path, out_path):
    with open(result_path) as f:
        r = json.load(f)
    cols = columns(r)
    width, height = PANEL_W + 2 * MARGIN, PANEL_H + 2 * MARGIN + 60
    svg = open_svg(width, height)
    x0, y0 = MARGIN, MARGIN

    def y_of(acc):
        return y0 + PANEL_H * (1 - acc)

    step = PANEL_W / max(1, len(cols))
    panel(svg, x0, y0, PANEL_W, PANEL_H,
          "MQAR (4 pairs, 64 keys), 8 query heads: test accuracy per seed", y_of, title_gap=14)
    dashed(svg, x0, x0 + PANEL_W, y_of(GATE))
    for i, (label, sub, color, values) in enumerate(cols):
        cx = x0 + (i + 0.5) * step
        for s, v in enumerate(values):
            svg.append(f'<circle cx="{cx + (s - (len(values) - 1) / 2) * 5}" cy="{y_of(v)}" r="3" '
                       f'fill="{color}" fill-opacity="0.75"/>')
        mean = sum(values) / len(values)
        svg.append(f'<line x1="{cx - 16}" x2="{cx + 16}" y1="{y_of(mean)}" y2="{y_of(mean)}" '
                   f'stroke="{color}" stroke-width="2"/>')
        svg.append(f'<text x="{cx}" y="{y0 + PANEL_H + 16}" text-anchor="middle">{label}</text>')
        svg.append(f'<text x="{cx}" y="{y0 + PANEL_H + 30}" text-anchor="middle" '
                   f'fill="#555">{sub}</text>')
    ly, lx = y0 + PANEL_H + 58, MARGIN
    for name, color in (("from scratch (KV bytes/token)", SCRATCH), ("control A", CONTROL),
                        ("mean-pooled", CONVERTED), ("uptrained", UPTRAINED)):
        legend_dot(svg, lx, ly, color, name)
        lx += 230 if name.startswith("from") else 110
    steps = next((run["measures"]["final"]["uptrain_steps"] for run in r["runs"]
                  if run["measures"].get("final")), "U")
    svg.append(f'<text x="{MARGIN}" y="{ly + 20}">bar: mean; dashed: the gate 0.90; U = {steps} '
               'steps (5 %), peak lr 0.3 x the run\'s</text>')
    write(svg, out_path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
