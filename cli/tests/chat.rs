//! `smolrun chat` driven through a pseudo-terminal, as a person would use it: a reply appears,
//! Ctrl-C stops an answer and the session goes on, /reset forgets the conversation, Ctrl-D quits.
//! Meant for release mode: `cargo test --release -p smolrun --test chat`.

mod common;
use common::*;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A child process whose stdin, stdout and stderr are the slave side of a pty that is its
/// controlling terminal, so that a 0x03 byte on the master side is a real Ctrl-C (SIGINT).
struct PtySession {
    master: File,
    child: Child,
    /// Everything the child wrote so far.
    seen: String,
}

impl PtySession {
    fn spawn(args: &[&std::ffi::OsStr]) -> PtySession {
        let (mut master_fd, mut slave_fd) = (0, 0);
        // SAFETY: openpty writes two new descriptors; we own both from here on.
        let rc = unsafe {
            libc::openpty(
                &mut master_fd,
                &mut slave_fd,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        let master = unsafe { File::from_raw_fd(master_fd) };
        let slave = unsafe { OwnedFd::from_raw_fd(slave_fd) };
        let mut cmd = smolrun();
        cmd.args(args)
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        // SAFETY: only async-signal-safe calls between fork and exec: a new session, and the
        // pty (already on fd 0) as its controlling terminal.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("spawn smolrun chat");
        drop(cmd); // closes our copies of the slave side
        PtySession {
            master,
            child,
            seen: String::new(),
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).unwrap();
    }

    /// Reads until `done(all output since from)` holds; fails after `timeout` with the output.
    fn wait_for(
        &mut self,
        from: usize,
        timeout: Duration,
        what: &str,
        done: impl Fn(&str) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        let mut buf = [0u8; 4096];
        while !done(&self.seen[from..]) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "timed out waiting for {what}; output so far:\n{}",
                self.seen
            );
            let mut pfd = libc::pollfd {
                fd: self.master.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(1000) as i32) };
            if n <= 0 {
                continue;
            }
            match self.master.read(&mut buf) {
                Ok(0) | Err(_) => panic!(
                    "the chat ended while waiting for {what}; output:\n{}",
                    self.seen
                ),
                Ok(k) => self.seen.push_str(&String::from_utf8_lossy(&buf[..k])),
            }
        }
    }

    /// Sends a line and returns where its echo starts in `seen`.
    fn say(&mut self, line: &str) -> usize {
        let from = self.seen.len();
        self.send(format!("{line}\n").as_bytes());
        from
    }
}

impl Drop for PtySession {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The model's words after the echo of `question`, up to the terminal's "^C" echo or the
/// "(stopped)" note.
fn reply_of(output: &str, question: &str) -> String {
    let after = &output[output.find(question).unwrap() + question.len()..];
    let end = ["^C", "(stopped)"]
        .iter()
        .filter_map(|m| after.find(m))
        .min()
        .unwrap_or(after.len());
    after[..end].trim().to_string()
}

const LONG: Duration = Duration::from_secs(240);

#[test]
fn chat_replies_stops_on_ctrl_c_resets_and_quits_on_eof() {
    let model = gemma();
    let mut s = PtySession::spawn(&[
        "chat".as_ref(),
        "-m".as_ref(),
        model.as_os_str(),
        "--temp".as_ref(),
        "0".as_ref(),
        "-n".as_ref(),
        "400".as_ref(),
    ]);
    s.wait_for(0, LONG, "the first prompt", |o| o.contains("\n> "));

    // A reply appears; Ctrl-C stops it (400 tokens would take minutes) and the prompt returns.
    let question = "Tell me a long story about a dragon.";
    let from = s.say(question);
    s.wait_for(from, LONG, "the start of a reply", |o| {
        o.find(question)
            .is_some_and(|i| o[i + question.len()..].trim().chars().count() >= 12)
    });
    let t_interrupt = Instant::now();
    s.send(b"\x03");
    s.wait_for(from, LONG, "the answer to stop", |o| {
        o.contains("(stopped)") && o.ends_with("> ")
    });
    assert!(
        t_interrupt.elapsed() < Duration::from_secs(60),
        "Ctrl-C took {:?} to stop the answer",
        t_interrupt.elapsed()
    );
    let first_reply = reply_of(&s.seen[from..], question);
    assert!(!first_reply.is_empty(), "no reply:\n{}", s.seen);

    // /reset: the same question with greedy sampling gives the same reply again, which it
    // would not with the first exchange still in the conversation.
    let from = s.say("/reset");
    s.wait_for(from, LONG, "the reset", |o| {
        o.contains("(conversation reset)") && o.ends_with("> ")
    });
    let from = s.say(question);
    let enough = first_reply.chars().count().min(40);
    s.wait_for(from, LONG, "the second reply", |o| {
        o.find(question)
            .is_some_and(|i| o[i + question.len()..].trim().chars().count() >= enough)
    });
    s.send(b"\x03");
    s.wait_for(from, LONG, "the second answer to stop", |o| {
        o.contains("(stopped)") && o.ends_with("> ")
    });
    let second_reply = reply_of(&s.seen[from..], question);
    let n = first_reply.len().min(second_reply.len());
    assert!(n >= 10, "replies too short to compare:\n{}", s.seen);
    assert_eq!(
        &first_reply.as_bytes()[..n],
        &second_reply.as_bytes()[..n],
        "after /reset the same question should get the same greedy reply"
    );

    // End of input quits cleanly.
    s.send(b"\x04");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "chat did not quit on Ctrl-D:\n{}",
            s.seen
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "chat exited with {status}");
}

#[test]
fn chat_with_an_unknown_model_fails_with_a_hint() {
    let err = expect_failure(smolrun().args(["chat", "-m", "no-such-model"]));
    assert!(
        err.contains("'no-such-model'") && err.contains("tools/fetch-models.sh"),
        "{err}"
    );
}

/// Forty turns under a context of 150 tokens, read from a pipe: the chat goes on to the end.
/// Old turns are left out when the conversation no longer fits (the system message stays),
/// and an answer that fills the context goes on by a context shift; both are said. A model
/// with recurrent layers (synthetic-qwen35) cannot shift: its answer stops at the full
/// context, and the next turn still fits by leaving old turns out.
#[test]
fn a_chat_of_forty_turns_outgrows_the_context_and_goes_on() {
    for (name, shifts) in [("synthetic-qwen3", true), ("synthetic-qwen35", false)] {
        let path = model(&format!("{name}.gguf"));
        let model = name;
        let questions: String = (0..40)
            .map(|i| format!("Question number {i}: what comes after {i}?\n"))
            .collect();
        let mut child = smolrun()
            .args(["chat", "-m"])
            .arg(&path)
            .args(["-c", "150", "-n", "24", "--temp", "0", "-t", "1"])
            .args(["--system", "You count. Answer with one number."])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(questions.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{model}: {err}");
        // One status line per answer: all forty were answered.
        let answered = err.matches(" tok/s; prompt ").count();
        assert_eq!(answered, 40, "{model}: {err}");
        assert!(
            err.contains("oldest messages") && err.contains("were left out"),
            "{model}: no turn was left out: {err}"
        );
        assert!(!err.contains("smolrun: "), "{model}: {err}");
        let shifted = err.contains("were shifted out");
        let full = String::from_utf8_lossy(&out.stdout).contains("(the context is full");
        assert_eq!((shifted, full), (shifts, !shifts), "{model}: {err}");
    }
}
