//! `smolrun gguf experts-last`: rewrites a mixture-of-experts GGUF so that every expert tensor
//! comes after every other tensor, in one streamed pass.
//!
//! Why: an expert pager keeps the non-expert weights resident and reads experts from flash on
//! demand. With the experts last, the non-expert weights are one prefix of the file, which a
//! device that cannot map the whole file (iOS: ~1.7 GB of address space for a 5.5 GB model)
//! maps alone. The new metadata key `smolrun.expert_data_offset` says where that prefix ends
//! (see `smolrun_core::gguf::expert_layout`).
//!
//! Only the order changes: every metadata entry is kept (an old `smolrun.expert_data_offset`
//! is replaced), every tensor's bytes are copied unchanged, through one bounded buffer, never
//! the whole file. The output is written to `OUT.tmp`, parsed back and checked, then renamed;
//! on any error the partial file is removed.

use super::gguf_out::{refuse_same_file, PartialFile, TensorStream};
use smolrun_core::gguf::{
    expert_data_offset, is_expert_tensor, Gguf, GgufWriter, MetaValue, TensorInfo,
    EXPERT_DATA_OFFSET_KEY,
};
use smolrun_linux::MappedFile;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Bytes copied per read: large reads for flash, a bounded amount of RAM for any file size.
const COPY_BUFFER: usize = 8 << 20;

/// Where each output tensor's bytes come from in the input file.
struct Source {
    offset: u64,
    len: u64,
}

/// The output's header (metadata and tensor table in the new order) and, per output tensor,
/// where its bytes are in the input.
struct Plan {
    writer: GgufWriter,
    sources: Vec<Source>,
    /// Index of the first expert tensor in the output order.
    first_expert: usize,
}

impl Plan {
    /// Absolute offset of the first expert tensor's data in the output.
    fn expert_data_offset(&self) -> u64 {
        self.writer.header().len() as u64 + self.writer.tensor_offset(self.first_expert)
    }
}

/// The output layout for `g`, with `offset` as the value of `smolrun.expert_data_offset`.
fn plan(g: &Gguf, path: &Path, offset: u64) -> Result<Plan, String> {
    let bad = |e: smolrun_core::gguf::GgufError| format!("{}: {e}", path.display());
    let mut writer = GgufWriter::new().with_version(g.version).map_err(bad)?;
    for entry in g
        .metadata
        .iter()
        .filter(|e| e.key != EXPERT_DATA_OFFSET_KEY)
    {
        writer
            .add(entry.key, MetaValue::from(entry.value))
            .map_err(bad)?;
    }
    writer.add(EXPERT_DATA_OFFSET_KEY, offset).map_err(bad)?;
    let (experts, others): (Vec<&TensorInfo>, Vec<&TensorInfo>) =
        g.tensors.iter().partition(|t| is_expert_tensor(t));
    if experts.is_empty() {
        return Err(format!(
            "{} has no expert tensors (3-D tensors with more than one expert, such as \
             blk.N.ffn_up_exps.weight): experts-last is for mixture-of-experts models only; \
             this model is already as it should be",
            path.display()
        ));
    }
    let mut sources = Vec::with_capacity(g.tensors.len());
    for t in others.iter().chain(&experts) {
        writer
            .add_tensor(t.name, t.ggml_type, t.shape())
            .map_err(bad)?;
        sources.push(Source {
            offset: t.offset,
            len: t.n_bytes,
        });
    }
    Ok(Plan {
        writer,
        sources,
        first_expert: others.len(),
    })
}

/// `smolrun gguf experts-last -m IN -o OUT`.
pub fn experts_last(input: &str, out: &Path) -> Result<(), String> {
    let in_path = crate::args::resolve(input)?;
    refuse_same_file(&in_path, out)?;
    // The header is parsed from the mapped file; tensor bytes are read with pread, so only the
    // header's pages and one buffer are ever in RAM.
    let mapped = MappedFile::open(&in_path)?;
    let g = Gguf::parse(mapped.bytes()).map_err(|e| format!("{}: {e}", in_path.display()))?;
    // The key is a fixed-size u64: its value does not move anything, so plan once to learn the
    // offset, and again to write it.
    let offset = plan(&g, &in_path, 0)?.expert_data_offset();
    let plan = plan(&g, &in_path, offset)?;
    let n_experts = g.tensors.len() - plan.first_expert;
    drop(g);
    drop(mapped);

    let partial = PartialFile::for_output(out);
    let tmp = &partial.path;
    let total = copy_tensors(&in_path, tmp, &plan)?;

    // Parse the result back and check its layout before it takes the final name.
    let check = MappedFile::open(tmp)?;
    if check.bytes().len() as u64 != total {
        return Err(format!(
            "{}: wrote {} bytes, expected {total}",
            tmp.display(),
            check.bytes().len()
        ));
    }
    let written = Gguf::parse(check.bytes())
        .map_err(|e| format!("{} does not parse back: {e}", tmp.display()))?;
    match expert_data_offset(&written) {
        Ok(Some(found)) if found == offset => {}
        Ok(found) => {
            return Err(format!(
                "{}: {EXPERT_DATA_OFFSET_KEY} reads back as {found:?}, expected {offset}; \
                 please report this",
                tmp.display()
            ))
        }
        Err(e) => return Err(format!("{}: {e}", tmp.display())),
    }
    drop(written);
    drop(check);
    partial.commit(out)?;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    eprintln!(
        "wrote {} ({:.1} MiB): {n_experts} expert tensors last; the non-expert weights are \
         the first {:.1} MiB ({EXPERT_DATA_OFFSET_KEY} = {offset})",
        out.display(),
        mib(total),
        mib(offset)
    );
    Ok(())
}

/// Writes the header, then every tensor of `plan` from `in_path` at its aligned offset;
/// returns the file's length.
fn copy_tensors(in_path: &Path, tmp: &Path, plan: &Plan) -> Result<u64, String> {
    let src = File::open(in_path).map_err(|e| format!("cannot open {}: {e}", in_path.display()))?;
    let mut out = TensorStream::create(tmp, &plan.writer)?;
    let mut buf = vec![0u8; COPY_BUFFER];
    for (i, source) in plan.sources.iter().enumerate() {
        out.begin_tensor(i)?;
        let mut done = 0u64;
        while done < source.len {
            let n = (source.len - done).min(COPY_BUFFER as u64) as usize;
            let at = source.offset + done;
            src.read_exact_at(&mut buf[..n], at)
                .map_err(|e| format!("reading {} at byte {at}: {e}", in_path.display()))?;
            out.write(&buf[..n])?;
            done += n as u64;
        }
    }
    out.finish()
}
