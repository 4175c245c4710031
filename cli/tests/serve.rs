//! End-to-end tests of `smolrun serve` over real sockets, against the fake backend
//! (`--fake-backend`: a deterministic model that answers "echo: <last user message>" in
//! 3-byte tokens, so multi-byte characters are split across tokens).
//!
//! The HTTP client here is deliberately tiny (HTTP/1.1 over std's TcpStream) so the tests need
//! no extra crates and can drop a connection in the middle of a stream.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(extra: &[&str]) -> Server {
        let ctx: &[&str] = if extra.contains(&"-c") {
            &[]
        } else {
            &["-c", "256"]
        };
        // A folder of real models instead of the fake one.
        let backend: &[&str] = if extra.contains(&"--models-dir") {
            &[]
        } else {
            &["--fake-backend"]
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_smolrun"))
            .args(["serve", "--port", "0"])
            .args(backend)
            .args(ctx)
            .args(extra)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn smolrun serve");
        let stderr = child.stderr.take().expect("stderr is piped");
        let mut lines = BufReader::new(stderr).lines();
        let addr = loop {
            let line = lines
                .next()
                .expect("smolrun serve exited before printing its address")
                .expect("read stderr");
            if let Some(rest) = line.split("listening on http://").nth(1) {
                break rest.trim_end_matches('/').parse().expect("address");
            }
        };
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Server { child, addr, log }
    }

    fn log_lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Wait until a log line contains `needle` (log lines are printed when a request ends).
    fn wait_for_log(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(line) = self.log_lines().into_iter().find(|l| l.contains(needle)) {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "no log line with {needle:?} after {timeout:?}; log: {:#?}",
                self.log_lines()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

fn send_head(
    stream: &mut TcpStream,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body_len: usize,
) {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: {body_len}\r\n"
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).expect("send head");
}

/// Read the status line and headers.
fn read_head(reader: &mut impl BufRead) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    reader.read_line(&mut line).expect("status line");
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).expect("header line");
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').expect("header with a colon");
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    (status, headers)
}

/// Next chunk of a chunked body, None at the end.
fn read_chunk(reader: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let size = usize::from_str_radix(line.trim(), 16).ok()?;
    let mut data = vec![0; size + 2];
    reader.read_exact(&mut data).ok()?;
    data.truncate(size);
    (size > 0).then_some(data)
}

fn read_body(reader: &mut impl BufRead, headers: &[(String, String)]) -> Vec<u8> {
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let mut body = Vec::new();
    if chunked {
        while let Some(c) = read_chunk(reader) {
            body.extend(c);
        }
    } else {
        reader.read_to_end(&mut body).expect("body");
    }
    body
}

fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut stream = connect(addr);
    send_head(&mut stream, method, path, headers, body.len());
    stream.write_all(body).expect("send body");
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader);
    let body = read_body(&mut reader, &headers);
    Response {
        status,
        headers,
        body,
    }
}

fn post(addr: SocketAddr, path: &str, body: &Value) -> Response {
    request(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
}

fn chat_body(content: &str) -> Value {
    json!({"model": "any", "messages": [{"role": "user", "content": content}]})
}

/// The `data:` payloads of an SSE body, in order.
fn sse_events(body: &[u8]) -> Vec<String> {
    let text = std::str::from_utf8(body).expect("SSE body is UTF-8");
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("event without 'data: ': {e:?}"))
                .to_string()
        })
        .collect()
}

fn assert_error(r: &Response, status: u16, kind: &str, code: Option<&str>) {
    assert_eq!(r.status, status, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v = r.json();
    let e = &v["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert_eq!(e["type"], kind, "{v}");
    assert_eq!(e["code"].as_str(), code, "{v}");
}

#[test]
fn chat_answer_and_models() {
    let server = Server::start(&[]);
    let r = request(server.addr, "GET", "/health", &[], b"");
    assert_eq!((r.status, r.json()), (200, json!({"status": "ok"})));
    let models = request(server.addr, "GET", "/v1/models", &[], b"").json();
    assert_eq!(models["data"][0]["id"], "fake-echo");

    let r = post(
        server.addr,
        "/v1/chat/completions",
        &chat_body("héllo, 漢字!"),
    );
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], "echo: héllo, 漢字!");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let u = &v["usage"];
    assert_eq!(u["completion_tokens"], 7); // "echo: héllo, 漢字!" is 20 bytes
    assert_eq!(
        u["total_tokens"].as_u64(),
        Some(u["prompt_tokens"].as_u64().unwrap() + 7)
    );
    let line = server.wait_for_log("POST /v1/chat/completions 200", Duration::from_secs(5));
    assert!(
        line.contains("tokens=7") && line.contains("tok/s"),
        "{line}"
    );
}

#[test]
fn streamed_chat_never_splits_characters_nor_shows_the_stop_string() {
    let server = Server::start(&[]);
    // The fake's 3-byte tokens cut "é", "漢" and "字" in the middle, and "STOP" across tokens.
    let mut body = chat_body("é漢字 plus STOP and more");
    body["stream"] = json!(true);
    body["stop"] = json!(["STOP", "never"]);
    body["logprobs"] = json!(true);
    body["top_logprobs"] = json!(2);
    body["stream_options"] = json!({"include_usage": true});
    let r = post(server.addr, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events = sse_events(&r.body);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).expect("chunk JSON"))
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let mut text = String::new();
    let mut n_logprobs = 0;
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        if let Some(piece) = c["choices"][0]["delta"]["content"].as_str() {
            assert!(
                !piece.contains('\u{FFFD}'),
                "a character was split: {piece:?}"
            );
            text.push_str(piece);
        }
        if let Some(entries) = c["choices"][0]["logprobs"]["content"].as_array() {
            for e in entries {
                assert!(e["logprob"].as_f64().unwrap() <= 0.0);
                assert_eq!(e["top_logprobs"].as_array().unwrap().len(), 2);
            }
            n_logprobs += entries.len();
        }
    }
    assert_eq!(text, "echo: é漢字 plus ");
    assert!(n_logprobs > 0);
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["completion_tokens"].as_u64().unwrap() > 0);
}

#[test]
fn completions_with_max_tokens_end_with_length() {
    let server = Server::start(&[]);
    let r = post(
        server.addr,
        "/v1/completions",
        &json!({"prompt": "abcdefghijkl", "max_tokens": 2, "logprobs": 1}),
    );
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["text"], "echo: ");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["choices"][0]["logprobs"]["tokens"], json!(["ech", "o: "]));
    assert_eq!(v["usage"]["completion_tokens"], 2);
}

#[test]
fn errors_have_openai_shape_and_status() {
    let server = Server::start(&["--api-key", "sesame"]);
    let key = ("Authorization", "Bearer sesame");
    let json_type = ("Content-Type", "application/json");

    // No key, wrong key: 401. The page and /health stay open.
    let chat = chat_body("hi").to_string();
    let r = request(
        server.addr,
        "POST",
        "/v1/chat/completions",
        &[json_type],
        chat.as_bytes(),
    );
    assert_error(&r, 401, "authentication_error", Some("invalid_api_key"));
    let r = request(
        server.addr,
        "POST",
        "/v1/chat/completions",
        &[json_type, ("Authorization", "Bearer sesamE")],
        chat.as_bytes(),
    );
    assert_error(&r, 401, "authentication_error", Some("invalid_api_key"));
    assert_eq!(request(server.addr, "GET", "/health", &[], b"").status, 200);
    assert_eq!(request(server.addr, "GET", "/", &[], b"").status, 200);
    let r = request(
        server.addr,
        "POST",
        "/v1/chat/completions",
        &[json_type, key],
        chat.as_bytes(),
    );
    assert_eq!(r.status, 200);

    // Malformed JSON and bad parameters: 400.
    let r = request(
        server.addr,
        "POST",
        "/v1/chat/completions",
        &[key],
        b"{\"messages\": [",
    );
    assert_error(&r, 400, "invalid_request_error", None);
    let bad =
        json!({"messages": [{"role": "user", "content": "x"}], "temperature": -1}).to_string();
    let r = request(
        server.addr,
        "POST",
        "/v1/chat/completions",
        &[key],
        bad.as_bytes(),
    );
    assert_error(&r, 400, "invalid_request_error", None);
    assert_eq!(r.json()["error"]["param"], "temperature");

    // A prompt longer than the context (256 tokens of 3 bytes): 400.
    let long = chat_body(&"word ".repeat(400)).to_string();
    let r = request(
        server.addr,
        "POST",
        "/v1/chat/completions",
        &[key],
        long.as_bytes(),
    );
    assert_error(
        &r,
        400,
        "invalid_request_error",
        Some("context_length_exceeded"),
    );

    // Unknown path: 404.
    let r = request(server.addr, "GET", "/v1/nothing", &[key], b"");
    assert_error(&r, 404, "invalid_request_error", Some("not_found"));

    // A 10 MB body: 413, refused from its Content-Length before it is read.
    let mut stream = connect(server.addr);
    send_head(
        &mut stream,
        "POST",
        "/v1/chat/completions",
        &[key],
        10 << 20,
    );
    let _ = stream.write_all(&vec![b' '; 64 << 10]);
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader);
    let body = read_body(&mut reader, &headers);
    let r = Response {
        status,
        headers,
        body,
    };
    assert_error(&r, 413, "invalid_request_error", Some("request_too_large"));

    // The same without a Content-Length (chunked upload): refused once 1 MB has been read.
    let mut stream = connect(server.addr);
    let head = "POST /v1/completions HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\
                Authorization: Bearer sesame\r\nTransfer-Encoding: chunked\r\n\r\n";
    stream.write_all(head.as_bytes()).unwrap();
    let chunk = [b' '; 64 << 10];
    for _ in 0..32 {
        // The server answers and closes after its limit: later writes may fail.
        if stream
            .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .is_err()
            || stream.write_all(&chunk).is_err()
            || stream.write_all(b"\r\n").is_err()
        {
            break;
        }
    }
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader);
    let body = read_body(&mut reader, &headers);
    let r = Response {
        status,
        headers,
        body,
    };
    assert_error(&r, 413, "invalid_request_error", Some("request_too_large"));
}

#[test]
fn a_full_queue_answers_503_and_the_queue_drains() {
    // One job generates, one waits, every further request is refused at once.
    let server = Server::start(&["--queue", "1", "--fake-token-ms", "30"]);
    let addr = server.addr;

    // Job A: a long stream; reading its first chunk proves it is generating.
    let mut a_body = chat_body("[loop]");
    a_body["stream"] = json!(true);
    a_body["max_tokens"] = json!(60);
    let mut a = connect(addr);
    let a_text = a_body.to_string();
    send_head(&mut a, "POST", "/v1/chat/completions", &[], a_text.len());
    a.write_all(a_text.as_bytes()).unwrap();
    let mut a_reader = BufReader::new(a);
    assert_eq!(read_head(&mut a_reader).0, 200);
    assert!(read_chunk(&mut a_reader).is_some());

    // Job B waits in the queue.
    let b = std::thread::spawn(move || {
        let mut body = chat_body("queued");
        body["max_tokens"] = json!(3);
        post(addr, "/v1/chat/completions", &body)
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = request(addr, "GET", "/v1/state", &[], b"").json();
        if state["generation"]["queued"] == 1 {
            assert_eq!(state["generation"]["busy"], true);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "job B never showed up in the queue: {state}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    // Eight clients at once: the queue is full for all of them.
    let rejected: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                post(
                    addr,
                    "/v1/chat/completions",
                    &chat_body(&format!("client {i}")),
                )
            })
        })
        .collect();
    for r in rejected {
        let r = r.join().unwrap();
        assert_error(&r, 503, "server_error", Some("queue_full"));
        assert_eq!(r.header("retry-after"), Some("1"));
    }

    // A finishes, then B gets its answer.
    while read_chunk(&mut a_reader).is_some() {}
    let b = b.join().unwrap();
    assert_eq!(b.status, 200);
    assert_eq!(b.json()["choices"][0]["message"]["content"], "echo: que");
    // And the server takes new work again.
    let r = post(addr, "/v1/chat/completions", &chat_body("after"));
    assert_eq!(r.json()["choices"][0]["message"]["content"], "echo: after");
}

fn sigterm(server: &Server) {
    // SAFETY: kill(2) on the pid of our own child.
    let rc = unsafe { libc::kill(server.child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0, "kill -TERM failed");
}

/// Wait for the server to exit, at most `timeout`.
fn wait_exit(server: &mut Server, timeout: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = server.child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "still running {timeout:?} after SIGTERM; log: {:#?}",
            server.log_lines()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_stops_listening_finishes_accepted_requests_then_exits() {
    let mut server = Server::start(&["--queue", "2", "--fake-token-ms", "30"]);
    let addr = server.addr;

    // A streams (40 tokens, about 1.2 s), B waits in the queue, C is an idle keep-alive
    // connection with no request on it.
    let mut a_body = chat_body("[loop]");
    a_body["stream"] = json!(true);
    a_body["max_tokens"] = json!(40);
    let a_text = a_body.to_string();
    let mut a = connect(addr);
    send_head(&mut a, "POST", "/v1/chat/completions", &[], a_text.len());
    a.write_all(a_text.as_bytes()).unwrap();
    let mut a_reader = BufReader::new(a);
    assert_eq!(read_head(&mut a_reader).0, 200);
    assert!(read_chunk(&mut a_reader).is_some());
    let b = std::thread::spawn(move || {
        let mut body = chat_body("queued");
        body["max_tokens"] = json!(3);
        post(addr, "/v1/chat/completions", &body)
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while request(addr, "GET", "/v1/state", &[], b"").json()["generation"]["queued"] != 1 {
        assert!(Instant::now() < deadline, "job B never queued");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut idle = connect(addr);

    sigterm(&server);
    server.wait_for_log("SIGTERM", Duration::from_secs(5));
    // New connections are refused (a load balancer tries the next box at once)...
    assert!(
        TcpStream::connect(addr).is_err(),
        "still accepting after SIGTERM"
    );
    // ...an idle connection is closed rather than kept open...
    let mut byte = [0u8; 1];
    assert_eq!(
        std::io::Read::read(&mut idle, &mut byte).unwrap_or(0),
        0,
        "idle connection left open"
    );
    // ...and what was accepted is answered in full: the stream in flight and the queued job.
    let mut a_rest = Vec::new();
    while let Some(c) = read_chunk(&mut a_reader) {
        a_rest.extend(c);
    }
    assert_eq!(
        sse_events(&a_rest).last().map(String::as_str),
        Some("[DONE]")
    );
    let b = b.join().unwrap();
    assert_eq!(b.status, 200);
    assert_eq!(b.json()["choices"][0]["message"]["content"], "echo: que");

    let status = wait_exit(&mut server, Duration::from_secs(10));
    assert!(status.success(), "{status}");
    server.wait_for_log("every request answered", Duration::from_secs(5));
}

#[test]
fn a_second_sigterm_stops_without_waiting() {
    // Left alone, this stream would run for 1000 * 20 ms = 20 s.
    let mut server = Server::start(&["--fake-token-ms", "20", "-c", "1000"]);
    let mut body = chat_body("[loop]");
    body["stream"] = json!(true);
    let text = body.to_string();
    let mut s = connect(server.addr);
    send_head(&mut s, "POST", "/v1/chat/completions", &[], text.len());
    s.write_all(text.as_bytes()).unwrap();
    let mut reader = BufReader::new(s);
    assert_eq!(read_head(&mut reader).0, 200);
    assert!(read_chunk(&mut reader).is_some());

    sigterm(&server);
    server.wait_for_log("SIGTERM", Duration::from_secs(5));
    let started = Instant::now();
    sigterm(&server);
    wait_exit(&mut server, Duration::from_secs(5));
    assert!(started.elapsed() < Duration::from_secs(5));
    server.wait_for_log("second SIGTERM", Duration::from_secs(5));
}

#[test]
fn a_client_that_leaves_cancels_its_generation() {
    // 20 ms per token and no token limit: left alone, each job would run for 1000 * 20 ms = 20 s.
    let server = Server::start(&["--fake-token-ms", "20", "-c", "1000"]);
    let addr = server.addr;

    // Streaming client leaves after the first piece of text.
    let mut body = chat_body("[loop]");
    body["stream"] = json!(true);
    let text = body.to_string();
    let mut s = connect(addr);
    send_head(&mut s, "POST", "/v1/chat/completions", &[], text.len());
    s.write_all(text.as_bytes()).unwrap();
    let mut reader = BufReader::new(s);
    assert_eq!(read_head(&mut reader).0, 200);
    read_chunk(&mut reader).expect("role chunk");
    read_chunk(&mut reader).expect("first text chunk");
    drop(reader);
    let line = server.wait_for_log("cancelled", Duration::from_secs(5));
    assert!(line.contains("POST /v1/chat/completions 200"), "{line}");

    // The worker is free at once: a new request is answered long before a 20 s job could end.
    let started = Instant::now();
    let r = post(addr, "/v1/chat/completions", &chat_body("next"));
    assert_eq!(r.json()["choices"][0]["message"]["content"], "echo: next");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "took {:?}",
        started.elapsed()
    );

    // A non-streaming client that leaves mid-generation cancels it too.
    let text = chat_body("[loop]").to_string();
    let mut s = connect(addr);
    send_head(&mut s, "POST", "/v1/chat/completions", &[], text.len());
    s.write_all(text.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(s);
    let started = Instant::now();
    let r = post(addr, "/v1/chat/completions", &chat_body("again"));
    assert_eq!(r.json()["choices"][0]["message"]["content"], "echo: again");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "took {:?}",
        started.elapsed()
    );

    let state = request(addr, "GET", "/v1/state", &[], b"").json();
    let generated = state["generation"]["tokens_generated"].as_u64().unwrap();
    assert!(
        generated < 100,
        "cancelled jobs kept generating: {generated} tokens in all"
    );
}

#[test]
fn engine_failure_mid_stream_is_an_error_event() {
    let server = Server::start(&[]);
    let mut body = chat_body("[fail]");
    body["stream"] = json!(true);
    let r = post(server.addr, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200);
    let events = sse_events(&r.body);
    let last: Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(last["error"]["type"], "server_error", "{events:?}");
    // Without streaming it is a plain 500.
    let r = post(server.addr, "/v1/chat/completions", &chat_body("[fail]"));
    assert_error(&r, 500, "server_error", None);
}

#[test]
fn page_and_state() {
    let server = Server::start(&[]);
    let r = request(server.addr, "GET", "/", &[], b"");
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    let page = String::from_utf8(r.body).unwrap();
    assert!(page.contains("/v1/chat/completions") && page.contains("/v1/state"));
    // Old TV browsers: no optional chaining or nullish coalescing in the script.
    assert!(
        !page.contains("?.") && !page.contains("??"),
        "page uses ES2020 syntax"
    );
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "page loads something remote"
    );

    let s = request(server.addr, "GET", "/v1/state", &[], b"").json();
    assert_eq!(s["model"]["name"], "fake-echo");
    assert_eq!(s["model"]["n_ctx"], 256);
    assert!(s["ram"]["total_bytes"].as_u64().unwrap() > 0);
    assert!(s["cpu"]["cores"].as_u64().unwrap() > 0);
}

/// `GET /metrics` is the Prometheus text format: every sample line is `name{labels} number`,
/// and the counters move with the requests answered.
#[test]
fn metrics_count_requests_and_tokens() {
    let server = Server::start(&[]);
    let sample = |text: &str, name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name) && !l.starts_with('#'))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no sample {name} in:\n{text}"))
    };
    let before = request(server.addr, "GET", "/metrics", &[], b"");
    assert_eq!(before.status, 200);
    assert!(before
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let before = String::from_utf8(before.body).unwrap();
    for line in before.lines().filter(|l| !l.starts_with('#')) {
        let (name, value) = line.rsplit_once(' ').expect(line);
        assert!(name.starts_with("smolrun_"), "{line}");
        value.parse::<f64>().unwrap_or_else(|_| panic!("{line}"));
    }
    assert!(sample(&before, "smolrun_memory_bytes{kind=\"total\"}") > 0.0);
    assert_eq!(
        sample(&before, "smolrun_model_info{model=\"fake-echo\"}"),
        1.0
    );
    assert_eq!(sample(&before, "smolrun_queue_depth"), 0.0);

    let r = post(
        server.addr,
        "/v1/chat/completions",
        &chat_body("hello metrics"),
    );
    assert_eq!(r.status, 200);
    let missing = request(server.addr, "GET", "/v1/nowhere", &[], b"");
    assert_eq!(missing.status, 404);
    let after = String::from_utf8(request(server.addr, "GET", "/metrics", &[], b"").body).unwrap();
    let delta = |name: &str| sample(&after, name) - sample(&before, name);
    // The first /metrics request was answered before the second was rendered.
    assert!(
        delta("smolrun_requests_total{code=\"2xx\"}") >= 2.0,
        "{after}"
    );
    assert_eq!(
        delta("smolrun_requests_total{code=\"4xx\"}"),
        1.0,
        "{after}"
    );
    assert_eq!(delta("smolrun_generations_total"), 1.0, "{after}");
    assert!(delta("smolrun_generated_tokens_total") >= 1.0, "{after}");
    assert!(delta("smolrun_prompt_tokens_total") >= 1.0, "{after}");
}

fn dot(a: &Value, b: &Value) -> f64 {
    let (a, b) = (a.as_array().unwrap(), b.as_array().unwrap());
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| x.as_f64().unwrap() * y.as_f64().unwrap())
        .sum()
}

#[test]
fn embeddings_have_openai_shape_and_unit_length() {
    let server = Server::start(&[]);
    let r = post(
        server.addr,
        "/v1/embeddings",
        &json!({"model": "any", "input": ["abc", "abcabc", "xyz"], "encoding_format": "float"}),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], "fake-echo");
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["object"], "embedding");
        assert_eq!(d["index"], i);
        assert_eq!(d["embedding"].as_array().unwrap().len(), 16);
        assert!((dot(&d["embedding"], &d["embedding"]) - 1.0).abs() < 1e-5);
    }
    // The fake embeds byte histograms: "abc" and "abcabc" point the same way.
    assert!((dot(&data[0]["embedding"], &data[1]["embedding"]) - 1.0).abs() < 1e-5);
    assert!(dot(&data[0]["embedding"], &data[2]["embedding"]) < 0.5);
    // 3 + 6 + 3 bytes in 3-byte tokens.
    assert_eq!(v["usage"], json!({"prompt_tokens": 4, "total_tokens": 4}));

    // Token ids, and base64 (little-endian f32) as the Python client asks by default.
    let r = post(
        server.addr,
        "/v1/embeddings",
        &json!({"input": [1, 2], "encoding_format": "base64"}),
    );
    assert_eq!(r.status, 200);
    assert!(r.json()["data"][0]["embedding"].is_string());

    let r = post(
        server.addr,
        "/v1/embeddings",
        &json!({"input": "x".repeat(800)}),
    );
    assert_error(
        &r,
        400,
        "invalid_request_error",
        Some("context_length_exceeded"),
    );
    let r = request(
        server.addr,
        "POST",
        "/v1/embeddings",
        &[("Content-Type", "application/json")],
        b"{\"input\": ",
    );
    assert_error(&r, 400, "invalid_request_error", None);
    let r = post(server.addr, "/v1/embeddings", &json!({"input": []}));
    assert_error(&r, 400, "invalid_request_error", None);
    // After embeddings, generation still answers.
    let r = post(server.addr, "/v1/chat/completions", &chat_body("hi"));
    assert_eq!(r.json()["choices"][0]["message"]["content"], "echo: hi");
}

/// The JSON objects of an NDJSON body, in order.
fn ndjson(body: &[u8]) -> Vec<Value> {
    std::str::from_utf8(body)
        .expect("NDJSON body is UTF-8")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("line {l:?}: {e}")))
        .collect()
}

fn assert_ollama_error(r: &Response, status: u16) -> String {
    assert_eq!(r.status, status, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    let message = v["error"].as_str().unwrap_or_else(|| panic!("{v}"));
    assert!(!message.is_empty());
    message.to_string()
}

fn assert_done_object(v: &Value) {
    assert_eq!(v["done"], true, "{v}");
    assert_eq!(v["model"], "fake-echo:latest");
    assert!(v["created_at"].as_str().unwrap().ends_with('Z'));
    for key in [
        "total_duration",
        "load_duration",
        "prompt_eval_count",
        "prompt_eval_duration",
        "eval_count",
        "eval_duration",
    ] {
        assert!(v[key].is_u64(), "{key} in {v}");
    }
}

#[test]
fn ollama_model_endpoints() {
    let server = Server::start(&[]);
    let v = request(server.addr, "GET", "/api/version", &[], b"").json();
    assert!(v["version"].is_string());
    let tags = request(server.addr, "GET", "/api/tags", &[], b"").json();
    let m = &tags["models"][0];
    assert_eq!(m["name"], "fake-echo:latest");
    assert_eq!(m["size"], 1234);
    assert_eq!(m["digest"].as_str().unwrap().len(), 64);
    assert_eq!(m["details"]["format"], "gguf");
    assert_eq!(m["details"]["family"], "fake");
    assert_eq!(m["details"]["quantization_level"], "F32");
    let ps = request(server.addr, "GET", "/api/ps", &[], b"").json();
    assert_eq!(ps["models"][0]["name"], "fake-echo:latest");
    let show = post(server.addr, "/api/show", &json!({"model": "fake-echo"})).json();
    assert_eq!(show["details"]["family"], "fake");
    assert_eq!(show["model_info"]["fake.context_length"], 256);
    assert!(show["template"].as_str().unwrap().contains("messages"));
    let r = request(server.addr, "POST", "/api/show", &[], b"{nope");
    assert_ollama_error(&r, 400);
}

#[test]
fn ollama_chat_streams_ndjson_and_answers_whole() {
    let server = Server::start(&[]);
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "é漢字 ok"}]});
    let r = post(server.addr, "/api/chat", &body);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
    let lines = ndjson(&r.body);
    let (last, pieces) = lines.split_last().unwrap();
    let mut text = String::new();
    for p in pieces {
        assert_eq!(p["done"], false);
        assert_eq!(p["message"]["role"], "assistant");
        text.push_str(p["message"]["content"].as_str().unwrap());
    }
    assert_eq!(text, "echo: é漢字 ok");
    assert_done_object(last);
    assert_eq!(last["done_reason"], "stop");
    assert_eq!(last["eval_count"], 6); // "echo: é漢字 ok" is 17 bytes

    let mut body = body;
    body["stream"] = json!(false);
    body["options"] = json!({"num_predict": 2, "temperature": 0, "seed": 1});
    let r = post(server.addr, "/api/chat", &body);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v = r.json();
    assert_eq!(v["message"]["content"], "echo: ");
    assert_eq!(v["done_reason"], "length");
    assert_done_object(&v);
    server.wait_for_log("POST /api/chat 200", Duration::from_secs(5));
}

#[test]
fn ollama_generate_with_stop_and_load_only() {
    let server = Server::start(&[]);
    let r = post(
        server.addr,
        "/api/generate",
        &json!({"model": "m", "prompt": "one two three", "stream": false,
                "options": {"stop": ["three"]}}),
    );
    let v = r.json();
    assert_eq!(v["response"], "echo: one two ");
    assert_eq!(v["done_reason"], "stop");
    assert_done_object(&v);
    // raw: the prompt goes to the model as it is (the fake echoes all of it).
    let r = post(
        server.addr,
        "/api/generate",
        &json!({"prompt": "<|user|>\nraw", "raw": true, "stream": false}),
    );
    assert_eq!(r.json()["response"], "echo: raw");
    // An empty prompt only "loads" the model.
    let r = post(server.addr, "/api/generate", &json!({"model": "m"}));
    let lines = ndjson(&r.body);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["done_reason"], "load");
}

#[test]
fn ollama_embed() {
    let server = Server::start(&[]);
    let r = post(
        server.addr,
        "/api/embed",
        &json!({"model": "m", "input": ["abc", "abcabc"]}),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["model"], "fake-echo:latest");
    let e = v["embeddings"].as_array().unwrap();
    assert_eq!(e.len(), 2);
    assert!((dot(&e[0], &e[1]) - 1.0).abs() < 1e-5);
    assert_eq!(v["prompt_eval_count"], 3);
    // Ollama truncates to the context by default; truncate: false refuses.
    let long = "x".repeat(800);
    let r = post(server.addr, "/api/embed", &json!({"input": long}));
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["prompt_eval_count"], 256);
    let r = post(
        server.addr,
        "/api/embed",
        &json!({"input": long, "truncate": false}),
    );
    assert!(assert_ollama_error(&r, 400).contains("context"));
    let r = post(server.addr, "/api/embeddings", &json!({"prompt": "abc"}));
    assert_eq!(r.json()["embedding"].as_array().unwrap().len(), 16);
}

#[test]
fn ollama_errors_are_ollama_shaped() {
    let server = Server::start(&["--api-key", "sesame"]);
    let json_type = ("Content-Type", "application/json");
    let key = ("Authorization", "Bearer sesame");
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "stream": false});
    let r = request(
        server.addr,
        "POST",
        "/api/chat",
        &[json_type],
        chat.to_string().as_bytes(),
    );
    assert_ollama_error(&r, 401);
    let r = request(server.addr, "GET", "/api/tags", &[], b"");
    assert_ollama_error(&r, 401);
    for (path, body) in [
        ("/api/chat", "{\"messages\": ["),
        ("/api/generate", "[1]"),
        ("/api/embed", "not json"),
        ("/api/generate", r#"{"prompt":"x","format":"xml"}"#),
        (
            "/api/chat",
            r#"{"messages":[{"role":"user","content":"x"}],"options":{"top_p":2}}"#,
        ),
    ] {
        let r = request(
            server.addr,
            "POST",
            path,
            &[json_type, key],
            body.as_bytes(),
        );
        let message = assert_ollama_error(&r, 400);
        assert!(!message.contains('{'), "{path} {body}: {message}");
    }
    let r = request(
        server.addr,
        "POST",
        "/api/chat",
        &[json_type, key],
        chat.to_string().as_bytes(),
    );
    assert_eq!(r.json()["message"]["content"], "echo: hi");
    // An engine failure after the headers is an error line.
    let mut failing = chat;
    failing["messages"][0]["content"] = json!("[fail]");
    failing["stream"] = json!(true);
    let r = request(
        server.addr,
        "POST",
        "/api/chat",
        &[json_type, key],
        failing.to_string().as_bytes(),
    );
    let lines = ndjson(&r.body);
    assert!(lines.last().unwrap()["error"].is_string(), "{lines:?}");
}

/// The fake answers `[tool]` with a Hermes-format call (as Qwen2.5 writes one); with `tools`
/// in the request it comes back as OpenAI's `tool_calls` (whole and streamed) and Ollama's,
/// and without `tools` as plain text.
#[test]
fn tool_calls_are_read_out_of_the_answer() {
    let server = Server::start(&[]);
    let tools = json!([{"type": "function", "function": {"name": "echo",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}}]);
    let mut body = chat_body("[tool] hi");
    body["tools"] = tools.clone();
    let v = post(server.addr, "/v1/chat/completions", &body).json();
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    assert_eq!(choice["message"]["content"], Value::Null, "{v}");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "echo");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"text": "[tool] hi"}));
    assert!(call["id"].as_str().unwrap().starts_with("call_"));

    // Streamed: no text of the call leaks as content; the call comes whole before the end.
    body["stream"] = json!(true);
    let r = post(server.addr, "/v1/chat/completions", &body);
    let chunks: Vec<Value> = sse_events(&r.body)
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "", "{chunks:?}");
    let calls: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"]["tool_calls"].is_array())
        .collect();
    assert_eq!(calls.len(), 1, "{chunks:?}");
    assert_eq!(calls[0]["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "tool_calls");

    // Cut short by max_tokens: length, and no half call anywhere.
    body["stream"] = json!(false);
    body["max_tokens"] = json!(5);
    let v = post(server.addr, "/v1/chat/completions", &body).json();
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    assert!(
        v["choices"][0]["message"].get("tool_calls").is_none(),
        "{v}"
    );
    assert_eq!(v["choices"][0]["message"]["content"], "", "{v}");

    // Without tools the same answer is text.
    let v = post(server.addr, "/v1/chat/completions", &chat_body("[tool] hi")).json();
    assert!(v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .starts_with("<tool_call>"));

    // Ollama: the call's arguments are an object.
    let body = json!({"model": "x", "stream": false, "tools": tools,
                      "messages": [{"role": "user", "content": "[tool] hi"}]});
    let v = post(server.addr, "/api/chat", &body).json();
    assert_eq!(
        v["message"]["tool_calls"][0]["function"],
        json!({"name": "echo", "arguments": {"text": "[tool] hi"}}),
        "{v}"
    );
    assert_eq!(v["message"]["content"], "");
}

#[test]
fn response_format_and_tools_are_checked() {
    let server = Server::start(&[]);
    let mut body = chat_body("hi");
    body["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "x",
        "schema": {"type": "object", "properties": {"a": {"type": "string", "pattern": "x+"}}}}});
    let r = post(server.addr, "/v1/chat/completions", &body);
    assert_error(&r, 400, "invalid_request_error", None);
    let message = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("pattern") && message.contains("/properties/a"),
        "{message}"
    );

    let mut body = chat_body("hi");
    body["tools"] = json!([{"type": "function", "function": {"name": "f"}}]);
    body["tool_choice"] = json!({"type": "function", "function": {"name": "g"}});
    assert_error(
        &post(server.addr, "/v1/chat/completions", &body),
        400,
        "invalid_request_error",
        None,
    );
    let body = json!({"model": "x", "messages": [{"role": "user", "content": "hi"}],
                      "format": {"type": "string", "format": "hostname-ish"}});
    assert_ollama_error(&post(server.addr, "/api/chat", &body), 400);
}

/// A chat of 40 turns sent whole to a context of 256 tokens: the oldest turns are left out
/// (the system message stays), and the answer says so in its `dropped` field and the
/// `X-Context-Dropped-*` headers, on both APIs, streamed or not; an answer that fills the
/// context goes on by a context shift (`shifted_tokens`), unless `--no-context-shift`; a
/// newest message longer than the context alone stays a 400.
#[test]
fn a_chat_longer_than_the_context_drops_old_turns_and_says_so() {
    let mut messages = vec![json!({"role": "system", "content": "be brief"})];
    for i in 0..40 {
        messages.push(json!({"role": "user", "content": format!("question {i}")}));
        messages.push(json!({"role": "assistant", "content": format!("answer {i}")}));
    }
    messages.push(json!({"role": "user", "content": "last question"}));
    let server = Server::start(&[]);

    let r = post(
        server.addr,
        "/v1/chat/completions",
        &json!({"messages": messages}),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    let dropped = &v["dropped"];
    let n = dropped["messages"].as_u64().unwrap();
    assert!(n >= 2 && n.is_multiple_of(2), "{v}");
    assert_eq!(v["truncated"], true);
    assert_eq!(
        r.header("x-context-dropped-messages"),
        Some(n.to_string().as_str())
    );
    assert_eq!(
        r.header("x-context-dropped-tokens").map(str::to_string),
        Some(dropped["prompt_tokens"].to_string())
    );
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() < 256);
    let answer = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(answer.starts_with("echo: last"), "{answer}");

    // Streamed: the headers before the body, the field in the last chunk.
    let body = json!({"messages": messages, "stream": true});
    let r = post(server.addr, "/v1/chat/completions", &body);
    assert_eq!(
        r.header("x-context-dropped-messages"),
        Some(n.to_string().as_str())
    );
    let events = sse_events(&r.body);
    let last: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(last["dropped"]["messages"], n, "{last}");

    // Ollama's /api/chat.
    let body = json!({"model": "any", "messages": messages, "stream": false});
    let r = post(server.addr, "/api/chat", &body);
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["dropped"]["messages"], n);
    assert_eq!(
        r.header("x-context-dropped-messages"),
        Some(n.to_string().as_str())
    );

    // A short chat loses nothing and says nothing.
    let r = post(server.addr, "/v1/chat/completions", &chat_body("hi"));
    assert!(r.json().get("dropped").is_none());
    assert!(r.header("x-context-dropped-messages").is_none());

    // An answer that fills the context goes on (the fake loops on "[loop]").
    let body = json!({"messages": [{"role": "user", "content": "[loop]"}], "max_tokens": 300});
    let v = post(server.addr, "/v1/chat/completions", &body).json();
    assert_eq!(v["usage"]["completion_tokens"], 300, "{v}");
    assert!(v["dropped"]["shifted_tokens"].as_u64().unwrap() > 0, "{v}");
    drop(server);
    let server = Server::start(&["--no-context-shift"]);
    let v = post(server.addr, "/v1/chat/completions", &body).json();
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert!(
        v["usage"]["completion_tokens"].as_u64().unwrap() < 256,
        "{v}"
    );
    assert!(v.get("dropped").is_none(), "{v}");

    // The newest message alone does not fit: a 400 as before.
    let r = post(
        server.addr,
        "/v1/chat/completions",
        &chat_body(&"x".repeat(2000)),
    );
    assert_error(
        &r,
        400,
        "invalid_request_error",
        Some("context_length_exceeded"),
    );
}

fn get(addr: SocketAddr, path: &str) -> Response {
    request(addr, "GET", path, &[], b"")
}

/// `serve --models-dir`: two synthetic models in a folder. A request naming the other model
/// unloads the first and loads it (the answer names it, /api/ps shows it with its expiry);
/// ollama's keep_alive 0 unloads at once and an empty request loads; an unknown name is a 404
/// on both APIs; /v1/models and /api/tags list the folder; /api/delete removes a file (the
/// loaded one unloaded first) and a path is never taken for a name. The keep_alive timer
/// itself: 1 second, then /api/ps is empty.
#[test]
fn a_models_folder_switches_models_by_name_and_unloads_them() {
    let dir = std::env::temp_dir().join(format!("smolrun-serve-models-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, model) in [("alpha", "synthetic-qwen3"), ("beta", "synthetic-llama")] {
        std::os::unix::fs::symlink(
            smolrun_tests::model_path(model),
            dir.join(format!("{name}.gguf")),
        )
        .unwrap();
    }
    let server = Server::start(&[
        "--models-dir",
        dir.to_str().unwrap(),
        "-c",
        "128",
        "-t",
        "1",
    ]);
    let names = |v: &Value, key: &str, field: &str| -> Vec<String> {
        v[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m[field].as_str().unwrap().to_string())
            .collect()
    };
    let v = get(server.addr, "/v1/models").json();
    assert_eq!(names(&v, "data", "id"), ["alpha", "beta"]);
    let v = get(server.addr, "/api/tags").json();
    assert_eq!(names(&v, "models", "name"), ["alpha:latest", "beta:latest"]);
    // alpha, the first by name, is loaded at start and kept for good until a request says.
    assert_eq!(
        names(&get(server.addr, "/api/ps").json(), "models", "name"),
        ["alpha:latest"]
    );

    let chat = |model: &str, keep_alive: Value| {
        json!({"model": model, "messages": [{"role": "user", "content": "hi"}],
               "max_tokens": 3, "keep_alive": keep_alive})
    };
    let r = post(
        server.addr,
        "/v1/chat/completions",
        &chat("beta", json!("1h")),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["model"], "beta");
    let ps = get(server.addr, "/api/ps").json();
    assert_eq!(names(&ps, "models", "name"), ["beta:latest"]);
    let expires = ps["models"][0]["expires_at"].as_str().unwrap().to_string();
    assert!(!expires.starts_with("9999"), "{expires}");
    // Ollama's API, back to alpha.
    let body = json!({"model": "alpha:latest", "prompt": "hi", "stream": false,
                      "options": {"num_predict": 2}});
    let r = post(server.addr, "/api/generate", &body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["model"], "alpha:latest");
    // keep_alive 0 with no prompt: unloaded at once; with no keep_alive: loaded again.
    let r = post(
        server.addr,
        "/api/generate",
        &json!({"model": "alpha", "keep_alive": 0}),
    );
    assert_eq!(r.json()["done_reason"], "unload");
    assert_eq!(get(server.addr, "/api/ps").json()["models"], json!([]));
    let r = post(server.addr, "/api/generate", &json!({"model": "beta"}));
    assert_eq!(r.json()["done_reason"], "load");
    assert_eq!(
        names(&get(server.addr, "/api/ps").json(), "models", "name"),
        ["beta:latest"]
    );

    // Unknown names: 404 on both APIs, nothing unloaded.
    let r = post(
        server.addr,
        "/v1/chat/completions",
        &chat("gamma", json!(null)),
    );
    assert_error(&r, 404, "invalid_request_error", Some("model_not_found"));
    let r = post(
        server.addr,
        "/api/chat",
        &json!({"model": "../beta", "messages": []}),
    );
    assert_eq!(r.status, 404, "{}", String::from_utf8_lossy(&r.body));
    let r = post(
        server.addr,
        "/api/generate",
        &json!({"model": "beta", "keep_alive": "soon"}),
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        names(&get(server.addr, "/api/ps").json(), "models", "name"),
        ["beta:latest"]
    );

    // The keep_alive timer: a second, then unloaded.
    let r = post(
        server.addr,
        "/v1/chat/completions",
        &chat("beta", json!("1s")),
    );
    assert_eq!(r.status, 200);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(get(server.addr, "/api/ps").json()["models"], json!([]));

    // Delete: the file goes, the listing follows; the loaded model is unloaded first.
    let r = post(
        server.addr,
        "/v1/chat/completions",
        &chat("beta", json!(-1)),
    );
    assert_eq!(r.status, 200);
    let delete = |name: &str| {
        request(
            server.addr,
            "DELETE",
            "/api/delete",
            &[("Content-Type", "application/json")],
            json!({"model": name}).to_string().as_bytes(),
        )
    };
    assert_eq!(delete("beta").status, 200);
    assert!(!dir.join("beta.gguf").exists());
    assert_eq!(get(server.addr, "/api/ps").json()["models"], json!([]));
    assert_eq!(delete("beta").status, 404);
    assert_eq!(
        names(&get(server.addr, "/v1/models").json(), "data", "id"),
        ["alpha"]
    );
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// llama-server's slot API: the cache saved to a file under --slot-save-path, erased, and read
/// back (the same tokens), with its answers' shapes; names that are paths, a missing file, a
/// damaged one and a server without the folder are 400s, and the slot stays usable.
#[test]
fn slots_save_restore_and_erase_the_cache() {
    let root = std::env::temp_dir().join(format!("smolrun-serve-slots-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (models, slots) = (root.join("models"), root.join("slots"));
    std::fs::create_dir_all(&models).unwrap();
    std::os::unix::fs::symlink(
        smolrun_tests::model_path("synthetic-qwen3"),
        models.join("tiny.gguf"),
    )
    .unwrap();
    let server = Server::start(&[
        "--models-dir",
        models.to_str().unwrap(),
        "--slot-save-path",
        slots.to_str().unwrap(),
        "-c",
        "256",
        "-t",
        "1",
    ]);
    let body = json!({"messages": [{"role": "user", "content": "Tell me about the sea."}],
                      "max_tokens": 4});
    assert_eq!(post(server.addr, "/v1/chat/completions", &body).status, 200);
    let slot = |action: &str, filename: &str| {
        post(
            server.addr,
            &format!("/slots/0?action={action}"),
            &json!({ "filename": filename }),
        )
    };
    let saved = slot("save", "sea.bin").json();
    let n = saved["n_saved"].as_u64().unwrap();
    assert!(n > 8, "{saved}");
    assert_eq!(saved["filename"], "sea.bin");
    assert!(saved["n_written"].as_u64().unwrap() > 0 && saved["timings"]["save_ms"].is_number());
    assert!(slots.join("sea.bin").is_file());
    assert_eq!(slot("erase", "").json()["n_erased"], n);
    let restored = slot("restore", "sea.bin").json();
    assert_eq!(restored["n_restored"], n, "{restored}");
    assert_eq!(restored["n_read"], saved["n_written"]);
    assert_eq!(get(server.addr, "/slots").json()[0]["id"], 0);

    for bad in ["../sea.bin", "/etc/passwd", "", ".hidden"] {
        assert_eq!(slot("save", bad).status, 400, "{bad}");
    }
    assert_eq!(slot("restore", "missing.bin").status, 400);
    std::fs::write(slots.join("junk.bin"), b"SMOLSTAT but nothing else").unwrap();
    assert_eq!(slot("restore", "junk.bin").status, 400);
    assert_eq!(slot("dance", "sea.bin").status, 400);
    assert_eq!(
        post(server.addr, "/slots/1?action=erase", &json!({})).status,
        400
    );
    // Still answering.
    assert_eq!(post(server.addr, "/v1/chat/completions", &body).status, 200);
    drop(server);

    let server = Server::start(&["--models-dir", models.to_str().unwrap(), "-t", "1"]);
    let r = post(
        server.addr,
        "/slots/0?action=save",
        &json!({"filename": "x.bin"}),
    );
    assert_eq!(r.status, 400);
    assert!(String::from_utf8_lossy(&r.body).contains("--slot-save-path"));
    drop(server);
    std::fs::remove_dir_all(&root).unwrap();
}
