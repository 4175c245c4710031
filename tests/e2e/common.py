"""Start `smolrun serve` for an end-to-end script and stop it afterwards.

The server listens on 127.0.0.1 with port 0 (a free port); its address is read from the line it
prints on start. With --fake, it serves the deterministic fake model (answers "echo: <last user
message>"); otherwise the real model given by --model.
"""

import argparse
import os
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def find_binary():
    if os.environ.get("SMOLRUN_BIN"):
        return os.environ["SMOLRUN_BIN"]
    for profile in ("release", "debug"):
        path = os.path.join(REPO, "target", profile, "smolrun")
        if os.path.exists(path):
            return path
    sys.exit("no smolrun binary: run `cargo build --release -p smolrun` or set SMOLRUN_BIN")


def arguments(description):
    p = argparse.ArgumentParser(description=description)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--fake", action="store_true", help="serve the fake echo model")
    g.add_argument("--model", "-m", help="model path or short name for a real run")
    p.add_argument("--ctx", default="1024", help="context length (-c)")
    p.add_argument("--threads", "-t", default=None)
    return p


class Server:
    def __init__(self, args, extra=(), fake_token_ms=5):
        cmd = [find_binary(), "serve", "--host", "127.0.0.1", "--port", "0", "-c", str(args.ctx)]
        if args.fake:
            cmd += ["--fake-backend", "--fake-token-ms", str(fake_token_ms)]
        else:
            cmd += ["-m", args.model]
        if args.threads:
            cmd += ["-t", str(args.threads)]
        cmd += list(extra)
        self.log = []
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        deadline = time.time() + 300  # a real model may take a while to load
        self.url = None
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line.rstrip("\n"))
            if "listening on http://" in line:
                self.url = line.split("listening on ")[1].strip().rstrip("/")
                break
        if not self.url:
            self.proc.kill()
            sys.exit("smolrun serve did not start:\n" + "\n".join(self.log))
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line.rstrip("\n"))

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class Checks:
    """Collects named checks and prints 'N passed, N failed' at the end."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def run(self, name, fn):
        try:
            fn()
            self.passed += 1
            print("ok    " + name, flush=True)
        except Exception as e:  # report every failing check, not only the first
            self.failed += 1
            print("FAIL  %s: %s: %s" % (name, type(e).__name__, e), flush=True)

    def finish(self):
        print("%d passed, %d failed" % (self.passed, self.failed))
        return 1 if self.failed else 0
