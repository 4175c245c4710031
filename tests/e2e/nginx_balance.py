#!/usr/bin/env python3
"""nginx balancing two `smolrun serve` instances (standard library only; loopback only).

    tests/e2e/nginx_balance.py          # needs nginx (apt-get install nginx) and a built smolrun

Runs tools/nginx/smolrun-balance.conf, with its two boxes replaced by two fake-model instances
on 127.0.0.1 (A: --queue 16, B: --queue 4), in an nginx of its own (a temporary prefix, no
daemon, no system service). Every request carries an X-Test-Id that nginx's access log records
with $upstream_addr and $upstream_status, which tells the box that answered and the retries.

1. Overflow: 16 requests at once. B holds 5 and answers the others 503; nginx must pass those
   to A (proxy_next_upstream http_503): all 16 answered 200, at least one after a 503.
2. Kill: 8 clients (streamed and not) for 11 s; B is killed (SIGKILL) at 6.5 s (after the
   5 s for which its 503s in step 1 had nginx leave it out), while it is generating, so at least one request is cut or retried because of the kill. Every request
   must get a complete 200 answer or fail cleanly (a 5xx, or a stream cut short that the
   client sees as an error) within REQUEST_TIMEOUT_S: none hangs. Every request started after
   the kill must be answered 200 (by A). A's /metrics must count what nginx's log says A did.
3. Drain: B restarted (--queue 16); once it answers, A gets SIGTERM under load. Every request
   must be answered 200 (A finishes what it accepted and refuses new connections, which nginx
   passes to B), and A must exit 0.
"""

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from common import REPO, Checks, find_binary

CONF = os.path.join(REPO, "tools", "nginx", "smolrun-balance.conf")
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"  # /usr/sbin may be off a non-root PATH
TEMPLATE_BOXES = ("192.168.1.21:8090", "192.168.1.22:8090")
TEMPLATE_LISTEN = "listen 8090;"
TOKEN_MS = 20
MAX_TOKENS = 15  # 0.3 s per answer
CLIENTS = 8
REQUEST_TIMEOUT_S = 20  # far above the longest honest wait: 8 answers in a row on one box


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Instance:
    """One `smolrun serve --fake-backend` on a fixed loopback port, its log in a file."""

    def __init__(self, name, port, queue, tmp):
        self.name, self.port, self.addr = name, port, "127.0.0.1:%d" % port
        self.log_path = os.path.join(tmp, "%s-%d.log" % (name, time.time_ns()))
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [find_binary(), "serve", "--fake-backend", "--fake-token-ms", str(TOKEN_MS),
             "--host", "127.0.0.1", "--port", str(port), "--queue", str(queue)],
            stdout=subprocess.DEVNULL, stderr=self.log_file)
        deadline = time.time() + 30
        while "listening on" not in self.log():
            if self.proc.poll() is not None or time.time() > deadline:
                sys.exit("smolrun serve %s did not start:\n%s" % (name, self.log()))
            time.sleep(0.02)

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log_file.close()


class Nginx:
    def __init__(self, tmp, port, boxes):
        self.tmp = tmp
        self.access_log = os.path.join(tmp, "access.log")
        with open(CONF) as f:
            site = f.read()
        for template, box in zip(TEMPLATE_BOXES, boxes):
            assert site.count(template) == 1, "%s: no single %s line" % (CONF, template)
            site = site.replace(template, box)
        assert site.count(TEMPLATE_LISTEN) == 1, "%s: no single '%s'" % (CONF, TEMPLATE_LISTEN)
        site = site.replace(TEMPLATE_LISTEN, "listen 127.0.0.1:%d;" % port)
        with open(os.path.join(tmp, "smolrun-balance.conf"), "w") as f:
            f.write(site)
        # The main file around the fragment, as Debian's nginx.conf is around conf.d/*.conf;
        # every path in the temporary prefix, the access log in a format this test parses.
        temp_paths = "".join("    %s_temp_path %s/%s;\n" % (k, tmp, k)
                             for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        with open(os.path.join(tmp, "nginx.conf"), "w") as f:
            f.write("daemon off;\nworker_processes 1;\npid %s/nginx.pid;\n"
                    "error_log %s/error.log warn;\nevents { worker_connections 256; }\n"
                    "http {\n%s"
                    "    log_format balance '$http_x_test_id $status \"$upstream_addr\" "
                    "\"$upstream_status\" $request_time';\n"
                    "    access_log %s balance;\n"
                    "    include %s/smolrun-balance.conf;\n}\n"
                    % (tmp, tmp, temp_paths, self.access_log, tmp))
        os.chmod(tmp, 0o755)  # nginx's workers run as nobody when it is started as root
        check = subprocess.run([NGINX, "-t", "-p", tmp, "-c", tmp + "/nginx.conf", "-e",
                                tmp + "/error.log"], capture_output=True, text=True)
        if check.returncode != 0:
            sys.exit("nginx -t refused the configuration:\n" + check.stderr)
        self.proc = subprocess.Popen([NGINX, "-p", tmp, "-c", tmp + "/nginx.conf", "-e",
                                      tmp + "/error.log"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    sys.exit("nginx did not start:\n" + self.error_log())
                time.sleep(0.05)

    def error_log(self):
        try:
            with open(os.path.join(self.tmp, "error.log")) as f:
                return f.read()
        except OSError:
            return ""

    def entries(self):
        """Access log lines by test id: (status, [upstream addresses], [upstream statuses]),
        one address and status per box tried, in order."""
        def split(field):  # "a, b" for the boxes tried; " : " would be an internal redirect
            return [x.strip() for x in field.replace(" : ", ", ").split(",")]

        out = {}
        with open(self.access_log) as f:
            for line in f:
                m = re.match(r'(\S+) (\d+) "([^"]*)" "([^"]*)" ', line)
                if m and m.group(1) != "-":
                    out[m.group(1)] = (int(m.group(2)), split(m.group(3)), split(m.group(4)))
        return out

    def entries_for(self, results):
        """entries() once every one of `results` is logged: nginx writes a request's line
        after its last byte is sent, so a client can be done a moment before the line is."""
        deadline = time.time() + 5
        while True:
            entries = self.entries()
            missing = [r.id for r in results if r.id not in entries]
            if not missing:
                return entries
            assert time.time() < deadline, "not in nginx's access log: %r" % missing[:5]
            time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful: the workers finish and exit
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Result:
    def __init__(self, test_id, stream, started):
        self.id, self.stream, self.started = test_id, stream, started
        self.outcome = None  # "ok", "5xx", "cut", or "bad: ..."
        self.elapsed = None


def one_request(port, result):
    """Sends one chat completion through nginx and classifies what came back."""
    body = json.dumps({
        "messages": [{"role": "user", "content": "request %s [loop]" % result.id}],
        "max_tokens": MAX_TOKENS, "temperature": 0, "stream": result.stream}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
    try:
        conn.request("POST", "/v1/chat/completions", body=body,
                     headers={"Content-Type": "application/json", "X-Test-Id": result.id})
        r = conn.getresponse()
        try:
            text = r.read().decode("utf-8", "replace")
        except (http.client.IncompleteRead, ConnectionError) as e:
            result.outcome = "cut" if result.stream and r.status == 200 else "bad: %r" % e
            return
        if r.status >= 500:
            result.outcome = "5xx"
        elif r.status != 200:
            result.outcome = "bad: status %d %s" % (r.status, text[:200])
        elif result.stream:
            events = [l[6:] for l in text.splitlines() if l.startswith("data: ")]
            if not events or events[-1] != "[DONE]":
                result.outcome = "cut"  # a cut the client can see: no [DONE]
            else:
                chunks = [json.loads(e) for e in events[:-1]]
                content = "".join(c["choices"][0]["delta"].get("content") or ""
                                  for c in chunks if c["choices"])
                result.outcome = "ok" if len(content) >= MAX_TOKENS else "bad: short " + content
        else:
            v = json.loads(text)
            n = v["usage"]["completion_tokens"]
            result.outcome = "ok" if n == MAX_TOKENS else "bad: %d tokens" % n
    except socket.timeout:
        result.outcome = "bad: hung (no answer in %d s)" % REQUEST_TIMEOUT_S
    except Exception as e:
        result.outcome = "bad: %s: %s" % (type(e).__name__, e)
    finally:
        result.elapsed = time.time() - result.started
        if result.elapsed > REQUEST_TIMEOUT_S and not result.outcome.startswith("bad"):
            result.outcome = "bad: hung (%.1f s)" % result.elapsed
        conn.close()


def load(port, phase, seconds, events=()):
    """CLIENTS clients, each sending one request after another for `seconds`; `events` are
    (at_seconds, function) run meanwhile. Returns the Results and the times events ran."""
    results, lock, stop_at = [], threading.Lock(), time.time() + seconds

    def client(c):
        n = 0
        while time.time() < stop_at:
            r = Result("%s-%d-%d" % (phase, c, n), stream=(c + n) % 2 == 1, started=time.time())
            with lock:
                results.append(r)
            one_request(port, r)
            n += 1

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(CLIENTS)]
    t0 = time.time()
    for t in threads:
        t.start()
    ran = []
    for at, fn in events:
        time.sleep(max(0.0, t0 + at - time.time()))
        fn()
        ran.append(time.time())
    for t in threads:
        t.join(timeout=max(0.0, stop_at - time.time()) + REQUEST_TIMEOUT_S + 5)
    hung = [t for t in threads if t.is_alive()]
    assert not hung, "%d client threads still waiting" % len(hung)
    return results, ran


def tally(results, entries, boxes):
    """Counts: answered by each box, retried by nginx (after a 503, after an error: refused,
    reset or closed before the answer began), failed cleanly (nginx's 5xx, streams cut)."""
    names = {box.addr: box.name for box in boxes}
    counts = {"A": 0, "B": 0, "retried": 0, "after 503": 0, "retried after an error": 0,
              "5xx": 0, "cut": 0}
    for r in results:
        if r.outcome in ("5xx", "cut"):
            counts[r.outcome] += 1
        entry = entries.get(r.id)
        if entry is None:
            continue
        _, addrs, statuses = entry
        if r.outcome == "ok":
            name = names.get(addrs[-1], addrs[-1])
            counts[name] = counts.get(name, 0) + 1
        if len(addrs) > 1:
            counts["retried"] += 1
            if "503" in statuses[:-1]:
                counts["after 503"] += 1
            else:
                counts["retried after an error"] += 1
    return counts


def metric(text, name):
    m = re.search(r"^smolrun_%s (\S+)$" % re.escape(name), text, re.M)
    assert m, "no %s in /metrics:\n%s" % (name, text)
    return float(m.group(1))


def get(addr, path):
    host, port = addr.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type") or "", r.read().decode()
    finally:
        conn.close()


def main():
    if not os.access(NGINX, os.X_OK):
        sys.exit("no nginx: apt-get install -y nginx")
    checks = Checks()
    tmp = tempfile.mkdtemp(prefix="smolrun-nginx-")
    front = free_port()
    a = Instance("A", free_port(), 16, tmp)
    b = Instance("B", free_port(), 4, tmp)
    instances = [a, b]
    nginx = Nginx(tmp, front, (a.addr, b.addr))
    t_start = time.time()
    try:
        def overflow():
            results = [Result("overflow-%d" % i, stream=False, started=time.time())
                       for i in range(16)]
            threads = [threading.Thread(target=one_request, args=(front, r)) for r in results]
            for t in threads:
                t.start()
            for t in threads:
                t.join(REQUEST_TIMEOUT_S + 5)
            bad = [(r.id, r.outcome) for r in results if r.outcome != "ok"]
            counts = tally(results, nginx.entries_for(results), (a, b))
            print("      overflow: %r" % counts, flush=True)
            assert not bad, bad
            assert counts["after 503"] >= 1, "no request was passed on after a 503: %r" % counts
            assert counts["B"] >= 1, "B answered none: %r" % counts

        checks.run("overflow: 16 at once, B's 503s passed on to A, all answered 200", overflow)

        def kill():
            killed = []

            def kill_b():
                deadline = time.time() + 3
                while json.loads(get(b.addr, "/v1/state")[2])["generation"]["busy"] is not True:
                    assert time.time() < deadline, "B is not generating anything"
                    time.sleep(0.02)
                b.proc.kill()
                b.proc.wait()
                killed.append(time.time())

            results, _ = load(front, "kill", 11, [(6.5, kill_b)])
            entries = nginx.entries_for(results)
            counts = tally(results, entries, (a, b))
            after = [r for r in results if r.started > killed[0]]
            slowest = max(r.elapsed for r in results)
            print("      kill: %d requests, %d after the kill, slowest %.1f s: %r"
                  % (len(results), len(after), slowest, counts), flush=True)
            bad = [(r.id, r.outcome) for r in results if r.outcome not in ("ok", "5xx", "cut")]
            assert not bad, bad[:5]
            failed_after = [(r.id, r.outcome) for r in after if r.outcome != "ok"]
            assert not failed_after, "failed after the kill: %r" % failed_after[:5]
            assert len(after) >= CLIENTS, "too few requests after the kill: %d" % len(after)
            assert counts["A"] >= 1 and counts["B"] >= 1, counts
            hit = counts["cut"] + counts["retried after an error"]
            assert hit >= 1, "the kill touched no request: %r" % counts
            # A's own counters agree with what nginx saw A answer.
            status, ctype, text = get(a.addr, "/metrics")
            assert status == 200 and ctype.startswith("text/plain; version=0.0.4"), ctype
            tried = [(addr, st) for _, addrs, sts in entries.values()
                     for addr, st in zip(addrs, sts) if addr == a.addr]
            ok_2xx = sum(1 for _, st in tried if st == "200")
            ok_5xx = sum(1 for _, st in tried if st == "503")
            assert metric(text, 'requests_total{code="2xx"}') == ok_2xx, (text, ok_2xx)
            assert metric(text, 'requests_total{code="5xx"}') == ok_5xx, (text, ok_5xx)
            print("      A's /metrics: %d x 2xx, %d x 5xx, %d generations, as nginx logged"
                  % (ok_2xx, ok_5xx, metric(text, "generations_total")), flush=True)

        checks.run("kill -9 B under load: every request answered or failed cleanly, none hung; "
                   "all answered after the kill; A's /metrics match nginx's log", kill)

        def drain():
            b2 = Instance("B", b.port, 16, tmp)
            instances.append(b2)
            sent = []

            def wait_for_b_then_sigterm_a():
                # B is back once nginx has had an answer from it (its failures are forgotten).
                deadline = time.time() + 12
                while not any(e[0] == 200 and e[1][-1] == b2.addr and k.startswith("drain")
                              for k, e in nginx.entries().items()):
                    assert time.time() < deadline, "nginx sent nothing to the restarted B"
                    time.sleep(0.1)
                a.proc.send_signal(signal.SIGTERM)
                sent.append(time.time())

            results, _ = load(front, "drain", 9, [(0.5, wait_for_b_then_sigterm_a)])
            counts = tally(results, nginx.entries_for(results), (a, b2))
            after = [r for r in results if r.started > sent[0]]
            print("      drain: %d requests, %d after SIGTERM to A: %r"
                  % (len(results), len(after), counts), flush=True)
            bad = [(r.id, r.outcome) for r in results if r.outcome != "ok"]
            assert not bad, bad[:5]
            assert len(after) >= CLIENTS, "too few requests after SIGTERM: %d" % len(after)
            code = a.proc.wait(timeout=10)
            assert code == 0, "A exited with %d:\n%s" % (code, a.log()[-2000:])
            assert "every request answered" in a.log(), a.log()[-2000:]

        checks.run("SIGTERM to A under load: A drains and exits 0, every request answered 200",
                   drain)
    finally:
        nginx.stop()
        for i in instances:
            i.stop()
        print("nginx balance: %.1f s" % (time.time() - t_start))
        if checks.failed:
            print("nginx error log (tail):\n" + nginx.error_log()[-3000:])
            for i in instances:
                print("%s log (tail):\n%s" % (i.name, i.log()[-1500:]))
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
