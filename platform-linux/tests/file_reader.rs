//! FileReader against real file systems: ext4 (or whatever holds the temp dir) for the
//! O_DIRECT path, /dev/shm (tmpfs: refuses O_DIRECT before Linux 6.6, accepts it after) and
//! /proc (refuses O_DIRECT at open on every kernel) for the buffered fallback.

use smolrun_core::platform::{IoError, ReadAt};
use smolrun_linux::{describe_io_error, AlignedBuf, FileReader, DIRECT_ALIGNMENT};
use std::path::{Path, PathBuf};

/// Byte i is a function of i that differs between neighbouring 4 KiB blocks.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 4096) as u8).collect()
}

/// A file removed when the test ends, pass or fail.
struct TempFile(PathBuf);

impl TempFile {
    fn new(dir: &Path, name: &str, bytes: &[u8]) -> TempFile {
        let path = dir.join(format!("smolrun-file-reader-{}-{name}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// read_at and read_direct agree with the bytes written, including the file's partial tail.
fn check_reads(reader: &FileReader, bytes: &[u8]) {
    assert_eq!(reader.len(), bytes.len() as u64);
    let mut small = [0u8; 10];
    reader.read_at(4090, &mut small).unwrap();
    assert_eq!(&small, &bytes[4090..4100]);

    let mut block = AlignedBuf::zeroed(2 * DIRECT_ALIGNMENT);
    reader.read_direct(4096, &mut block).unwrap();
    assert_eq!(&block[..], &bytes[4096..4096 + 8192]);

    // The last block reaches past the end of the file: the rest is zero-filled.
    let tail_start = bytes.len() / DIRECT_ALIGNMENT * DIRECT_ALIGNMENT;
    let mut tail = AlignedBuf::zeroed(DIRECT_ALIGNMENT);
    tail.fill(0xEE);
    reader.read_direct(tail_start as u64, &mut tail).unwrap();
    let in_file = bytes.len() - tail_start;
    assert_eq!(&tail[..in_file], &bytes[tail_start..]);
    assert!(tail[in_file..].iter().all(|&b| b == 0));
}

#[test]
fn direct_reads_on_the_temp_dir() {
    let bytes = pattern(5 * 4096 + 123);
    let file = TempFile::new(&std::env::temp_dir(), "direct", &bytes);
    let reader = FileReader::open(&file.0).unwrap();
    check_reads(&reader, &bytes);
    // ext4, xfs and btrfs accept O_DIRECT; say so when this machine's temp dir does not, so a
    // passing test is not mistaken for a test of the direct path.
    if !reader.is_direct() {
        eprintln!(
            "note: {} refuses O_DIRECT; only the fallback was exercised",
            std::env::temp_dir().display()
        );
    }
}

#[test]
fn dev_shm_reads_whichever_way_tmpfs_allows() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        panic!("/dev/shm is missing: this test needs a tmpfs there");
    }
    let bytes = pattern(3 * 4096 + 1);
    let file = TempFile::new(shm, "shm", &bytes);
    let reader = FileReader::open(&file.0).unwrap();
    check_reads(&reader, &bytes);
}

#[test]
fn proc_refuses_o_direct_and_reads_fall_back() {
    let reader = FileReader::open(Path::new("/proc/self/status")).unwrap();
    assert!(
        !reader.is_direct(),
        "procfs accepted O_DIRECT; the fallback test needs another refusing file system"
    );
    let mut buf = AlignedBuf::zeroed(DIRECT_ALIGNMENT);
    reader.read_direct(0, &mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("Name:"), "read {text:?}");
    assert!(
        buf.ends_with(&[0]),
        "the part past the end was not zero-filled"
    );
}

#[test]
fn short_read_names_file_offset_and_length() {
    let bytes = pattern(100);
    let file = TempFile::new(&std::env::temp_dir(), "short", &bytes);
    let reader = FileReader::open(&file.0).unwrap();
    let mut buf = [0u8; 50];
    let err = reader.read_at(80, &mut buf).unwrap_err();
    assert_eq!(err.code, IoError::UNEXPECTED_EOF);
    assert_eq!((err.offset, err.len), (80, 50));
    let text = err.to_string();
    assert!(text.contains(&file.0.display().to_string()), "{text}");
    assert!(text.contains("50 bytes at offset 80"), "{text}");

    // Direct: a range more than one block past the end is an error, not zeros.
    let mut far = AlignedBuf::zeroed(2 * DIRECT_ALIGNMENT);
    let err = reader.read_direct(0, &mut far).unwrap_err();
    assert_eq!(err.code, IoError::UNEXPECTED_EOF);
    let mut beyond = AlignedBuf::zeroed(DIRECT_ALIGNMENT);
    assert!(reader.read_direct(4096, &mut beyond).is_err());
}

#[test]
fn misaligned_direct_requests_are_refused_with_einval() {
    let bytes = pattern(3 * 4096);
    let file = TempFile::new(&std::env::temp_dir(), "misaligned", &bytes);
    let reader = FileReader::open(&file.0).unwrap();
    let mut buf = AlignedBuf::zeroed(2 * DIRECT_ALIGNMENT);
    let err = reader.read_direct(512, &mut buf[..4096]).unwrap_err();
    assert_eq!(err.code, libc::EINVAL);
    assert!(reader.read_direct(0, &mut buf[..100]).is_err());
    assert!(reader.read_direct(0, &mut buf[1..4097]).is_err());
    assert!(describe_io_error(&err).contains("Invalid argument"));
}

#[test]
fn open_failure_carries_errno_and_path() {
    let err = FileReader::open(Path::new("/nonexistent/model.gguf"))
        .err()
        .expect("opening a missing file succeeded");
    assert_eq!(err.code, libc::ENOENT);
    assert_eq!(err.file, "/nonexistent/model.gguf");
    assert!(describe_io_error(&err).contains("No such file"));
}
