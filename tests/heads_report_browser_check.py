#!/usr/bin/env python3
"""The heads report, opened in a real browser.

Runs `headcount heads` on the sentences of tests/testdata/heads/sts-pairs.tsv (with --ablate on
its pairs, so both grids and the pruning chart exist), checks the JSON, then opens the HTML page in Debian's Chromium, headless:
  1. --dump-dom: the page's own script measures, after layout, how many heatmaps and grid
     cells have a size on the page and writes the counts into <output id="render-check">;
     we require all 72 heatmaps (at least the issue's 12) and 72 cells in each grid.
  2. --screenshot: a PNG of the right size whose pixels hold the role colours of the grid
     (decoded here with zlib: no imaging library needed).
Usage: heads_report_browser_check.py HEADCOUNT_BINARY SOURCE_DIR
Exit 0 pass, 1 fail, 77 skip (the model is not installed).
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

ROLE_COLOURS = {  # src/report/heads_report.cpp role_colour()
    "previous-token": (0x1F, 0x77, 0xB4), "self": (0x8C, 0x56, 0x4B), "next-token": (0x17, 0xBE, 0xCF),
    "positional": (0x94, 0x67, 0xBD), "[CLS] sink": (0xD6, 0x27, 0x28), "[SEP] sink": (0xFF, 0x7F, 0x0E),
    "punctuation": (0x2C, 0xA0, 0x2C), "broad": (0xBC, 0xBD, 0x22), "mixed": (0xD9, 0xD9, 0xD9),
}
WIDTH, HEIGHT = 1200, 1500


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def chromium(args, profile, timeout=120):
    browser = shutil.which("chromium") or fail("chromium not found: scripts/setup.sh installs Debian's chromium")
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
           "--hide-scrollbars"] + args
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def png_pixels(path):
    """Decodes an 8-bit RGB/RGBA non-interlaced PNG: (width, height, rows of bytes, bytes per pixel)."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{path} is not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace:
        fail(f"unexpected PNG format depth {depth} colour {colour} interlace {interlace}")
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = previous[x]
            c = previous[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + a) & 255
            elif kind == 2:
                line[x] = (line[x] + b) & 255
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        previous = line
    return width, height, rows, bpp


def main():
    binary, source = sys.argv[1], sys.argv[2]
    model = os.path.join(source, "models", "all-MiniLM-L6-v2", "model.safetensors")
    if not os.path.exists(model) and not os.environ.get("HEADCOUNT_MODEL"):
        print(f"SKIP: {model} not found (run scripts/setup.sh)")
        sys.exit(77)
    # The repository's own pairs (tests/testdata/heads): the test runs on any checkout.
    pairs = os.path.join(source, "tests", "testdata", "heads", "sts-pairs.tsv")
    work = tempfile.mkdtemp(prefix="headcount-report-")
    try:
        report = os.path.join(work, "report.html")
        run = subprocess.run(
            [binary, "heads", "--corpus", pairs, "--ablate", "--sts", pairs, "--prune-sts", pairs, "--max-pairs", "16",
             "--threads", "2", "--out", report, "--json"], capture_output=True, text=True, timeout=1200)
        if run.returncode != 0:
            fail(f"headcount heads exited {run.returncode}: {run.stderr[-2000:]}")

        # The JSON: one object per head with its role and statistics, counts that add up.
        numbers = json.loads(run.stdout)
        heads = numbers["heads"]
        if len(heads) != 72:
            fail(f"expected 72 heads in the JSON, got {len(heads)}")
        for h in heads:
            for key in ("layer", "head", "role", "previous", "next", "self", "cls", "sep", "punctuation", "entropy",
                        "normalized_entropy", "distance", "importance"):
                if key not in h:
                    fail(f"head {h.get('layer')}.{h.get('head')} has no '{key}'")
            if abs(h["mass"] - 1) > 1e-4:
                fail(f"head {h['layer']}.{h['head']}: rows sum to {h['mass']}")
        if sum(numbers["role_counts"].values()) != 72:
            fail(f"role counts {numbers['role_counts']} do not add up to 72")
        if sorted((h["layer"], h["head"]) for h in heads) != [(l, h) for l in range(6) for h in range(12)]:
            fail("the JSON does not hold each (layer, head) once")

        # 1. What rendered, measured by the page in the browser after layout.
        # Same window as the screenshot below, so the boxes measured here are where its pixels are.
        dom = chromium(["--dump-dom", f"--window-size={WIDTH},{HEIGHT}", "file://" + report],
                       os.path.join(work, "profile-dom"))
        match = re.search(r'<output id="render-check"([^>]*)>', dom.stdout)
        if not match:
            fail(f"no render-check element in the dumped DOM (chromium exit {dom.returncode}): {dom.stderr[-800:]}")
        attrs = dict(re.findall(r'data-([a-z-]+)="([\d,]+)"', match.group(1)))
        print("render-check:", attrs)
        if int(attrs.get("heatmaps", 0)) < 12 or int(attrs.get("heatmaps", 0)) != 72:
            fail(f"expected 72 rendered heatmaps (>= 12), got {attrs.get('heatmaps')}")
        if 'id="pruning-chart"' not in dom.stdout or "pruning" not in numbers["ablation"] and "pruning" not in numbers:
            fail("no pruning chart in the page or no pruning points in the JSON")
        for grid in ("role-cells", "importance-cells"):
            if int(attrs.get(grid, 0)) != 72:
                fail(f"expected 72 rendered cells in the {grid.split('-')[0]} grid, got {attrs.get(grid)}")

        # 2. A screenshot whose pixels show the role grid.
        shot = os.path.join(work, "report.png")
        result = chromium([f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}", "file://" + report],
                          os.path.join(work, "profile-shot"))
        if not os.path.exists(shot):
            fail(f"no screenshot (chromium exit {result.returncode}): {result.stderr[-800:]}")
        width, height, rows, bpp = png_pixels(shot)
        if (width, height) != (WIDTH, HEIGHT):
            fail(f"screenshot is {width}x{height}, expected {WIDTH}x{HEIGHT}")
        colours = set()
        for row in rows[::2]:
            for x in range(0, len(row), bpp * 2):
                colours.add(tuple(row[x:x + 3]))
        # The role grid's own pixels (its on-page box, measured by the page; the legend beside it
        # also has every colour, so only the grid's box counts): each head's cell centre.
        gx, gy, gw, gh = (int(v) for v in attrs["role-grid"].split(",")) if "role-grid" in attrs else (0, 0, 0, 0)
        if gw <= 0 or gh <= 0 or gx + gw > width or gy + gh > height:
            fail(f"role grid box {attrs.get('role-grid')} is not inside the {width}x{height} screenshot")
        cell, left, top = 56, 34, 20  # heads_report.cpp kCell, kGridLeft, kGridTop
        scale = gw / (left + 12 * cell + 2)
        grid_colours = set()
        for h in heads:
            cx = gx + round((left + h["head"] * cell + 4) * scale)
            cy = gy + round((top + h["layer"] * cell + 4) * scale)
            pixel = tuple(rows[cy][cx * bpp:cx * bpp + 3])
            if pixel != ROLE_COLOURS[h["role"]]:
                fail(f"head {h['layer']}.{h['head']} ({h['role']}): grid pixel {pixel} at ({cx},{cy}), "
                     f"expected {ROLE_COLOURS[h['role']]}")
            grid_colours.add(pixel)
        used = {h["role"] for h in heads}
        missing = [role for role in used if ROLE_COLOURS[role] not in grid_colours]
        print(f"screenshot {width}x{height}: {len(colours)} distinct colours; roles shown: {sorted(used)}")
        if missing:
            fail(f"role colours of {missing} not found in the screenshot")
        if len(colours) < 50:
            fail(f"only {len(colours)} distinct colours: the page did not render")
        keep = os.environ.get("HEADCOUNT_KEEP_SCREENSHOT")
        if keep:
            shutil.copy(shot, keep)
        print("PASS")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
