#!/usr/bin/env python3
"""The live page in headless Chromium (Debian's `chromium`), driven over the DevTools protocol.

    tests/e2e/browser.py --fake                 # fake echo model, 40 ms per token
    tests/e2e/browser.py -m qwen2.5-coder-0.5b  # a real model

Opens the page, sends a message, waits for the streamed answer, checks that the answer's
tokens carry confidence colours, that hovering a token shows its top-3 alternatives, that a
tokens/s figure and the box's state show, and saves a screenshot (default
target/e2e/browser.png). Only the standard library is used (a minimal WebSocket client for
the DevTools connection); all traffic stays on 127.0.0.1.
"""

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

from common import REPO, Checks, Server, arguments


class WebSocket:
    """Just enough of RFC 6455 for the DevTools protocol: text frames, client masking."""

    def __init__(self, url):
        assert url.startswith("ws://"), url
        hostport, _, path = url[len("ws://"):].partition("/")
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((
            "GET /%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (path, hostport, key)
        ).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            data = self.sock.recv(1)
            if not data:
                raise ConnectionError("DevTools closed the connection during the handshake")
            head += data
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise ConnectionError("WebSocket handshake refused: %r" % head)

    def _read(self, n):
        out = b""
        while len(out) < n:
            data = self.sock.recv(n - len(out))
            if not data:
                raise ConnectionError("DevTools connection closed")
            out += data
        return out

    def send(self, text):
        payload = text.encode()
        head = bytes([0x81])
        n = len(payload)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def recv(self):
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            opcode = b0 & 0x0F
            if opcode in (0x9, 0xA):  # ping, pong: DevTools does not need answers here
                continue
            if opcode == 0x8:
                raise ConnectionError("DevTools closed the WebSocket")
            message += payload
            if b0 & 0x80:
                return message.decode()


class DevTools:
    def __init__(self, ws_url):
        self.ws = WebSocket(ws_url)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError("%s: %s" % (method, msg["error"]))
                return msg["result"]

    def js(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError("page script failed: %s" % r["exceptionDetails"])
        return r["result"].get("value")

    def wait_for(self, expression, timeout, what):
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))


def start_chromium(url, profile):
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if not binary:
        sys.exit("no chromium: apt-get install chromium")
    proc = subprocess.Popen([
        binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", "--no-default-browser-check", "--user-data-dir=" + profile,
        "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
        "--window-size=1100,760", url,
    ], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # With port 0 Chromium writes the port it chose into the profile.
    port_file = os.path.join(profile, "DevToolsActivePort")
    deadline = time.time() + 60
    while time.time() < deadline:
        if os.path.exists(port_file):
            lines = open(port_file).read().split()
            if lines:
                port = int(lines[0])
                targets = json.load(urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port))
                pages = [t for t in targets if t.get("type") == "page"]
                if pages:
                    return proc, pages[0]["webSocketDebuggerUrl"]
        time.sleep(0.2)
    proc.kill()
    sys.exit("chromium did not open its DevTools port")


def main():
    p = arguments(__doc__)
    p.add_argument("--screenshot", default=os.path.join(REPO, "target", "e2e", "browser.png"))
    p.add_argument("--max-tokens", type=int, default=24,
                   help="the page's max tokens for a real model (keeps slow runs short)")
    args = p.parse_args()
    # The fake model spends 40 ms per token so the answer visibly streams.
    server = Server(args, fake_token_ms=40)
    profile = tempfile.mkdtemp(prefix="smolrun-chromium-")
    chromium, ws_url = start_chromium(server.url + "/", profile)
    checks = Checks()
    try:
        dt = DevTools(ws_url)
        dt.wait_for("document.readyState === 'complete' && !!document.getElementById('send')", 30,
                    "the page to load")
        message = "Tell me about the sea: é, 漢字 and a [loop]" if args.fake else \
            "Write a haiku about a small computer."

        def page_shows_state():
            model = dt.wait_for(
                "(function(){var t=document.getElementById('s-model').textContent;"
                "return t && t !== '\u2026' ? t : null;})()", 10, "the model name from /v1/state")
            if args.fake:
                assert model == "fake-echo", model
            ram = dt.js("document.getElementById('s-ram').textContent")
            assert "used" in ram and "free" in ram, ram
            cpu = dt.js("document.getElementById('s-cpu').textContent")
            assert "cores" in cpu, cpu

        def streams_an_answer():
            if not args.fake:
                dt.js("document.getElementById('o-max').value = %d" % args.max_tokens)
            dt.js("(function(){var i=document.getElementById('input'); i.value=%s;"
                  "document.getElementById('send').click(); return true;})()" % json.dumps(message))
            # Watch the answer grow: while the page is still busy it must show several
            # different token counts (streamed), not everything at once at the end.
            dt.wait_for("document.querySelectorAll('.assistant .tok').length", 120,
                        "the first streamed token")
            started = time.time()
            counts_while_busy = set()
            deadline = started + 600
            while time.time() < deadline:
                n, busy = dt.js("[document.querySelectorAll('.assistant .tok').length,"
                                " document.getElementById('send').disabled]")
                if not busy:
                    break
                counts_while_busy.add(n)
                # The fake loops: after a second of streaming, press Stop like a person would.
                if args.fake and time.time() - started > 1.0:
                    dt.js("document.getElementById('stop').click()")
                time.sleep(0.05)
            else:
                raise AssertionError("the answer did not finish in time")
            assert len(counts_while_busy) >= 2, counts_while_busy

        def tokens_carry_colours():
            colours = dt.js("Array.prototype.map.call(document.querySelectorAll('.assistant .tok'),"
                            "function(s){return [s.style.background || s.style.backgroundColor,"
                            " parseFloat(s.getAttribute('data-p'))];})")
            assert len(colours) >= 3, colours
            for bg, prob in colours:
                assert bg.startswith("rgb") or bg.startswith("hsl"), bg
                assert 0.0 <= prob <= 1.0, prob
            assert len(set(c[0] for c in colours)) >= 2, "every token has the same colour"
            text = dt.js("document.querySelector('.assistant .text').textContent")
            assert text.strip(), "empty answer"
            assert "\ufffd" not in text, text
            if args.fake:
                assert text.startswith("echo: Tell me about the sea: é, 漢字"), text

        def hover_shows_alternatives():
            rows = dt.js("(function(){var s=document.querySelectorAll('.assistant .tok')[1];"
                         "s.dispatchEvent(new MouseEvent('mouseover',{bubbles:true}));"
                         "var tip=document.getElementById('tip');"
                         "return [tip.style.display, tip.getElementsByTagName('tr').length, tip.textContent];})()")
            display, n_rows, text = rows
            assert display == "block", rows
            assert n_rows == 3, rows
            assert "%" in text, rows

        def shows_tokens_per_second():
            tps = dt.js("document.getElementById('s-tps').textContent")
            assert float(tps) > 0, tps
            meta = dt.js("document.querySelector('.assistant .meta').textContent")
            assert "tok/s" in meta, meta

        def second_turn_finishes_with_server_timings():
            follow_up = "and one more thing" if args.fake else "Now one about the sea."
            dt.js("(function(){var i=document.getElementById('input'); i.value=%s;"
                  "document.getElementById('send').click(); return true;})()" % json.dumps(follow_up))
            dt.wait_for("document.querySelectorAll('.assistant').length === 2 && "
                        "document.getElementById('send').disabled === false", 300,
                        "the second answer to finish")
            meta = dt.js("document.querySelectorAll('.assistant .meta')[1].textContent")
            assert "tok/s" in meta and "prompt" in meta, meta
            if args.fake:
                text = dt.js("document.querySelectorAll('.assistant .text')[1].textContent")
                assert text == "echo: and one more thing", text

        for name, fn in [
            ("page shows model, RAM and CPU", page_shows_state),
            ("answer streams token by token", streams_an_answer),
            ("tokens carry confidence colours", tokens_carry_colours),
            ("hover shows top-3 alternatives", hover_shows_alternatives),
            ("tokens/s shows", shows_tokens_per_second),
            ("second turn finishes with the server's timings", second_turn_finishes_with_server_timings),
        ]:
            checks.run(name, fn)

        shot = dt.call("Page.captureScreenshot", format="png")
        os.makedirs(os.path.dirname(args.screenshot), exist_ok=True)
        with open(args.screenshot, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        print("screenshot: " + args.screenshot)
    finally:
        chromium.kill()
        chromium.wait()
        shutil.rmtree(profile, ignore_errors=True)
        server.stop()
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
