//! Resumable download of one GGUF file into the model folder (`smolrun pull`).
//!
//! The bytes go to `FILE.partial` beside the final name. A broken connection is retried with a
//! range request from the partial file's length (`Range: bytes=N-`, answered by 206 and a
//! Content-Range starting at N); a server that ignores ranges (200) makes it start over cleanly.
//! A later `pull` of the same file resumes the same way. Only a complete file that starts with
//! the GGUF magic and matches its sha256 (when known) is renamed into place; a disk that fills
//! keeps the partial file for the next try.

use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Failed tries in a row (no byte received) before giving up; a try that moved the download
/// forward resets the count.
const MAX_FAILURES_IN_A_ROW: u32 = 5;

/// Where a file comes from and what is known of it in advance.
pub struct Source {
    pub url: String,
    /// Lower-case hex.
    pub sha256: Option<String>,
    pub size: Option<u64>,
    /// An `Authorization` header value (a Hugging Face token); dropped on redirects to another
    /// host, such as a CDN.
    pub auth: Option<String>,
}

/// The HTTP client for pull: status codes are handled here (not errors), reads time out so a
/// stalled connection is retried instead of hanging.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(30)))
        .timeout_per_read(Some(Duration::from_secs(60)))
        .user_agent(concat!("smolrun/", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

/// Refuses https where this build has no TLS (see cli/Cargo.toml), before any request.
pub fn check_scheme(url: &str) -> Result<(), String> {
    if cfg!(target_os = "linux") || !url.starts_with("https://") {
        return Ok(());
    }
    Err(format!(
        "{url}: this build of smolrun has no TLS (https is built in for Linux targets only; on \
         Android use the static aarch64-unknown-linux-musl binary); use an http URL or download \
         the file elsewhere"
    ))
}

/// `dir/NAME.partial` of a final file `dir/NAME`.
pub fn partial_path(dest: &Path) -> PathBuf {
    let mut name = dest.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    dest.with_file_name(name)
}

/// What went wrong in one try.
enum Failure {
    /// Worth another try (connection broken or refused, server busy); the partial file stays.
    Retry(String),
    /// Another try would fail the same way.
    Fatal(String),
}

/// Downloads `src` to `dest` (resuming `dest.partial` if present), checks it and renames it into
/// place.
pub fn fetch(agent: &ureq::Agent, src: &Source, dest: &Path) -> Result<(), String> {
    check_scheme(&src.url)?;
    let partial = partial_path(dest);
    if let Some(dir) = dest.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let bar = progress_bar(src.size.unwrap_or(0));
    let mut failures = 0;
    loop {
        let before = file_len(&partial);
        match attempt(agent, src, &partial, &bar) {
            Ok(()) => break,
            Err(Failure::Fatal(msg)) => {
                bar.abandon();
                return Err(msg);
            }
            Err(Failure::Retry(msg)) => {
                if file_len(&partial) > before {
                    failures = 0;
                }
                failures += 1;
                let kept = file_len(&partial);
                if failures >= MAX_FAILURES_IN_A_ROW {
                    bar.abandon();
                    return Err(format!(
                        "{msg}; gave up after {failures} tries in a row; {kept} bytes kept in {} \
                         (run the same `smolrun pull` again to resume)",
                        partial.display()
                    ));
                }
                bar.suspend(|| eprintln!("pull: {msg}; retrying from byte {kept}"));
                std::thread::sleep(Duration::from_millis(250 << failures.min(5)));
            }
        }
    }
    bar.finish_and_clear();
    check_and_install(src, &partial, dest)
}

/// One request from the partial file's length to the end.
fn attempt(
    agent: &ureq::Agent,
    src: &Source,
    partial: &Path,
    bar: &ProgressBar,
) -> Result<(), Failure> {
    let have = file_len(partial);
    let mut req = agent.get(&src.url);
    if have > 0 {
        req = req.header("Range", format!("bytes={have}-"));
    }
    if let Some(auth) = &src.auth {
        req = req.header("Authorization", auth);
    }
    let resp = req
        .call()
        .map_err(|e| Failure::Retry(format!("{}: {e}", src.url)))?;
    let status = resp.status().as_u16();
    let content_range = resp
        .headers()
        .get("content-range")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (start, total) = match status {
        200 => {
            if have > 0 {
                bar.suspend(|| {
                    eprintln!(
                        "pull: the server ignored the range request (HTTP 200); starting over"
                    )
                });
            }
            (0, resp.body().content_length())
        }
        206 => match content_range.as_deref().and_then(parse_content_range) {
            Some((start, total)) if start == have => (start, total),
            _ => {
                // A range the server did not honour as asked: start over without one.
                truncate(partial)?;
                return Err(Failure::Retry(format!(
                    "the server answered a range request from byte {have} with Content-Range \
                     {content_range:?}; starting over"
                )));
            }
        },
        416 => {
            let total = content_range
                .as_deref()
                .and_then(|v| v.strip_prefix("bytes */"))
                .and_then(|t| t.trim().parse::<u64>().ok());
            if total == Some(have) {
                return Ok(()); // the partial file is complete
            }
            truncate(partial)?;
            return Err(Failure::Retry(format!(
                "the partial file ({have} bytes) does not fit the file on the server \
                 (Content-Range {content_range:?}); starting over"
            )));
        }
        401 | 403 => {
            return Err(Failure::Fatal(format!(
                "{}: HTTP {status}: not allowed; a gated or private Hugging Face repository \
                 needs a token in HF_TOKEN (and its licence accepted on the website)",
                src.url
            )))
        }
        408 | 429 | 500..=599 => {
            return Err(Failure::Retry(format!("{}: HTTP {status}", src.url)));
        }
        _ => {
            return Err(Failure::Fatal(format!(
                "{}: HTTP {status}{}",
                src.url,
                if status == 404 { " (not found)" } else { "" }
            )))
        }
    };
    if let (Some(want), Some(got)) = (src.size, total) {
        if want != got {
            return Err(Failure::Fatal(format!(
                "{}: the server sends a file of {got} bytes, {want} expected; not downloaded",
                src.url
            )));
        }
    }
    if let Some(total) = total {
        check_free_space(partial, total.saturating_sub(start))?;
        bar.set_length(total);
    }
    bar.set_position(start);
    if start > 0 {
        bar.suspend(|| eprintln!("pull: resuming at byte {start}"));
    }

    let mut file = if start == 0 {
        File::create(partial)
    } else {
        OpenOptions::new().append(true).open(partial)
    }
    .map_err(|e| Failure::Fatal(format!("cannot write {}: {e}", partial.display())))?;
    let mut body = resp.into_body().into_reader();
    let mut buf = vec![0u8; 1 << 16];
    let mut pos = start;
    let mut head = Vec::with_capacity(4);
    loop {
        let n = match body.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(Failure::Retry(format!(
                    "connection broken at byte {pos}: {e}"
                )))
            }
        };
        file.write_all(&buf[..n])
            .map_err(|e| write_error(partial, pos, &e))?;
        // Refuse a file that is not GGUF (an HTML error page, a wrong link) as soon as its
        // first bytes are in, before downloading the rest.
        if start == 0 && pos < 4 {
            head.extend_from_slice(&buf[..n.min(4 - pos as usize)]);
            check_magic(&head, &src.url).map_err(|e| {
                let _ = fs::remove_file(partial);
                Failure::Fatal(e)
            })?;
        }
        pos += n as u64;
        bar.set_position(pos);
    }
    file.sync_all().map_err(|e| write_error(partial, pos, &e))?;
    match total {
        Some(total) if pos < total => Err(Failure::Retry(format!(
            "connection closed at byte {pos} of {total}"
        ))),
        Some(total) if pos > total => {
            truncate(partial)?;
            Err(Failure::Fatal(format!(
                "{}: the server sent {pos} bytes, more than the {total} it announced",
                src.url
            )))
        }
        _ => Ok(()),
    }
}

/// The last checks on a complete partial file, then the rename.
fn check_and_install(src: &Source, partial: &Path, dest: &Path) -> Result<(), String> {
    let mut head = [0u8; 4];
    let read_head = File::open(partial).and_then(|mut f| f.read_exact(&mut head));
    let len = file_len(partial);
    let refuse = |why: String| {
        let _ = fs::remove_file(partial);
        Err(format!("{why}; removed {}", partial.display()))
    };
    if read_head.is_err() {
        return refuse(format!(
            "{}: {len} bytes, too short for a GGUF file",
            src.url
        ));
    }
    if let Err(e) = check_magic(&head, &src.url) {
        return refuse(e);
    }
    if let Some(size) = src.size {
        if len != size {
            return refuse(format!("{}: {len} bytes, {size} expected", src.url));
        }
    }
    if let Some(want) = &src.sha256 {
        eprintln!("pull: checking sha256");
        let got = sha256_file(partial)?;
        if !got.eq_ignore_ascii_case(want) {
            return refuse(format!(
                "{}: sha256 mismatch: expected {want}, got {got}",
                src.url
            ));
        }
    }
    fs::rename(partial, dest).map_err(|e| {
        format!(
            "cannot rename {} to {}: {e}",
            partial.display(),
            dest.display()
        )
    })
}

fn check_magic(head: &[u8], url: &str) -> Result<(), String> {
    if smolrun_core::gguf::MAGIC.starts_with(head) {
        return Ok(());
    }
    let shown: String = head
        .iter()
        .map(|&b| {
            if b.is_ascii_graphic() {
                (b as char).to_string()
            } else {
                format!("\\x{b:02x}")
            }
        })
        .collect();
    Err(format!(
        "{url} is not a GGUF file (it starts with \"{shown}\", not \"GGUF\"); not installed"
    ))
}

pub fn sha256_file(path: &Path) -> Result<String, String> {
    let mut f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The first `len` bytes of `src` by one range request, and the whole file's length (from
/// Content-Range, else the size the source knows). A server that ignores ranges is read only as
/// far as `len`. For `smolrun plan`: the header of a model, nothing else.
pub fn read_prefix(agent: &ureq::Agent, src: &Source, len: u64) -> Result<(Vec<u8>, u64), String> {
    check_scheme(&src.url)?;
    let mut req = agent
        .get(&src.url)
        .header("Range", format!("bytes=0-{}", len.saturating_sub(1)));
    if let Some(auth) = &src.auth {
        req = req.header("Authorization", auth);
    }
    let mut resp = req.call().map_err(|e| format!("{}: {e}", src.url))?;
    let status = resp.status().as_u16();
    let total = match status {
        206 => resp
            .headers()
            .get("content-range")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_content_range)
            .and_then(|(_, total)| total),
        200 => resp.body().content_length(),
        _ => return Err(format!("{}: HTTP {status}", src.url)),
    }
    .or(src.size)
    .ok_or_else(|| {
        format!(
            "{}: the server says neither the file's length nor a Content-Range total; download \
             it and plan the local file",
            src.url
        )
    })?;
    let mut bytes = Vec::new();
    resp.body_mut()
        .as_reader()
        .take(len)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{}: {e}", src.url))?;
    Ok((bytes, total))
}

/// Reads `buf.len()` bytes of `src` from `at` with one range request; a server that does not
/// answer 206 with exactly that range is an error (a rewriter reads the file in pieces).
pub fn read_range(
    agent: &ureq::Agent,
    src: &Source,
    at: u64,
    buf: &mut [u8],
) -> Result<(), String> {
    if buf.is_empty() {
        return Ok(());
    }
    check_scheme(&src.url)?;
    let end = at + buf.len() as u64 - 1;
    let mut req = agent
        .get(&src.url)
        .header("Range", format!("bytes={at}-{end}"));
    if let Some(auth) = &src.auth {
        req = req.header("Authorization", auth);
    }
    let mut resp = req.call().map_err(|e| format!("{}: {e}", src.url))?;
    let status = resp.status().as_u16();
    let start = resp
        .headers()
        .get("content-range")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_content_range)
        .map(|(start, _)| start);
    if status != 206 || start != Some(at) {
        return Err(format!(
            "{}: asked for bytes {at}-{end}, the server answered HTTP {status}{}: it must serve byte ranges",
            src.url,
            start.map_or(String::new(), |s| format!(" from byte {s}"))
        ));
    }
    resp.body_mut()
        .as_reader()
        .read_exact(buf)
        .map_err(|e| format!("{}: reading bytes {at}-{end}: {e}", src.url))
}

/// `bytes START-END/TOTAL` -> (START, TOTAL); TOTAL may be `*` (unknown).
fn parse_content_range(v: &str) -> Option<(u64, Option<u64>)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (start, _end) = range.split_once('-')?;
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    Some((start.trim().parse().ok()?, total))
}

fn write_error(partial: &Path, pos: u64, e: &std::io::Error) -> Failure {
    let full = matches!(
        e.kind(),
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded | ErrorKind::FileTooLarge
    );
    Failure::Fatal(if full {
        format!(
            "disk full while writing {} ({e}); {pos} bytes kept: free some space and run the \
             same `smolrun pull` again to resume",
            partial.display()
        )
    } else {
        format!(
            "cannot write {} at byte {pos}: {e}; the partial file is kept for a resume",
            partial.display()
        )
    })
}

/// Refuses up front a download the file system has no room for (when it can tell).
fn check_free_space(partial: &Path, needed: u64) -> Result<(), Failure> {
    let Some(free) = partial.parent().and_then(free_bytes) else {
        return Ok(());
    };
    if free < needed {
        return Err(Failure::Fatal(format!(
            "{} has {} MB free, the download needs {} MB more; free some space and run the same \
             `smolrun pull` again (the partial file, if any, is kept)",
            partial.parent().unwrap_or(partial).display(),
            free / 1_000_000,
            needed.div_ceil(1_000_000)
        )));
    }
    Ok(())
}

#[cfg(unix)]
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `st` is a valid statvfs to fill.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

#[cfg(not(unix))]
fn free_bytes(_dir: &Path) -> Option<u64> {
    None
}

fn truncate(partial: &Path) -> Result<(), Failure> {
    match File::create(partial) {
        Ok(_) => Ok(()),
        Err(e) => Err(Failure::Fatal(format!(
            "cannot truncate {}: {e}",
            partial.display()
        ))),
    }
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// A byte-count progress bar on stderr (indicatif draws nothing when stderr is no terminal).
fn progress_bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(
        "pull [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range() {
        assert_eq!(
            parse_content_range("bytes 100-199/200"),
            Some((100, Some(200)))
        );
        assert_eq!(parse_content_range("bytes 0-9/*"), Some((0, None)));
        assert_eq!(parse_content_range("bytes */200"), None);
        assert_eq!(parse_content_range("items 0-9/10"), None);
    }

    #[test]
    fn magic() {
        assert!(check_magic(b"GGUF", "u").is_ok());
        assert!(check_magic(b"GG", "u").is_ok()); // a prefix so far
        let e = check_magic(b"<!DO", "u").unwrap_err();
        assert!(e.contains("not a GGUF file") && e.contains("<!DO"), "{e}");
    }
}
