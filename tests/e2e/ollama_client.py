#!/usr/bin/env python3
"""`smolrun serve` through the official `ollama` Python package (pip install ollama), and its
embeddings through the `openai` package.

    tests/e2e/ollama_client.py --fake                # the fake echo model: exact answers
    tests/e2e/ollama_client.py -m qwen2.5-coder-0.5b  # a real model: shapes and behaviour

Lists and shows the model, chats (whole and streamed), generates, embeds (/api/embed and
/v1/embeddings); on a real model, two paraphrases must embed closer than two unrelated
sentences. Errors come back as the client's ResponseError. Traffic goes to 127.0.0.1 only.
"""

import http.client
import json
import math
import sys
from urllib.parse import urlparse

import ollama
import openai

from common import Checks, Server, arguments

KEY = "e2e-key"
AUTH = {"Authorization": "Bearer " + KEY}


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def main():
    args = arguments(__doc__).parse_args()
    server = Server(args, extra=["--api-key", KEY])
    client = ollama.Client(host=server.url, headers=AUTH, timeout=300)
    fake = args.fake
    checks = Checks()
    model = None

    def list_models():
        nonlocal model
        models = client.list().models
        assert len(models) == 1, models
        m = models[0]
        model = m.model
        assert model.endswith(":latest"), model
        assert m.size > 0 and len(m.digest) == 64, m
        assert m.details.format == "gguf" and m.details.family, m.details
        assert m.details.parameter_size and m.details.quantization_level, m.details
        assert m.modified_at is not None, m
        if not fake:
            assert m.details.family == "qwen2" and m.details.quantization_level == "Q4_K_M", m.details

    def show():
        s = client.show(model)
        assert s.details.format == "gguf", s
        assert s.modelinfo and "general.architecture" in s.modelinfo, s.modelinfo
        assert s.template, s
        assert "embedding" in (s.capabilities or []), s.capabilities

    messages = [{"role": "user", "content": "Say hello in one short sentence."}]

    def chat():
        r = client.chat(model=model, messages=messages, options={"temperature": 0, "num_predict": 24})
        assert r.done and r.message.role == "assistant" and r.message.content, r
        assert r.done_reason in ("stop", "length"), r.done_reason
        assert r.prompt_eval_count >= 1 and r.eval_count >= 1, r
        assert r.total_duration > 0 and r.eval_duration >= 0 and r.prompt_eval_duration > 0, r
        if fake:
            assert r.message.content == "echo: Say hello in one short sentence.", r.message.content
            assert r.done_reason == "stop"

    def chat_stream():
        parts = list(client.chat(model=model, messages=messages, stream=True,
                                 options={"temperature": 0, "num_predict": 24}))
        assert len(parts) >= 2, parts
        *pieces, last = parts
        assert all(not p.done for p in pieces) and last.done, parts
        text = "".join(p.message.content for p in pieces)
        assert text, parts
        assert last.eval_count == sum(1 for _ in pieces) or last.eval_count >= 1, last
        whole = client.chat(model=model, messages=messages, options={"temperature": 0, "num_predict": 24})
        assert text == whole.message.content, (text, whole.message.content)

    def generate():
        r = client.generate(model=model, prompt="def add(a, b):", options={"temperature": 0, "num_predict": 3})
        assert r.done and r.response, r
        assert r.eval_count <= 3, r
        if fake:
            assert r.response == "echo: def" and r.done_reason == "length", r
        else:
            assert r.done_reason in ("stop", "length"), r
        text = "".join(p.response for p in client.generate(
            model=model, prompt="Count: one two three", stream=True,
            options={"temperature": 0, "num_predict": 40, "stop": ["three"]}))
        assert "three" not in text, text

    def seed_repeats():
        opts = {"temperature": 1.0, "top_p": 0.95, "seed": 1234, "num_predict": 12}
        msgs = [{"role": "user", "content": "Invent a name for a cat."}]
        a = client.chat(model=model, messages=msgs, options=opts).message.content
        b = client.chat(model=model, messages=msgs, options=opts).message.content
        assert a == b, (a, b)

    sentences = ["The cat sat on the mat.", "A cat was sitting on the mat.",
                 "Stock prices fell sharply on Tuesday."]

    def embed():
        r = client.embed(model=model, input=sentences)
        e = r.embeddings
        assert len(e) == 3 and len(e[0]) == len(e[2]) > 0, [len(v) for v in e]
        for v in e:
            assert abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-4, "not unit length"
        one = client.embed(model=model, input=sentences[0]).embeddings
        assert len(one) == 1 and cosine(one[0], e[0]) > 0.9999, "the same text embeds the same"
        if not fake:
            para, unrelated = cosine(e[0], e[1]), cosine(e[0], e[2])
            print("      /api/embed cosine: paraphrases %.3f, unrelated %.3f" % (para, unrelated))
            assert para > unrelated, (para, unrelated)

    def openai_embeddings():
        oa = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=300)
        # The client asks for base64 unless told otherwise; try both.
        r = oa.embeddings.create(model=model, input=sentences)
        f = oa.embeddings.create(model=model, input=sentences, encoding_format="float")
        assert [d.index for d in r.data] == [0, 1, 2], r.data
        assert r.usage.prompt_tokens == r.usage.total_tokens > 0, r.usage
        e = [d.embedding for d in r.data]
        for a, b in zip(e, (d.embedding for d in f.data)):
            assert max(abs(x - y) for x, y in zip(a, b)) < 1e-6, "base64 and float differ"
        if not fake:
            para, unrelated = cosine(e[0], e[1]), cosine(e[0], e[2])
            print("      /v1/embeddings cosine: paraphrases %.3f, unrelated %.3f" % (para, unrelated))
            assert para > unrelated, (para, unrelated)

    def errors():
        wrong = ollama.Client(host=server.url, headers={"Authorization": "Bearer nope"})
        try:
            wrong.list()
            raise AssertionError("a wrong key was accepted")
        except ollama.ResponseError as e:
            assert e.status_code == 401 and "key" in e.error, (e.status_code, e.error)
        try:
            # A schema keyword the grammar cannot enforce is refused, named with its path.
            client.generate(model=model, prompt="x",
                            format={"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]+$"}}})
            raise AssertionError("a format with 'pattern' was accepted")
        except ollama.ResponseError as e:
            assert e.status_code == 400 and "pattern" in e.error and "/properties/zip" in e.error, e.error
        try:
            long = "lorem ipsum " * (int(args.ctx) * 2)
            client.chat(model=model, messages=[{"role": "user", "content": long}])
            raise AssertionError("a prompt longer than the context was accepted")
        except ollama.ResponseError as e:
            assert e.status_code == 400 and "context" in e.error, e.error
        try:
            client.embed(model=model, input="lorem ipsum " * (int(args.ctx) * 2), truncate=False)
            raise AssertionError("an input longer than the context was accepted")
        except ollama.ResponseError as e:
            assert e.status_code == 400 and "context" in e.error, e.error

    def raw_malformed_json():
        host = urlparse(server.url)
        for path in ("/api/chat", "/api/generate", "/api/embed", "/v1/embeddings"):
            conn = http.client.HTTPConnection(host.hostname, host.port, timeout=60)
            conn.request("POST", path, body=b'{"messages": [', headers=dict(AUTH, **{"Content-Type": "application/json"}))
            r = conn.getresponse()
            err = json.loads(r.read())["error"]
            conn.close()
            message = err if isinstance(err, str) else err["message"]
            assert r.status == 400 and "JSON" in message, (path, r.status, err)

    for name, fn in [
        ("list", list_models),
        ("show", show),
        ("chat", chat),
        ("chat stream", chat_stream),
        ("generate, num_predict, stop", generate),
        ("seed repeats", seed_repeats),
        ("embed", embed),
        ("openai embeddings (base64 and float)", openai_embeddings),
        ("errors: 401, 400 format, 400 context", errors),
        ("raw HTTP: 400 malformed JSON", raw_malformed_json),
    ]:
        checks.run(name, fn)
    server.stop()
    print("\n".join("  server: " + l for l in server.log[-6:]))
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
