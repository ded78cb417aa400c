#!/usr/bin/env python3
"""Draws docs/claims/kv-capacity*.svg from a test-stage JSON of kv-capacity, kv-capacity-long
(MQAR at 64 or 256 keys: test accuracy) or kv-capacity-charlm-long (E-C's char LM: test loss):
every run's metric (one dot per seed, a bar at the mean) for the models trained from scratch
(kv 8, 2, 1 and, on MQAR, the equal-KV-bytes arm, each labelled with its KV bytes per token)
and, from the MHA runs, the models mean-pooled to G = 2 and 1 just after conversion and after
uptraining, beside control A (the MHA model trained for the same extra steps). The gate (0.90
accuracy; bigram - 0.25 nats for the char LM) is dashed. Plain SVG, no plotting library (the
figure must be reproducible from the JSON alone).

Usage: scripts/plot_kv_capacity.py RESULT.json OUT.svg
"""
import json
import sys

from claims_svg import dashed, legend_dot, open_svg, panel, write

GATE_ACCURACY = 0.90
BIGRAM_MARGIN = 0.25
PANEL_W, PANEL_H, MARGIN = 720, 260, 56
SCRATCH, CONVERTED, UPTRAINED, CONTROL = "#2471a3", "#c0392b", "#27ae60", "#7f8c8d"


def columns(r, key):
    """(label, second label, colour, per-seed metric values) in drawing order."""
    by_cell = {}
    bytes_of = {}
    for c in r["cells"]:
        bytes_of[c["id"]] = c["cost"]["kv_cache_bytes_per_token"]
    for run in r["runs"]:
        by_cell.setdefault(run["cell"], []).append(run)
    out = []
    for cell in ("kv=8", "kv=2", "kv=1", "kv=1 hd=64"):
        if cell in by_cell:
            values = [run["final"][key] for run in by_cell[cell]]
            out.append((cell, f"{bytes_of[cell]} B", SCRATCH, values))
    mha = by_cell.get("kv=8", [])
    finals = [run["measures"]["final"] for run in mha if run["measures"].get("final")]
    if finals:
        out.append(("control A", "kv=8 + U steps", CONTROL,
                    [m["control_a"][key] for m in finals]))
        for g in (2, 1):
            entries = [next(c for c in m["conversion"] if c["kv_heads"] == g) for m in finals]
            out.append((f"8→{g}", "pooled", CONVERTED,
                        [e["converted"][key] for e in entries]))
            out.append((f"8→{g}", "+ U steps", UPTRAINED,
                        [e["uptrained"][key] for e in entries]))
    return out


def main(result_path, out_path):
    with open(result_path) as f:
        r = json.load(f)
    loss = r["experiment"]["metric_kind"] == "loss"
    key = r["experiment"]["metric"]
    cols = columns(r, key)
    task = r["task"]
    if loss:
        gate = task["bigram_loss"] - BIGRAM_MARGIN
        title = "char LM (E-C's, h = 8), 8 query heads: test loss per seed (nats/char)"
        values = [v for col in cols for v in col[3] if v <= gate] + [gate]
        lo, hi = min(values) - 0.02, max(values) + 0.02
        ticks = [round(lo + (hi - lo) * k / 4, 3) for k in range(5)]
    else:
        gate, lo, hi, ticks = GATE_ACCURACY, 0.0, 1.0, (0.0, 0.25, 0.5, 0.75, 1.0)
        title = (f"MQAR ({task['num_pairs']} pairs, {task['keys']} keys), 8 query heads: "
                 "test accuracy per seed")
    width, height = PANEL_W + 2 * MARGIN, PANEL_H + 2 * MARGIN + 60
    svg = open_svg(width, height)
    x0, y0 = MARGIN, MARGIN

    def y_of(v):  # values beyond the axis (a pooled model far off) sit on its edge
        return y0 + PANEL_H * (hi - min(max(v, lo), hi)) / (hi - lo)

    step = PANEL_W / max(1, len(cols))
    panel(svg, x0, y0, PANEL_W, PANEL_H, title, y_of, title_gap=14, ticks=ticks)
    dashed(svg, x0, x0 + PANEL_W, y_of(gate))
    for i, (label, sub, color, values) in enumerate(cols):
        cx = x0 + (i + 0.5) * step
        for s, v in enumerate(values):
            svg.append(f'<circle cx="{cx + (s - (len(values) - 1) / 2) * 5}" cy="{y_of(v)}" r="3" '
                       f'fill="{color}" fill-opacity="0.75"/>')
        mean = sum(values) / len(values)
        svg.append(f'<line x1="{cx - 16}" x2="{cx + 16}" y1="{y_of(mean)}" y2="{y_of(mean)}" '
                   f'stroke="{color}" stroke-width="2"/>')
        if mean > hi or mean < lo:  # off the axis: say where
            svg.append(f'<text x="{cx}" y="{y_of(mean) + (12 if mean > hi else -4)}" '
                       f'text-anchor="middle" fill="{color}">{mean:.2f}</text>')
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
    gate_text = f"bigram - 0.25 = {gate:.3f}" if loss else "0.90"
    clipped = " (points beyond the axis sit on its edge)" if loss else ""
    svg.append(f'<text x="{MARGIN}" y="{ly + 20}">bar: mean; dashed: the gate {gate_text}; '
               f'U = {steps} steps (5 %), peak lr 0.3 x the run\'s{clipped}</text>')
    write(svg, out_path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
