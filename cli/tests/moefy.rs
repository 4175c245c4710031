//! `smolrun gguf moefy` on Qwen2.5-Coder-0.5B with every expert used (K = E) and F16 down
//! projections: the mixture is then the dense FFN regrouped, so its logits must stay close to
//! the dense model's (the router's near-uniform softmax, 2^-10 of spread, the shared expert's
//! gate, sigmoid ~1, and the F16 rounding of the down columns are the only differences); the
//! header says qwen2moe with the asked-for shape, and every tensor outside the FFN is copied
//! byte for byte. A wrong neuron order between the gate/up rows and the down columns, a missing
//! factor E, or a shared expert left out moves the logits by whole units.

use smolrun_core::gguf::Gguf;
use smolrun_core::model::{Model, ResidentStore, State};
use smolrun_core::platform::SingleThread;
use smolrun_core::tokenizer::Tokenizer;
use smolrun_linux::MappedFile;
use std::path::{Path, PathBuf};
use std::process::Command;

fn models_dir() -> PathBuf {
    match std::env::var_os("SMOLRUN_MODELS") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/smolrun/models"),
    }
}

/// Removes the scratch folder when the test ends, passed or not.
struct Scratch(PathBuf);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn logits(g: &Gguf, tokens: &[u32]) -> Vec<Vec<f32>> {
    let m = Model::load(g).unwrap();
    let store = ResidentStore::new(g);
    let mut st = State::new(&m, 64).unwrap();
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

fn log_softmax(l: &[f32]) -> Vec<f64> {
    let max = l.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    let sum: f64 = l.iter().map(|&v| (v as f64 - max).exp()).sum();
    l.iter().map(|&v| v as f64 - max - sum.ln()).collect()
}

#[test]
fn all_experts_used_reproduce_the_dense_model() {
    let dense_path = models_dir().join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    assert!(
        dense_path.is_file(),
        "{} is missing: run tools/fetch-models.sh qwen2.5-coder-0.5b",
        dense_path.display()
    );
    let dir = std::env::temp_dir().join(format!("smolrun-moefy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _scratch = Scratch(dir.clone());
    let out = dir.join("moe.gguf");
    let calib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/head-corpus/en-prose.txt");
    let run = Command::new(env!("CARGO_BIN_EXE_smolrun"))
        .args(["gguf", "moefy", "-m"])
        .arg(&dense_path)
        .arg("-o")
        .arg(&out)
        .args(["--experts", "8", "--used", "8", "--shared-ff", "256"])
        .args([
            "--tokens",
            "256",
            "--down-type",
            "f16",
            "-t",
            "2",
            "--calib",
        ])
        .arg(&calib)
        .output()
        .expect("run smolrun");
    assert!(
        run.status.success(),
        "smolrun gguf moefy failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );

    let dense_file = MappedFile::open(&dense_path).unwrap();
    let dense = Gguf::parse(dense_file.bytes()).unwrap();
    let moe_file = MappedFile::open(&out).unwrap();
    let moe = Gguf::parse(moe_file.bytes()).unwrap();
    assert_eq!(moe.architecture().unwrap(), "qwen2moe");
    assert_eq!(moe.get_u64("qwen2moe.expert_count").unwrap(), 8);
    assert_eq!(moe.get_u64("qwen2moe.expert_used_count").unwrap(), 8);
    assert_eq!(
        moe.get_u64("qwen2moe.expert_feed_forward_length").unwrap(),
        (4864 - 256) / 8
    );
    assert_eq!(
        moe.get_u64("qwen2moe.expert_shared_feed_forward_length")
            .unwrap(),
        256
    );
    let mut copied = 0;
    for t in &dense.tensors {
        if [".ffn_gate.", ".ffn_up.", ".ffn_down."]
            .iter()
            .any(|f| t.name.contains(f))
        {
            assert!(moe.tensor(t.name).is_none(), "{} left in", t.name);
            continue;
        }
        let m = moe
            .tensor(t.name)
            .unwrap_or_else(|| panic!("{} missing", t.name));
        assert!(
            dense.tensor_data(t) == moe.tensor_data(m),
            "{} is not a byte-for-byte copy",
            t.name
        );
        copied += 1;
    }
    assert!(copied > 100, "only {copied} tensors copied");

    let tok = Tokenizer::from_gguf(&dense).unwrap();
    let mut tokens = Vec::new();
    tok.encode(
        "fn main() {\n    let words = vec![\"mixture\", \"of\", \"experts\"];\n    println!(\"{}\", words.join(\" \"));\n}\n",
        false,
        false,
        &mut tokens,
    );
    tokens.truncate(32);
    let (a, b) = (logits(&dense, &tokens), logits(&moe, &tokens));
    let (mut max_kl, mut sum_kl) = (0f64, 0f64);
    let mut top1_same = 0;
    for (la, lb) in a.iter().zip(&b) {
        let (pa, pb) = (log_softmax(la), log_softmax(lb));
        let kl: f64 = pa.iter().zip(&pb).map(|(x, y)| x.exp() * (x - y)).sum();
        max_kl = max_kl.max(kl);
        sum_kl += kl;
        let argmax = |v: &[f32]| (0..v.len()).max_by(|&i, &j| v[i].total_cmp(&v[j])).unwrap();
        top1_same += (argmax(la) == argmax(lb)) as usize;
    }
    let mean_kl = sum_kl / tokens.len() as f64;
    println!(
        "moefy K = E, F16 down: {} positions, mean KL {mean_kl:.2e}, max KL {max_kl:.2e}, top-1 same at {top1_same}",
        tokens.len(),
    );
    assert!(
        mean_kl < MAX_MEAN_KL && max_kl < MAX_KL,
        "KL(dense || moefied): mean {mean_kl}, max {max_kl}; expected below {MAX_MEAN_KL} and {MAX_KL}"
    );
    assert!(
        top1_same + 2 >= tokens.len(),
        "top-1 differs from the dense model at {} of {} positions",
        tokens.len() - top1_same,
        tokens.len()
    );
}

/// Measured: mean 1.2e-3, max 7.2e-3 over the 29 positions, top-1 the same at all 29. Not
/// bit-exact: the dense down projections (Q4_K/Q6_K) take Q8_K-quantized inputs, the F16 ones
/// of the experts do not, so the two models round differently at every layer; that difference
/// is of the size of smolrun's own from llama.cpp's (the general bound, 5e-3 mean, holds it).
/// Bugs are far above it: a down projection without its factor E scales the routed FFN by 1/8.
const MAX_MEAN_KL: f64 = 5e-3;
const MAX_KL: f64 = 0.03;
