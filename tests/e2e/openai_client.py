#!/usr/bin/env python3
"""`smolrun serve` through the official `openai` Python package (pip install openai).

    tests/e2e/openai_client.py --fake                # the fake echo model: exact answers
    tests/e2e/openai_client.py -m qwen2.5-coder-0.5b  # a real model: shapes and behaviour

Chat and completions, streamed and not, stop strings, logprobs, usage, seeds, and the
errors the client raises. Traffic goes to 127.0.0.1 only.
"""

import http.client
import json
import math
import socket
import sys
import time
from urllib.parse import urlparse

import openai

from common import Checks, Server, arguments

KEY = "e2e-key"


def main():
    args = arguments(__doc__).parse_args()
    server = Server(args, extra=["--api-key", KEY])
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=300)
    fake = args.fake
    checks = Checks()
    model = None

    def models():
        nonlocal model
        listed = client.models.list().data
        assert len(listed) == 1, listed
        model = listed[0].id
        assert model, listed

    def chat_plain():
        r = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Say hello in one short sentence."}],
            max_tokens=24,
            temperature=0,
        )
        c = r.choices[0]
        assert r.object == "chat.completion" and c.message.role == "assistant"
        assert c.message.content, r
        assert c.finish_reason in ("stop", "length"), c.finish_reason
        assert r.usage.completion_tokens >= 1 and r.usage.prompt_tokens >= 1
        assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
        if fake:
            assert c.message.content == "echo: Say hello in one short sentence.", c.message.content
            assert c.finish_reason == "stop"

    def chat_stream_with_usage():
        stream = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Name three colours: é, 漢字."}],
            max_tokens=20,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        text, finish, usage, n_chunks = "", None, None, 0
        for chunk in stream:
            n_chunks += 1
            if chunk.usage:
                usage = chunk.usage
                assert chunk.choices == [], chunk
                continue
            delta = chunk.choices[0].delta
            if delta.content:
                assert "\ufffd" not in delta.content, "split character in %r" % delta.content
                text += delta.content
            if chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
        assert n_chunks >= 3 and text and finish in ("stop", "length"), (n_chunks, text, finish)
        assert usage is not None and usage.completion_tokens >= 1, usage
        if fake:
            assert text == "echo: Name three colours: é, 漢字.", text

    def chat_max_tokens_is_length():
        r = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Write a long story about a lighthouse."}],
            max_completion_tokens=5,
        )
        assert r.choices[0].finish_reason == "length", r.choices[0]
        assert r.usage.completion_tokens == 5, r.usage

    def stop_strings():
        if fake:
            prompt, stop = "alpha STOP beta", ["STOP"]
        else:
            prompt, stop = "Count from 1 to 10, separated by commas and spaces.", ["5", "five"]
        for streamed in (False, True):
            kwargs = dict(model=model, messages=[{"role": "user", "content": prompt}],
                          max_tokens=60, temperature=0, stop=stop)
            if streamed:
                text, finish = "", None
                for chunk in client.chat.completions.create(stream=True, **kwargs):
                    if chunk.choices:
                        text += chunk.choices[0].delta.content or ""
                        finish = chunk.choices[0].finish_reason or finish
            else:
                r = client.chat.completions.create(**kwargs)
                text, finish = r.choices[0].message.content, r.choices[0].finish_reason
            for s in stop:
                assert s not in text, "stop string %r in %r" % (s, text)
            if fake:
                assert text == "echo: alpha ", text
            assert finish == "stop", (finish, text)

    def logprobs():
        r = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Reply with one word: yes or no?"}],
            max_tokens=8,
            temperature=0,
            logprobs=True,
            top_logprobs=3,
        )
        content = r.choices[0].logprobs.content
        assert content, r.choices[0]
        for entry in content:
            assert entry.logprob <= 0.0, entry
            assert len(entry.top_logprobs) == 3, entry
            tops = [t.logprob for t in entry.top_logprobs]
            assert tops == sorted(tops, reverse=True), tops
            assert sum(math.exp(t) for t in tops) <= 1.0 + 1e-4, tops
            assert entry.bytes is not None
            if not fake:
                # Greedy: the chosen token is the most likely one.
                assert abs(entry.logprob - tops[0]) < 1e-4, entry
        joined = b"".join(bytes(e.bytes) for e in content).decode("utf-8", "replace")
        assert r.choices[0].message.content.startswith(joined[: len(r.choices[0].message.content)])

    def completions():
        r = client.completions.create(model=model, prompt="The capital of France is", max_tokens=6,
                                      temperature=0, logprobs=2)
        c = r.choices[0]
        assert r.object == "text_completion" and c.text, r
        assert c.finish_reason in ("stop", "length")
        assert len(c.logprobs.tokens) == len(c.logprobs.token_logprobs) >= 1, c.logprobs
        assert all(len(t) <= 2 for t in c.logprobs.top_logprobs), c.logprobs
        assert r.usage.completion_tokens == len(c.logprobs.tokens) or c.finish_reason == "stop"
        if fake:
            # 6 tokens of 3 bytes
            assert c.text == "echo: The capital " and c.finish_reason == "length", c

    def completions_stream():
        text, finish = "", None
        for chunk in client.completions.create(model=model, prompt="def add(a, b):", max_tokens=12,
                                               temperature=0, stream=True):
            text += chunk.choices[0].text
            finish = chunk.choices[0].finish_reason or finish
        assert text and finish in ("stop", "length"), (text, finish)
        if fake:
            assert text == "echo: def add(a, b):" and finish == "stop", (text, finish)

    def seed_repeats():
        kwargs = dict(model=model, messages=[{"role": "user", "content": "Invent a name for a cat."}],
                      max_tokens=12, temperature=1.0, top_p=0.95, seed=1234,
                      presence_penalty=0.5, frequency_penalty=0.5)
        a = client.chat.completions.create(**kwargs).choices[0].message.content
        b = client.chat.completions.create(**kwargs).choices[0].message.content
        assert a == b, (a, b)

    def errors():
        wrong = openai.OpenAI(base_url=server.url + "/v1", api_key="nope", max_retries=0)
        try:
            wrong.models.list()
            raise AssertionError("a wrong key was accepted")
        except openai.AuthenticationError as e:
            assert e.status_code == 401 and e.body["code"] == "invalid_api_key", e.body
        try:
            client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}],
                                           temperature=5)
            raise AssertionError("temperature 5 was accepted")
        except openai.BadRequestError as e:
            assert e.body["param"] == "temperature", e.body
        try:
            long = "lorem ipsum " * (int(args.ctx) * 2)
            client.chat.completions.create(model=model, messages=[{"role": "user", "content": long}])
            raise AssertionError("a prompt longer than the context was accepted")
        except openai.BadRequestError as e:
            assert e.body["code"] == "context_length_exceeded", e.body

    host = urlparse(server.url)
    auth = {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"}

    def raw(method, path, body, headers=auth):
        conn = http.client.HTTPConnection(host.hostname, host.port, timeout=120)
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, data

    def raw_http_errors():
        status, data = raw("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": ')
        err = json.loads(data)["error"]
        assert status == 400 and err["message"] and err["type"], (status, data)
        # The server answers 413 from the Content-Length alone and may close before the body is
        # sent, so the body goes over a raw socket and a refused remainder is expected.
        big = b'{"messages": [{"role": "user", "content": "' + b"a" * (10 * 1024 * 1024) + b'"}]}'
        sock = socket.create_connection((host.hostname, host.port), timeout=120)
        head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (KEY, len(big)))
        try:
            sock.sendall(head.encode() + big)
        except (BrokenPipeError, ConnectionResetError):
            pass
        reply = b""
        try:
            while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                reply += chunk
        except ConnectionResetError:
            pass
        sock.close()
        assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
        body = reply.split(b"\r\n\r\n", 1)[1]
        assert json.loads(body)["error"]["type"], body[:200]

    def disconnect_mid_stream():
        body = json.dumps({"model": model, "stream": True, "max_tokens": 200, "temperature": 0,
                           "messages": [{"role": "user", "content": "Count from 1 to 100."}]})
        sock = socket.create_connection((host.hostname, host.port), timeout=120)
        head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (KEY, len(body)))
        sock.sendall(head.encode() + body.encode())
        got = b""
        while got.count(b"data: {") < 2:  # the stream has started: two chunks arrived
            chunk = sock.recv(4096)
            assert chunk, got
            got += chunk
        sock.close()
        t = time.time()
        r = client.chat.completions.create(model=model, max_tokens=8, temperature=0,
                                           messages=[{"role": "user", "content": "Say hi."}])
        assert r.choices[0].message.content, r
        # The abandoned generation (up to 200 tokens) was cancelled, not finished first.
        assert time.time() - t < 60, time.time() - t
        assert any("cancelled: client went away" in l for l in server.log), server.log[-6:]

    for name, fn in [
        ("models.list", models),
        ("chat", chat_plain),
        ("chat stream with usage", chat_stream_with_usage),
        ("chat max_completion_tokens -> length", chat_max_tokens_is_length),
        ("stop strings (plain and streamed)", stop_strings),
        ("chat logprobs + top_logprobs", logprobs),
        ("completions with logprobs", completions),
        ("completions stream", completions_stream),
        ("seed repeats", seed_repeats),
        ("errors: 401, 400 parameter, 400 context", errors),
        ("raw HTTP: 400 malformed JSON, 413 10 MB body", raw_http_errors),
        ("a client that leaves mid-stream; the next request is answered", disconnect_mid_stream),
    ]:
        checks.run(name, fn)
    server.stop()
    print("\n".join("  server: " + l for l in server.log[-6:]))
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
