//! `smolrun pull`, `list` and `rm` against a local HTTP server (a thread on 127.0.0.1; nothing
//! leaves the machine) that serves byte ranges, drops a connection on purpose, ignores ranges
//! when told to, and answers a Hugging Face-style file listing. The served model is a small
//! GGUF file generated here.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};

/// How the server answers one path.
#[derive(Clone, Default)]
struct Route {
    body: Vec<u8>,
    content_type: &'static str,
    /// The first request for this path gets the full headers but only this many body bytes,
    /// then the connection is closed.
    break_first_after: Option<usize>,
    /// Answer every request with 200 and the whole body, as servers without range support do.
    ignore_ranges: bool,
}

/// One request as the server saw it: path (with query) and Range header.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    path: String,
    range: Option<String>,
}

struct Server {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn start(routes: HashMap<String, Route>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            let mut broken = std::collections::HashSet::new();
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                // One connection at a time: pull makes one request at a time.
                let _ = serve_one(stream, &routes, &log, &mut broken);
            }
        });
        Server { base, seen }
    }

    fn requests(&self, path: &str) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.path == path)
            .cloned()
            .collect()
    }
}

fn serve_one(
    stream: TcpStream,
    routes: &HashMap<String, Route>,
    log: &Mutex<Vec<Seen>>,
    broken: &mut std::collections::HashSet<String>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut range = None;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("range") {
                range = Some(v.trim().to_string());
            }
        }
    }
    log.lock().unwrap().push(Seen {
        path: path.clone(),
        range: range.clone(),
    });
    let mut out = stream;
    let Some(route) = routes.get(&path) else {
        let msg = b"not found";
        write!(
            out,
            "HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            msg.len()
        )?;
        return out.write_all(msg);
    };
    let total = route.body.len();
    // `bytes=START-` or `bytes=START-END` (END inclusive).
    let (start, end) = match (&range, route.ignore_ranges) {
        (Some(r), false) => r
            .strip_prefix("bytes=")
            .and_then(|r| r.split_once('-'))
            .and_then(|(a, b)| {
                let end = match b {
                    "" => total,
                    b => b.parse::<usize>().ok()?.saturating_add(1).min(total),
                };
                Some((a.parse::<usize>().ok()?, end))
            })
            .unwrap_or((0, total)),
        _ => (0, total),
    };
    let ranged = range.is_some() && !route.ignore_ranges;
    if start >= total && start > 0 {
        return write!(
            out,
            "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{total}\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        );
    }
    let body = &route.body[start..end.max(start)];
    if start > 0 || (ranged && end < total) {
        write!(
            out,
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{}/{total}\r\n",
            end.max(start + 1) - 1
        )?;
    } else {
        write!(out, "HTTP/1.1 200 OK\r\n")?;
    }
    write!(
        out,
        "Content-Type: {}\r\nContent-Length: {}\r\nAccept-Ranges: bytes\r\nConnection: close\r\n\r\n",
        route.content_type,
        body.len()
    )?;
    match route.break_first_after {
        Some(n) if broken.insert(path) => {
            out.write_all(&body[..n.min(body.len())])?;
            out.flush()?;
            // Drop the connection mid-body.
            out.shutdown(std::net::Shutdown::Both)
        }
        _ => out.write_all(body),
    }
}

/// A valid GGUF v3 file of about 300 KB: architecture llama, file type Q4_K_M, no tensors, and a
/// u8 array of pseudo-random bytes as bulk.
fn gguf_bytes() -> Vec<u8> {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    let mut b = Vec::new();
    b.extend_from_slice(b"GGUF");
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes()); // tensors
    b.extend_from_slice(&3u64.to_le_bytes()); // metadata entries
    string(&mut b, "general.architecture");
    b.extend_from_slice(&8u32.to_le_bytes()); // string
    string(&mut b, "llama");
    string(&mut b, "general.file_type");
    b.extend_from_slice(&4u32.to_le_bytes()); // u32
    b.extend_from_slice(&15u32.to_le_bytes()); // Q4_K_M
    string(&mut b, "test.bulk");
    b.extend_from_slice(&9u32.to_le_bytes()); // array
    b.extend_from_slice(&0u32.to_le_bytes()); // of u8
    let n = 300_000u64;
    b.extend_from_slice(&n.to_le_bytes());
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b.push((x >> 24) as u8);
    }
    while b.len() % 32 != 0 {
        b.push(0);
    }
    b
}

fn sha256_hex(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

fn gguf_route(break_first_after: Option<usize>, ignore_ranges: bool) -> Route {
    Route {
        body: gguf_bytes(),
        content_type: "application/octet-stream",
        break_first_after,
        ignore_ranges,
    }
}

/// An empty model folder of this test.
fn models_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("smolrun-pull-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn smolrun(args: &[&str], models: &Path, hf: Option<&str>) -> Output {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_smolrun"));
    c.args(args)
        .env("SMOLRUN_MODELS", models)
        .env_remove("HF_TOKEN")
        .env_remove("HF_ENDPOINT");
    match hf {
        Some(base) => c.env("SMOLRUN_HF_ENDPOINT", base),
        None => c.env("SMOLRUN_HF_ENDPOINT", "http://127.0.0.1:9"), // never reached
    };
    c.output().expect("run smolrun")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn pull_resumes_after_the_server_drops_the_connection() {
    let data = gguf_bytes();
    let server = Server::start(HashMap::from([(
        "/m/model.gguf".to_string(),
        gguf_route(Some(100_000), false),
    )]));
    let dir = models_dir("resume");
    let url = format!("{}/m/model.gguf#sha256={}", server.base, sha256_hex(&data));
    let o = smolrun(&["pull", &url], &dir, None);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(dir.join("model.gguf")).unwrap(), data);
    assert_eq!(files_in(&dir), ["model.gguf"], "no partial file left");
    let reqs = server.requests("/m/model.gguf");
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert_eq!(reqs[0].range, None);
    assert_eq!(reqs[1].range.as_deref(), Some("bytes=100000-"));
    assert!(
        stderr(&o).contains("resuming at byte 100000"),
        "{}",
        stderr(&o)
    );

    // A second pull of a file already there downloads nothing.
    let o = smolrun(&["pull", &url], &dir, None);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(server.requests("/m/model.gguf").len(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn pull_resumes_a_partial_file_left_by_an_earlier_pull() {
    let data = gguf_bytes();
    let server = Server::start(HashMap::from([(
        "/model.gguf".to_string(),
        gguf_route(None, false),
    )]));
    let dir = models_dir("earlier");
    std::fs::write(dir.join("model.gguf.partial"), &data[..50_000]).unwrap();
    let o = smolrun(
        &["pull", &format!("{}/model.gguf", server.base)],
        &dir,
        None,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(dir.join("model.gguf")).unwrap(), data);
    let reqs = server.requests("/model.gguf");
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    assert_eq!(reqs[0].range.as_deref(), Some("bytes=50000-"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_server_that_ignores_ranges_makes_pull_start_over() {
    let data = gguf_bytes();
    let server = Server::start(HashMap::from([(
        "/model.gguf".to_string(),
        gguf_route(Some(70_000), true),
    )]));
    let dir = models_dir("no-ranges");
    // Stale bytes that a naive append would keep.
    std::fs::write(dir.join("model.gguf.partial"), vec![0xAB; 20_000]).unwrap();
    let o = smolrun(
        &["pull", &format!("{}/model.gguf", server.base)],
        &dir,
        None,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(dir.join("model.gguf")).unwrap(), data);
    assert!(
        stderr(&o).contains("ignored the range request"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sha256_mismatch_is_refused_and_nothing_installed() {
    let server = Server::start(HashMap::from([(
        "/model.gguf".to_string(),
        gguf_route(None, false),
    )]));
    let dir = models_dir("sha");
    let url = format!("{}/model.gguf#sha256={}", server.base, "0".repeat(64));
    let o = smolrun(&["pull", &url], &dir, None);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("sha256 mismatch"), "{}", stderr(&o));
    assert!(files_in(&dir).is_empty(), "{:?}", files_in(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_file_that_is_not_gguf_is_refused() {
    let page = b"<!DOCTYPE html><html><body>Sign in to continue</body></html>".repeat(2000);
    let server = Server::start(HashMap::from([(
        "/model.gguf".to_string(),
        Route {
            body: page,
            content_type: "text/html",
            ..Route::default()
        },
    )]));
    let dir = models_dir("html");
    let o = smolrun(
        &["pull", &format!("{}/model.gguf", server.base)],
        &dir,
        None,
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("is not a GGUF file") && err.contains("<!DO"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(files_in(&dir).is_empty(), "{:?}", files_in(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_file_is_a_clear_error() {
    let server = Server::start(HashMap::new());
    let dir = models_dir("404");
    let o = smolrun(&["pull", &format!("{}/nope.gguf", server.base)], &dir, None);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("HTTP 404"), "{}", stderr(&o));
    assert!(files_in(&dir).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A disk that fills: /dev/full stands in for the partial file (every write fails with ENOSPC).
#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_keeps_the_partial_file_and_says_so() {
    let server = Server::start(HashMap::from([(
        "/model.gguf".to_string(),
        gguf_route(None, false),
    )]));
    let dir = models_dir("full");
    std::os::unix::fs::symlink("/dev/full", dir.join("model.gguf.partial")).unwrap();
    let o = smolrun(
        &["pull", &format!("{}/model.gguf", server.base)],
        &dir,
        None,
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("disk full") && err.contains("resume"), "{err}");
    assert_eq!(files_in(&dir), ["model.gguf.partial"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn hugging_face_reference_list_and_rm() {
    let data = gguf_bytes();
    let listing = serde_json::json!({
        "id": "org/repo",
        "sha": "0123456789abcdef0123456789abcdef01234567",
        "siblings": [
            {"rfilename": "README.md", "size": 10},
            {"rfilename": "model-Q4_K_M.gguf", "size": data.len(),
             "lfs": {"sha256": sha256_hex(&data), "size": data.len(), "pointerSize": 135}},
            {"rfilename": "model-Q8_0.gguf", "size": 5,
             "lfs": {"sha256": "00", "size": 5, "pointerSize": 135}},
        ]
    });
    let server = Server::start(HashMap::from([
        (
            "/api/models/org/repo?blobs=true".to_string(),
            Route {
                body: listing.to_string().into_bytes(),
                content_type: "application/json",
                ..Route::default()
            },
        ),
        (
            "/org/repo/resolve/0123456789abcdef0123456789abcdef01234567/model-Q4_K_M.gguf"
                .to_string(),
            gguf_route(Some(123_456), false),
        ),
    ]));
    let dir = models_dir("hf");
    let hf = Some(server.base.as_str());

    // Case-insensitive quant; the lfs sha256 and size are checked; the drop is resumed.
    let o = smolrun(&["pull", "org/repo:q4_k_m"], &dir, hf);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(dir.join("model-Q4_K_M.gguf")).unwrap(), data);
    assert!(stderr(&o).contains("checking sha256"), "{}", stderr(&o));

    // No quant with two files, or a quant no file has: the candidates are listed.
    for (reference, says) in [
        ("org/repo", "2 files match"),
        ("org/repo:Q2_K", "no .gguf file matches 'Q2_K'"),
    ] {
        let o = smolrun(&["pull", reference], &dir, hf);
        assert!(!o.status.success());
        let err = stderr(&o);
        assert!(
            err.contains(says)
                && err.contains("model-Q4_K_M.gguf")
                && err.contains("model-Q8_0.gguf"),
            "{reference}: {err}"
        );
    }
    let o = smolrun(&["pull", "org/other:Q4_K_M"], &dir, hf);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("HTTP 404"), "{}", stderr(&o));

    // list: name, size, architecture and quant from the header; a partial download too.
    std::fs::write(dir.join("half.gguf.partial"), &data[..1000]).unwrap();
    let o = smolrun(&["list"], &dir, None);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let line = out
        .lines()
        .find(|l| l.starts_with("model-Q4_K_M "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("llama") && line.contains("Q4_K_M"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("half ") && l.contains("partial")),
        "{out}"
    );

    // The pulled model runs by its name: `gguf info` resolves it like `run -m`.
    let o = smolrun(&["gguf", "info", "model-Q4_K_M"], &dir, None);
    assert!(o.status.success(), "{}", stderr(&o));

    // A killed run's temporary (a pid that runs nowhere) is listed with its size.
    let stale = "model-Q4_K_M.gguf.scalar.repack.tmp-99999999";
    std::fs::write(dir.join(stale), vec![0u8; 2_000_000]).unwrap();
    let o = smolrun(&["list"], &dir, None);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        out.lines()
            .any(|l| l.contains(stale) && l.contains("2 MB") && l.contains("stopped")),
        "{out}"
    );

    // rm: the model, the repack caches beside it and the stale temporary; a second rm says it
    // is gone.
    std::fs::write(dir.join("model-Q4_K_M.gguf.scalar.repack"), b"x").unwrap();
    let o = smolrun(&["rm", "model-Q4_K_M"], &dir, None);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(files_in(&dir), ["half.gguf.partial"]);
    let o = smolrun(&["rm", "model-Q4_K_M"], &dir, None);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no model 'model-Q4_K_M'"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `smolrun plan` on a Hugging Face reference and on a URL reads the header with range requests
/// (never the whole file) and plans what the local file plans.
#[test]
fn plan_reads_only_the_header_over_http() {
    let model = smolrun_tests::model_path("synthetic-qwen3");
    let data = std::fs::read(&model).unwrap();
    let listing = serde_json::json!({
        "id": "org/synth",
        "sha": "0123456789abcdef0123456789abcdef01234567",
        "siblings": [
            {"rfilename": "synthetic-Q8_0.gguf", "size": data.len(),
             "lfs": {"sha256": sha256_hex(&data), "size": data.len(), "pointerSize": 135}},
        ]
    });
    let file_path =
        "/org/synth/resolve/0123456789abcdef0123456789abcdef01234567/synthetic-Q8_0.gguf";
    let server = Server::start(HashMap::from([
        (
            "/api/models/org/synth?blobs=true".to_string(),
            Route {
                body: listing.to_string().into_bytes(),
                content_type: "application/json",
                ..Route::default()
            },
        ),
        (
            file_path.to_string(),
            Route {
                body: data.clone(),
                content_type: "application/octet-stream",
                ..Route::default()
            },
        ),
    ]));
    let dir = models_dir("plan");
    let hf = Some(server.base.as_str());
    let plan = |model: &str| {
        let o = smolrun(
            &[
                "plan",
                model,
                "--mem",
                "1G",
                "--flash-mbps",
                "278",
                "-c",
                "256",
                "--weights",
                "stream",
                "--resident-mb",
                "20",
                "--json",
            ],
            &dir,
            hf,
        );
        assert!(o.status.success(), "{model}: {}", stderr(&o));
        let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v.as_object_mut().unwrap().remove("model");
        v
    };
    let local = plan(model.to_str().unwrap());
    assert_eq!(local["weights"], "stream", "{local}");
    assert_eq!(plan("org/synth:Q8_0"), local);
    assert_eq!(plan(&format!("{}{file_path}", server.base)), local);
    let reads = server.requests(file_path);
    // Each plan reads the first 4 MiB, then 8 MiB if the header (5.9 MB: the vocabulary) needs it.
    assert!(
        (2..=4).contains(&reads.len()),
        "{} reads for two plans",
        reads.len()
    );
    for r in reads {
        let range = r.range.expect("a range request");
        let (a, b) = range
            .strip_prefix("bytes=")
            .unwrap()
            .split_once('-')
            .unwrap();
        assert_eq!(a, "0");
        assert!(b.parse::<usize>().unwrap() < data.len() / 4, "{range}");
    }
    assert!(files_in(&dir).is_empty(), "plan downloads nothing");
}

/// `smolrun fit` over HTTP: the model goes from the server into the fitted file with range
/// requests, tensor by tensor (nothing else written to disk), byte-identical to the fit of the
/// local file; a server that ignores ranges is refused with nothing left behind.
#[test]
fn fit_reads_a_model_over_http_as_the_local_file() {
    let model = smolrun_tests::model_path("synthetic-qwen3moe");
    let data = std::fs::read(&model).unwrap();
    let file_path = "/models/synthetic-qwen3moe.gguf";
    let server = Server::start(HashMap::from([
        (
            file_path.to_string(),
            Route {
                body: data.clone(),
                content_type: "application/octet-stream",
                ..Route::default()
            },
        ),
        (
            "/no-ranges.gguf".to_string(),
            Route {
                body: data.clone(),
                content_type: "application/octet-stream",
                ignore_ranges: true,
                ..Route::default()
            },
        ),
    ]));
    let dir = models_dir("fit");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let fit = |input: &str, name: &str| {
        let dest = out.join(name);
        let o = smolrun(
            &[
                "fit",
                input,
                "-o",
                dest.to_str().unwrap(),
                "--mem",
                "8G",
                "--flash-mbps",
                "278",
                "--head-rows",
                "2048",
                "--model-positions",
                "0",
                "--experts-type",
                "q4_0",
            ],
            &dir,
            None,
        );
        (o, dest)
    };
    let (o, local) = fit(model.to_str().unwrap(), "local.gguf");
    assert!(o.status.success(), "{}", stderr(&o));
    let (o, remote) = fit(&format!("{}{file_path}", server.base), "remote.gguf");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        std::fs::read(&local).unwrap() == std::fs::read(&remote).unwrap(),
        "the fit over HTTP differs from the local fit"
    );
    let reads = server.requests(file_path);
    assert!(reads.len() > 10, "{} reads: tensor by tensor", reads.len());
    assert!(
        reads.iter().all(|r| r.range.is_some()),
        "only range requests"
    );
    let (o, dest) = fit(&format!("{}/no-ranges.gguf", server.base), "bad.gguf");
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("must serve byte ranges"),
        "{}",
        stderr(&o)
    );
    assert!(!dest.exists());
    assert_eq!(
        files_in(&out),
        vec!["local.gguf".to_string(), "remote.gguf".to_string()],
        "no temporary left"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
