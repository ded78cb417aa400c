#!/usr/bin/env python3
"""The heads reports, opened in a real browser.

Encoder (all-MiniLM-L6-v2): runs `headcount heads` on the sentences of
tests/testdata/heads/sts-pairs.tsv (with --ablate on its pairs, so both grids and the pruning
chart exist). Decoder (SmolLM2-135M, `--model FILE.gguf`): 4 corpus windows and 4 repeated
random sequences. Each run's JSON is checked (the decoder's roles re-derived here from its
numbers by the rule of docs/decoder-heads.md), then the HTML page opens in Debian's Chromium,
headless:
  1. --dump-dom: the page's own script measures, after layout, how many heatmaps and grid
     cells have a size on the page and writes the counts into <output id="render-check">;
     we require every heatmap (encoder: all 72, at least the issue's 12; decoder: the heads the
     JSON lists) and one cell per head in each grid.
  2. --screenshot: a PNG of the right size whose pixels hold the role colours of the grid
     (decoded here with zlib: no imaging library needed).
Usage: heads_report_browser_check.py HEADCOUNT_BINARY SOURCE_DIR
Exit 0 pass, 1 fail, 77 skip (neither model is installed; one absent model is skipped alone).
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
DECODER_ROLE_COLOURS = {  # src/report/decoder_heads_report.cpp role_colour()
    "induction": (0xE3, 0x77, 0xC2), "previous-token": (0x1F, 0x77, 0xB4), "sink": (0xD6, 0x27, 0x28),
    "self": (0x8C, 0x56, 0x4B), "broad": (0xBC, 0xBD, 0x22), "mixed": (0xD9, 0xD9, 0xD9),
}
WIDTH, HEIGHT = 1200, 1500
DECODER_HEIGHT = 2000  # the 30-layer grid is ~1700 px tall


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


def render_check(report, work, height):
    """The page's own measurements after layout, from --dump-dom: {name: value}, and the DOM."""
    dom = chromium(["--dump-dom", f"--window-size={WIDTH},{height}", "file://" + report],
                   os.path.join(work, "profile-dom"))
    match = re.search(r'<output id="render-check"([^>]*)>', dom.stdout)
    if not match:
        fail(f"no render-check element in the dumped DOM (chromium exit {dom.returncode}): {dom.stderr[-800:]}")
    attrs = dict(re.findall(r'data-([a-z-]+)="([\d,]+)"', match.group(1)))
    print("render-check:", attrs)
    return attrs, dom.stdout


def check_role_grid_pixels(report, work, height, attrs, heads, per_layer, colours_of):
    """A screenshot whose role grid shows each head's role colour at its cell."""
    shot = os.path.join(work, "report.png")
    result = chromium([f"--screenshot={shot}", f"--window-size={WIDTH},{height}", "file://" + report],
                      os.path.join(work, "profile-shot"))
    if not os.path.exists(shot):
        fail(f"no screenshot (chromium exit {result.returncode}): {result.stderr[-800:]}")
    width, got_height, rows, bpp = png_pixels(shot)
    if (width, got_height) != (WIDTH, height):
        fail(f"screenshot is {width}x{got_height}, expected {WIDTH}x{height}")
    colours = set()
    for row in rows[::2]:
        for x in range(0, len(row), bpp * 2):
            colours.add(tuple(row[x:x + 3]))
    # The role grid's own pixels (its on-page box, measured by the page; the legend beside it
    # also has every colour, so only the grid's box counts): each head's cell centre.
    gx, gy, gw, gh = (int(v) for v in attrs["role-grid"].split(",")) if "role-grid" in attrs else (0, 0, 0, 0)
    if gw <= 0 or gh <= 0 or gx + gw > width or gy + gh > got_height:
        fail(f"role grid box {attrs.get('role-grid')} is not inside the {width}x{got_height} screenshot")
    cell, left, top = 56, 34, 20  # heads_report.cpp kHeadsGridCell, kGridLeft, kGridTop
    scale = gw / (left + per_layer * cell + 2)
    grid_colours = set()
    for h in heads:
        cx = gx + round((left + h["head"] * cell + 4) * scale)
        cy = gy + round((top + h["layer"] * cell + 4) * scale)
        pixel = tuple(rows[cy][cx * bpp:cx * bpp + 3])
        if pixel != colours_of[h["role"]]:
            fail(f"head {h['layer']}.{h['head']} ({h['role']}): grid pixel {pixel} at ({cx},{cy}), "
                 f"expected {colours_of[h['role']]}")
        grid_colours.add(pixel)
    used = {h["role"] for h in heads}
    missing = [role for role in used if colours_of[role] not in grid_colours]
    print(f"screenshot {width}x{got_height}: {len(colours)} distinct colours; roles shown: {sorted(used)}")
    if missing:
        fail(f"role colours of {missing} not found in the screenshot")
    if len(colours) < 50:
        fail(f"only {len(colours)} distinct colours: the page did not render")
    return shot


def decoder_role(h):
    """docs/decoder-heads.md's rule, applied here to the JSON's numbers (first match wins)."""
    if h["prefix_matching"] >= 0.3 and h["copying"] > 0:
        return "induction"
    if h["previous"] >= 0.5:
        return "previous-token"
    if h["first"] >= 0.5:
        return "sink"
    if h["self"] >= 0.5:
        return "self"
    if h["normalized_entropy"] >= 0.9:
        return "broad"
    return "mixed"


def check_decoder(binary, model):
    work = tempfile.mkdtemp(prefix="headcount-decoder-report-")
    try:
        report = os.path.join(work, "report.html")
        run = subprocess.run(
            [binary, "heads", "--model", model, "--max-windows", "4", "--sequences", "4", "--threads", "2",
             "--out", report, "--json"], capture_output=True, text=True, timeout=1200)
        if run.returncode != 0:
            fail(f"headcount heads --model {model} exited {run.returncode}: {run.stderr[-2000:]}")
        numbers = json.loads(run.stdout)
        heads = numbers["heads"]
        layers, per_layer = numbers["layers"], numbers["heads_per_layer"]
        if len(heads) != layers * per_layer or (layers, per_layer) != (30, 9):
            fail(f"expected 30 x 9 heads in the JSON, got {layers} x {per_layer} ({len(heads)})")
        if sorted((h["layer"], h["head"]) for h in heads) != [(l, h) for l in range(30) for h in range(9)]:
            fail("the JSON does not hold each (layer, head) once")
        for h in heads:
            for key in ("role", "prefix_matching", "copying", "previous", "self", "first", "entropy",
                        "normalized_entropy", "distance", "kv_head"):
                if key not in h:
                    fail(f"head {h.get('layer')}.{h.get('head')} has no '{key}'")
            if abs(h["mass"] - 1) > 1e-4:
                fail(f"head {h['layer']}.{h['head']}: rows sum to {h['mass']}")
            if h["role"] != decoder_role(h):
                fail(f"head {h['layer']}.{h['head']}: role {h['role']}, the rule gives {decoder_role(h)}")
        if sum(numbers["role_counts"].values()) != len(heads):
            fail(f"role counts {numbers['role_counts']} do not add up to {len(heads)}")
        induction = numbers["induction"]
        if not induction["loss_drop"] == induction["loss_first_copy"] - induction["loss_second_copy"]:
            fail(f"loss drop {induction} is not first - second")

        attrs, _ = render_check(report, work, DECODER_HEIGHT)
        drawn = len(numbers["heatmap_heads"])
        if drawn < 2 or int(attrs.get("heatmaps", 0)) != drawn:
            fail(f"expected {drawn} (>= 2) rendered heatmaps, got {attrs.get('heatmaps')}")
        if int(attrs.get("role-cells", 0)) != len(heads):
            fail(f"expected {len(heads)} rendered cells in the role grid, got {attrs.get('role-cells')}")
        shot = check_role_grid_pixels(report, work, DECODER_HEIGHT, attrs, heads, per_layer, DECODER_ROLE_COLOURS)
        keep = os.environ.get("HEADCOUNT_KEEP_DECODER_SCREENSHOT")
        if keep:
            shutil.copy(shot, keep)
        print(f"decoder: {numbers['role_counts']}, loss drop {induction['loss_drop']:.3f} nats: PASS")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    binary, source = sys.argv[1], sys.argv[2]
    model = os.path.join(source, "models", "all-MiniLM-L6-v2", "model.safetensors")
    decoder = os.path.join(source, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    have_encoder = os.path.exists(model) or os.environ.get("HEADCOUNT_MODEL")
    if not have_encoder and not os.path.exists(decoder):
        print(f"SKIP: neither {model} nor {decoder} found (run scripts/setup.sh)")
        sys.exit(77)
    if have_encoder:
        check_encoder(binary, source)
    else:
        print(f"encoder page skipped: {model} not found")
    if os.path.exists(decoder):
        check_decoder(binary, decoder)
    else:
        print(f"decoder page skipped: {decoder} not found")
    print("PASS")


def check_encoder(binary, source):
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
        attrs, dom = render_check(report, work, HEIGHT)
        if int(attrs.get("heatmaps", 0)) < 12 or int(attrs.get("heatmaps", 0)) != 72:
            fail(f"expected 72 rendered heatmaps (>= 12), got {attrs.get('heatmaps')}")
        if 'id="pruning-chart"' not in dom or "pruning" not in numbers["ablation"] and "pruning" not in numbers:
            fail("no pruning chart in the page or no pruning points in the JSON")
        for grid in ("role-cells", "importance-cells"):
            if int(attrs.get(grid, 0)) != 72:
                fail(f"expected 72 rendered cells in the {grid.split('-')[0]} grid, got {attrs.get(grid)}")

        # 2. A screenshot whose pixels show the role grid.
        shot = check_role_grid_pixels(report, work, HEIGHT, attrs, heads, 12, ROLE_COLOURS)
        keep = os.environ.get("HEADCOUNT_KEEP_SCREENSHOT")
        if keep:
            shutil.copy(shot, keep)
        print("encoder: PASS")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
