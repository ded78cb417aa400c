"""The page at `/` of `headcount serve`, in a real browser: Debian's Chromium, headless, driven over
the DevTools protocol on a pipe (--remote-debugging-pipe; standard library only). The page is
opened with ?demo=1, so its own script runs one streamed chat turn and one sentence comparison as
a user's clicks would; then the DOM must show the chat answer `headcount generate --chat` gives
for the same question, the cosine `headcount similarity` prints for the same sentences, and the
panels for the served models; a screenshot must show the similarity bar in its colour. Skips
without Chromium or the models."""

import base64
import json
import os
import shutil
import struct
import subprocess
import tempfile
import time
import zlib

import pytest

from test_serve import CLI, MODEL, ROOT, Server
from test_serve_decoder import GGUF, offline

CHROMIUM = shutil.which("chromium")
pytestmark = [pytest.mark.skipif(CHROMIUM is None, reason="no chromium: scripts/setup.sh installs it"),
              pytest.mark.skipif(not (os.path.isfile(GGUF) and os.path.isdir(MODEL)), reason="no models")]
BAR = (0x1F, 0x77, 0xB4)  # .meter > div in serve/page.cpp
WIDTH, HEIGHT = 1000, 900


class DevTools:
    """Chromium with the DevTools protocol on fds 3 (commands in) and 4 (replies out)."""

    def __init__(self, profile):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def fds():
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.proc = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                                      "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"],
                                     preexec_fn=fds, pass_fds=(3, 4),  # (kept open after preexec_fn)
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.next_id, self.buffer, self.session = 0, b"", None

    def call(self, method, params=None, session=True, timeout=60):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self.to_chrome, json.dumps(message).encode() + b"\0")
        end = time.time() + timeout
        while time.time() < end:
            while b"\0" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self.next_id:
                    assert "error" not in reply, reply
                    return reply["result"]
            self.buffer += os.read(self.from_chrome, 1 << 20)
        raise AssertionError(f"no reply to {method}")

    def evaluate(self, expression):
        return self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})["result"].get("value")

    def close(self):
        self.proc.kill()
        self.proc.wait(timeout=30)
        os.close(self.to_chrome)
        os.close(self.from_chrome)


def png_has_colour(data, colour):
    """Whether an 8-bit RGB(A) PNG has pixels of `colour` (the bar): zlib only, no imaging library."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", data[pos + 8:pos + 8 + length])
        elif kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    width, height, depth, kind, _, _, interlace = header
    assert depth == 8 and kind in (2, 6) and not interlace
    bpp = 3 if kind == 2 else 4
    raw, stride, previous, hits = zlib.decompress(idat), width * bpp, bytearray(width * bpp), 0
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = previous[x], (previous[x - bpp] if x >= bpp else 0)
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        hits += sum(1 for x in range(0, stride, bpp) if tuple(line[x:x + 3]) == colour)
        previous = line
    return (width, height), hits


def test_page_chats_streamed_and_compares_sentences_in_chromium():
    question = "What is 2+2?"
    reference = offline(question, 24, "--chat")
    answer = reference["text"]
    a, b = "A girl is styling her hair.", "A girl is brushing her hair."
    cosine = float(subprocess.run([CLI, "similarity", a, b, "--threads", "2"], check=True, capture_output=True,
                                  text=True).stdout.split()[-1])
    server = Server(models=("--embedding-model", MODEL, "--model", GGUF))
    profile = tempfile.mkdtemp()
    browser = DevTools(profile)
    try:
        server.wait_ready()
        target = browser.call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        browser.session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                       session=False)["sessionId"]
        browser.call("Emulation.setDeviceMetricsOverride",
                     {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})
        browser.call("Page.navigate", {"url": f"{server.url}/?demo=1"})
        end = time.time() + 120
        while browser.evaluate("document.body && document.body.dataset.demo") != "done":
            assert time.time() < end, browser.evaluate("document.body.innerText")
            time.sleep(0.2)
        page = browser.evaluate("""JSON.stringify({
            models: document.getElementById('models').textContent,
            user: [...document.querySelectorAll('#log .user')].map(d => d.textContent),
            assistant: [...document.querySelectorAll('#log .assistant')].map(d => d.textContent),
            stats: document.getElementById('chat-stats').textContent,
            cosine: document.getElementById('cosine').textContent,
            bar: document.getElementById('bar').getBoundingClientRect().width,
            meter: document.querySelector('.meter').getBoundingClientRect().width,
            chatShown: !document.getElementById('chat-panel').hidden,
            similarityShown: !document.getElementById('similarity-panel').hidden})""")
        page = json.loads(page)
        assert page["chatShown"] and page["similarityShown"], page
        assert "SmolLM2-135M-Instruct.Q4_1 (completion)" in page["models"] and "(embedding)" in page["models"]
        assert page["user"] == [question] and page["assistant"] == [answer], page
        assert page["stats"].startswith(f"· {len(reference['tokens'])} tokens, the first after "), page
        # Both are cosines of the same float32 embeddings; the page sums in double, the CLI prints
        # six decimals: they agree to the last digit shown, up to one unit of rounding.
        assert abs(float(page["cosine"]) - cosine) <= 1.5e-6, (page["cosine"], cosine)
        assert abs(page["bar"] / page["meter"] - cosine) < 0.01
        shot = base64.b64decode(browser.call("Page.captureScreenshot", {"format": "png"})["data"])
        size, hits = png_has_colour(shot, BAR)
        assert size == (WIDTH, HEIGHT) and hits > 100, (size, hits)
        out = os.environ.get("HEADCOUNT_OUT")
        if out:
            with open(os.path.join(out, "serve-page.png"), "wb") as f:
                f.write(shot)
    finally:
        browser.close()
        shutil.rmtree(profile, ignore_errors=True)
        assert server.stop() == 0
