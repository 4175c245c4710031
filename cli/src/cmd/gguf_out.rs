//! Writing a GGUF file in one streamed pass, shared by the `smolrun gguf` rewriters
//! (experts-last, requant): the header first, then each tensor's bytes at its aligned offset as
//! they are produced, never the whole file in RAM. The output goes to `OUT.tmp-PID`, which is
//! removed on any error and renamed to `OUT` only once it is complete and checked; one left by a
//! writer that was killed is removed by the next write of the same output.

use smolrun_core::gguf::GgufWriter;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Refuses `-o` naming the input file itself (the input is read while the output is written).
pub fn refuse_same_file(input: &Path, out: &Path) -> Result<(), String> {
    let same_file = match (input.canonicalize(), out.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same_file {
        return Err(format!(
            "-o {} is the input file: write to another file (the input is read while the \
             output is written)",
            out.display()
        ));
    }
    Ok(())
}

/// The temporary output `OUT.tmp-PID`; removed when dropped unless [`PartialFile::commit`]
/// renamed it to its final name.
pub struct PartialFile {
    pub path: PathBuf,
    keep: bool,
}

impl PartialFile {
    pub fn for_output(out: &Path) -> PartialFile {
        for t in smolrun_linux::remove_stale_temporaries(out) {
            eprintln!(
                "smolrun: removed {} ({} MB), left by a run (pid {}) that stopped while writing it",
                t.path.display(),
                t.bytes / 1_000_000,
                t.pid
            );
        }
        PartialFile {
            path: smolrun_linux::temporary_name(out),
            keep: false,
        }
    }

    /// Renames the finished temporary file to `out`.
    pub fn commit(mut self, out: &Path) -> Result<(), String> {
        std::fs::rename(&self.path, out).map_err(|e| {
            format!(
                "cannot rename {} to {}: {e}",
                self.path.display(),
                out.display()
            )
        })?;
        self.keep = true;
        Ok(())
    }
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The data section of a GGUF being written: tensors must come in the writer's order, each
/// in one or more [`write`](Self::write) calls after [`begin_tensor`](Self::begin_tensor).
pub struct TensorStream<'a> {
    layout: &'a GgufWriter,
    out: BufWriter<File>,
    path: PathBuf,
    /// Bytes of the data section written so far.
    written: u64,
    header_len: u64,
    zeros: Vec<u8>,
}

impl<'a> TensorStream<'a> {
    /// Creates `path` and writes the header of `layout`.
    pub fn create(path: &Path, layout: &'a GgufWriter) -> Result<TensorStream<'a>, String> {
        let file =
            File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        let mut s = TensorStream {
            layout,
            out: BufWriter::with_capacity(1 << 20, file),
            path: path.to_path_buf(),
            written: 0,
            header_len: 0,
            zeros: vec![0u8; layout.alignment() as usize],
        };
        let header = layout.header();
        s.header_len = header.len() as u64;
        s.out.write_all(&header).map_err(|e| s.write_error(e))?;
        Ok(s)
    }

    fn write_error(&self, e: std::io::Error) -> String {
        format!("writing {}: {e}", self.path.display())
    }

    fn pad_to(&mut self, offset: u64) -> Result<(), String> {
        let n = offset.checked_sub(self.written).ok_or_else(|| {
            format!(
                "{}: tensor data ran {} bytes past the next tensor's offset (a bug)",
                self.path.display(),
                self.written - offset
            )
        })? as usize;
        self.out
            .write_all(&self.zeros[..n])
            .map_err(|e| format!("writing {}: {e}", self.path.display()))?;
        self.written = offset;
        Ok(())
    }

    /// Pads up to tensor `index`'s offset.
    pub fn begin_tensor(&mut self, index: usize) -> Result<(), String> {
        self.pad_to(self.layout.tensor_offset(index))
    }

    pub fn write(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.out.write_all(bytes).map_err(|e| self.write_error(e))?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Pads the data section to its end and syncs the file; returns the file's length.
    pub fn finish(mut self) -> Result<u64, String> {
        self.pad_to(self.layout.data_len())?;
        let path = self.path.clone();
        let file = self
            .out
            .into_inner()
            .map_err(|e| format!("writing {}: {}", path.display(), e.into_error()))?;
        file.sync_all()
            .map_err(|e| format!("syncing {}: {e}", path.display()))?;
        Ok(self.header_len + self.layout.data_len())
    }
}

/// Where a rewriter reads the input's tensor bytes: a local file (pread) or a file on an HTTP
/// server (one range request per read), so a model can go from a registry to the device
/// without being stored twice.
pub enum Input {
    Local {
        file: File,
        path: PathBuf,
    },
    Remote {
        agent: ureq::Agent,
        src: crate::download::Source,
    },
}

impl Input {
    pub fn local(path: &Path) -> Result<Input, String> {
        let file = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        Ok(Input::Local {
            file,
            path: path.to_path_buf(),
        })
    }

    /// What the input is called in messages.
    pub fn label(&self) -> String {
        match self {
            Input::Local { path, .. } => path.display().to_string(),
            Input::Remote { src, .. } => src.url.clone(),
        }
    }

    /// Fills `buf` with the input's bytes from `at`.
    pub fn read_at(&self, buf: &mut [u8], at: u64) -> Result<(), String> {
        match self {
            Input::Local { file, path } => {
                use std::os::unix::fs::FileExt;
                file.read_exact_at(buf, at)
                    .map_err(|e| format!("reading {} at byte {at}: {e}", path.display()))
            }
            Input::Remote { agent, src } => crate::download::read_range(agent, src, at, buf)
                .map_err(|e| {
                    format!(
                        "{e}\nthe partial output was removed: run the same command again \
                         (nothing is kept between tries), or download the file first"
                    )
                }),
        }
    }
}
