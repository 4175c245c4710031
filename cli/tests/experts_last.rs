//! `smolrun gguf experts-last` on the synthetic mixtures of experts (qwen3moe, bailingmoe2):
//! the rewritten file keeps every metadata entry and every tensor's bytes, puts the expert
//! tensors after all the others with `smolrun.expert_data_offset` where they begin, and gives
//! bit-identical logits; its non-expert prefix alone loads the model (the iPad case). A model
//! without experts is refused, and a write that fails leaves no partial file behind.

use smolrun_core::gguf::{expert_data_offset, is_expert_tensor, Gguf, EXPERT_DATA_OFFSET_KEY};
use smolrun_core::gguf::{MetaValue, Value};
use smolrun_core::kernels::KernelSet;
use smolrun_core::model::{Model, ModelError, ResidentStore, State, StoreErrorKind};
use smolrun_core::platform::SingleThread;
use smolrun_linux::MappedFile;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The synthetic model's path, written by tools/oracle/synth_model.py when absent.
fn require_model(model: &str) -> PathBuf {
    smolrun_tests::model_path(model)
}

fn experts_last(input: &Path, out: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smolrun"))
        .args(["gguf", "experts-last", "-m"])
        .arg(input)
        .arg("-o")
        .arg(out)
        .output()
        .expect("run smolrun")
}

/// Removes the scratch folder when the test ends, passed or not.
struct Scratch(PathBuf);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("smolrun-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

fn logits(g: &Gguf, kernels: &KernelSet, tokens: &[u32]) -> Vec<Vec<f32>> {
    let m = Model::load_with_kernels(g, kernels).unwrap();
    let store = ResidentStore::new(g);
    let mut st = State::new(&m, 32).unwrap();
    tokens
        .iter()
        .enumerate()
        .map(|(pos, &t)| {
            m.forward(&mut st, &store, &SingleThread, t, pos)
                .unwrap()
                .to_vec()
        })
        .collect()
}

fn rewrite_and_compare(model: &str) {
    let stock_path = require_model(model);
    let dir = scratch(&format!("experts-last-{model}"));
    let out = dir.0.join("experts-last.gguf");
    let run = experts_last(&stock_path, &out);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let stock_file = MappedFile::open(&stock_path).unwrap();
    let a = Gguf::parse(stock_file.bytes()).unwrap();
    let last_file = MappedFile::open(&out).unwrap();
    let b = Gguf::parse(last_file.bytes()).unwrap();

    // Metadata: the same entries in the same order, plus the offset at the end.
    assert_eq!(b.metadata.len(), a.metadata.len() + 1);
    for (x, y) in a.metadata.iter().zip(&b.metadata) {
        assert_eq!(x.key, y.key);
        assert_eq!(
            MetaValue::from(x.value),
            MetaValue::from(y.value),
            "{}",
            x.key
        );
    }
    let offset = expert_data_offset(&b).unwrap().expect("the key is written");
    assert!(matches!(b.get(EXPERT_DATA_OFFSET_KEY), Some(Value::U64(o)) if o == offset));
    assert_eq!(offset % b.alignment, 0);

    // Tensors: the same set, byte-identical, the experts after all the others.
    assert_eq!(a.tensors.len(), b.tensors.len());
    let n_experts = a.tensors.iter().filter(|t| is_expert_tensor(t)).count();
    assert!(n_experts > 0);
    for (i, t) in b.tensors.iter().enumerate() {
        let s = a.tensor(t.name).expect("no tensor invented");
        assert_eq!(
            (s.ggml_type, s.dims, s.n_dims),
            (t.ggml_type, t.dims, t.n_dims)
        );
        assert!(a.tensor_data(s) == b.tensor_data(t), "{} differs", t.name);
        assert_eq!(
            is_expert_tensor(t),
            i >= b.tensors.len() - n_experts,
            "{} out of place",
            t.name
        );
    }
    let first_expert = &b.tensors[b.tensors.len() - n_experts];
    assert_eq!(first_expert.offset, offset);

    // Bit-identical logits (same kernels, same bytes: only where they sit changed).
    let kernels = KernelSet::select(&smolrun_linux::detect_features());
    let prompt = [9707u32, 11, 1879, 0, 151643, 42, 42, 3];
    assert_eq!(logits(&a, &kernels, &prompt), logits(&b, &kernels, &prompt));

    // The iPad case: only the non-expert prefix mapped. The model loads from it, and the
    // first expert it asks for is a clear error, not an out-of-bounds read.
    let prefix_map = MappedFile::open_prefix(&out, offset).unwrap();
    assert_eq!(prefix_map.bytes().len() as u64, offset);
    let file_len = std::fs::metadata(&out).unwrap().len();
    let h = Gguf::parse_header(prefix_map.bytes(), file_len).unwrap();
    let store = ResidentStore::over_prefix(prefix_map.bytes(), &h).unwrap();
    let m = Model::load_from(&h, &store, &kernels).unwrap();
    let mut st = State::new(&m, 32).unwrap();
    match m.forward(&mut st, &store, &SingleThread, prompt[0], 0) {
        Err(ModelError::WeightRead(e)) => {
            assert_eq!(e.kind, StoreErrorKind::NotMapped { mapped: offset });
            assert!(e.tensor.contains("_exps"), "{}", e.tensor);
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("experts read from outside the prefix"),
    }
    // A prefix one byte too short for the non-expert tensors is refused at construction.
    let short = &prefix_map.bytes()[..offset as usize - 1];
    let h = Gguf::parse_header(short, file_len).unwrap();
    assert!(ResidentStore::over_prefix(short, &h).is_err());

    // Rewriting an experts-last file again gives the same file.
    let again = dir.0.join("again.gguf");
    assert!(experts_last(&out, &again).status.success());
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&again).unwrap());
}

#[test]
fn qwen3moe_experts_last_is_the_same_model() {
    rewrite_and_compare("synthetic-qwen3moe");
}

#[test]
fn bailingmoe2_experts_last_is_the_same_model() {
    rewrite_and_compare("synthetic-bailingmoe2");
}

#[test]
fn a_model_without_experts_is_refused_and_nothing_is_written() {
    let dense = require_model("synthetic-llama");
    let dir = scratch("experts-last-dense");
    let out = dir.0.join("out.gguf");
    let run = experts_last(&dense, &out);
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("has no expert tensors"), "{err}");
    assert!(std::fs::read_dir(&dir.0).unwrap().next().is_none());
}

#[test]
fn a_failed_write_leaves_no_partial_file() {
    let moe = require_model("synthetic-qwen3moe");
    let dir = scratch("experts-last-full");
    let out = dir.0.join("out.gguf");
    // A 2 MB file size limit (SIGXFSZ ignored, so the write fails with EFBIG instead of
    // killing the process): the copy fails well inside the 90 MB file.
    let run = Command::new("bash")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 2048; exec \"$@\"")
        .arg("bash")
        .arg(env!("CARGO_BIN_EXE_smolrun"))
        .args(["gguf", "experts-last", "-m"])
        .arg(&moe)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("out.gguf.tmp"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&dir.0).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
