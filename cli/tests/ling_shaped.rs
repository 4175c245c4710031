//! tools/oracle/ling_shaped.py (random weights in Ling-mini-2.0's bailingmoe2 shape, Q2_K
//! experts): a small variant (3 layers, 16 experts) loads and runs in smolrun; `smolrun gguf
//! experts-last` of it gives identical logits and the same bytes as the script's own
//! `--experts-last`; its skewed router sends more of the routing choices to a few experts than
//! the uniform one.
//!
//! The full-size files are measured by hand (they take 5.5 GB each):
//! `SMOLRUN_LING_SHAPED=a.gguf,b.gguf cargo test --release -p smolrun --test ling_shaped -- \
//! --ignored --nocapture` prints each layer's expert usage over the first SMOLRUN_LING_TOKENS
//! (default 48) tokens of tools/head-corpus/en-prose.txt, and the top 10 %'s share.

use smolrun_core::gguf::{expert_data_offset, Gguf};
use smolrun_core::kernels::KernelSet;
use smolrun_core::model::{Model, RecordingStore, ResidentStore, State, StoreCall};
use smolrun_core::platform::SingleThread;
use smolrun_core::tokenizer::Tokenizer;
use smolrun_linux::MappedFile;
mod common;
use common::{require_python_with_gguf, write_small_ling};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .into()
}

/// Removes the scratch folder when the test ends, passed or not.
struct Scratch(PathBuf);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The small variant: 3 layers (1 dense), 16 experts of 256 in 4 groups, n_embd 256.
fn write_small(out: &Path, extra: &[&str]) {
    write_small_ling(out, "16", "256", extra);
}

const PROMPT: &str = "The quick brown fox jumps over the lazy dog. In 1969, Apollo 11 landed on \
                      the Moon; fn main() { println!(\"hello\"); } Les sanglots longs des violons";

/// Each MoE layer's expert usage over the prompt: `usage[layer][expert]` = tokens routed to it.
/// Also returns the logits of every position.
fn expert_usage(path: &Path, text: &str, max_tokens: usize) -> (Vec<Vec<u64>>, Vec<Vec<f32>>) {
    let file = MappedFile::open(path).unwrap();
    let g = Gguf::parse(file.bytes()).unwrap();
    let tok = Tokenizer::from_gguf(&g).unwrap();
    let mut tokens = Vec::new();
    tok.encode(text, false, false, &mut tokens);
    tokens.truncate(max_tokens);
    let kernels = KernelSet::select(&smolrun_linux::detect_features());
    let m = Model::load_with_kernels(&g, &kernels).unwrap();
    let store = RecordingStore::new(ResidentStore::new(&g), 1 << 16);
    let mut st = State::new(&m, tokens.len() + 1).unwrap();
    // The gate tensor of each MoE layer, in layer order: one get of it is one routing choice.
    let gates: Vec<usize> = (0..g.tensors.len())
        .filter(|&i| g.tensors[i].name.ends_with("ffn_gate_exps.weight"))
        .collect();
    let n_expert = g.tensors[gates[0]].dims[2] as usize;
    let mut usage = vec![vec![0u64; n_expert]; gates.len()];
    let mut logits = Vec::new();
    for (pos, &t) in tokens.iter().enumerate() {
        let l = m.forward(&mut st, &store, &SingleThread, t, pos).unwrap();
        assert!(l.iter().all(|v| v.is_finite()), "position {pos}");
        logits.push(l.to_vec());
        for call in store.take() {
            if let StoreCall::Get(k) = call {
                if let (Some(layer), Some(e)) =
                    (gates.iter().position(|&g| g == k.tensor), k.expert)
                {
                    usage[layer][e as usize] += 1;
                }
            }
        }
    }
    (usage, logits)
}

/// The share of routing choices that went to the most used tenth of the experts (at least one).
fn top_tenth_share(usage: &[u64]) -> f64 {
    let mut sorted = usage.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let top = sorted.len().div_ceil(10);
    let total: u64 = sorted.iter().sum();
    sorted[..top].iter().sum::<u64>() as f64 / total.max(1) as f64
}

#[test]
fn small_ling_shaped_runs_and_experts_last_is_the_same_model() {
    require_python_with_gguf();
    let dir = std::env::temp_dir().join(format!("smolrun-ling-shaped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _cleanup = Scratch(dir.clone());
    let skewed = dir.join("skewed.gguf");
    let uniform = dir.join("uniform.gguf");
    let script_last = dir.join("script-last.gguf");
    let rewritten = dir.join("rewritten.gguf");
    // A strong skew (the default 0.02 is lost in the noise of 32 tokens over 16 experts).
    let strong = ["--bias-scale", "0.25"];
    write_small(&skewed, &strong);
    write_small(&uniform, &["--router", "uniform"]);
    write_small(&script_last, &[&strong[..], &["--experts-last"]].concat());
    let run = Command::new(env!("CARGO_BIN_EXE_smolrun"))
        .args(["gguf", "experts-last", "-m"])
        .arg(&skewed)
        .arg("-o")
        .arg(&rewritten)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );

    // Every tensor draws from its own seeded stream: the script's experts-last file is the
    // rewrite of its usual one, byte for byte.
    assert!(std::fs::read(&rewritten).unwrap() == std::fs::read(&script_last).unwrap());
    let file = MappedFile::open(&script_last).unwrap();
    let g = Gguf::parse(file.bytes()).unwrap();
    assert!(expert_data_offset(&g).unwrap().is_some());

    let (usage, logits) = expert_usage(&skewed, PROMPT, 32);
    let (_, logits_last) = expert_usage(&script_last, PROMPT, 32);
    assert_eq!(logits, logits_last);
    let (usage_uniform, _) = expert_usage(&uniform, PROMPT, 32);
    let share = |u: &[Vec<u64>]| u.iter().map(|l| top_tenth_share(l)).sum::<f64>() / u.len() as f64;
    let (s, s_uniform) = (share(&usage), share(&usage_uniform));
    eprintln!("top 10 % of experts' share: skewed {s:.3}, uniform {s_uniform:.3}");
    assert_eq!(usage.len(), 2, "two MoE layers");
    assert!(
        s > s_uniform,
        "the skewed router should favour its popular experts: top 10 % share {s:.3} vs \
         uniform {s_uniform:.3}"
    );

    // --popularity: one line for every layer; expert 5 far more popular than the rest is the
    // busiest expert of both MoE layers.
    let popularity = dir.join("popularity.txt");
    let line: Vec<&str> = (0..16).map(|e| if e == 5 { "1000" } else { "1" }).collect();
    std::fs::write(&popularity, format!("# counts\n{}\n", line.join(" "))).unwrap();
    let popular = dir.join("popular.gguf");
    write_small(
        &popular,
        &[&strong[..], &["--popularity", popularity.to_str().unwrap()]].concat(),
    );
    let (usage, _) = expert_usage(&popular, PROMPT, 32);
    for (layer, u) in usage.iter().enumerate() {
        let mut others = u.iter().enumerate().filter(|&(e, _)| e != 5);
        assert!(others.all(|(_, &c)| c < u[5]), "layer {layer}: {u:?}");
    }
}

/// By hand, on the full-size files: prints each MoE layer's expert usage over the prompt.
#[test]
#[ignore = "needs SMOLRUN_LING_SHAPED=FILE[,FILE...] (5.5 GB files from tools/oracle/ling_shaped.py)"]
fn ling_shaped_expert_usage() {
    let files = std::env::var("SMOLRUN_LING_SHAPED").expect("SMOLRUN_LING_SHAPED=FILE[,FILE]");
    let tokens: usize = std::env::var("SMOLRUN_LING_TOKENS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48);
    // English prose: text a real model would route as it does in use.
    let text = std::fs::read_to_string(repo_root().join("tools/head-corpus/en-prose.txt")).unwrap();
    let mut end = text.len().min(64 * tokens);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let text = &text[..end];
    for path in files.split(',') {
        let started = std::time::Instant::now();
        let (usage, _) = expert_usage(Path::new(path), text, tokens);
        println!(
            "{path}: {tokens} tokens at most, {:.1} s",
            started.elapsed().as_secs_f64()
        );
        // Every MoE layer routes every token to the same number of experts: equal totals.
        assert!(!usage.is_empty(), "{path}: no MoE layer reported its usage");
        let total: u64 = usage[0].iter().sum();
        assert!(total > 0, "{path}: no expert chosen");
        for (layer, u) in usage.iter().enumerate() {
            assert_eq!(
                u.iter().sum::<u64>(),
                total,
                "{path}: MoE layer {layer} chose another number of experts than layer 0"
            );
        }
        let mut shares = Vec::new();
        for (layer, u) in usage.iter().enumerate() {
            let used = u.iter().filter(|&&c| c > 0).count();
            let mut sorted = u.clone();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            let share = top_tenth_share(u);
            shares.push(share);
            println!(
                "  MoE layer {layer:2}: {used:3} of {} experts used, top 10 % take {:.1} %, \
                 busiest: {:?}",
                u.len(),
                100.0 * share,
                &sorted[..8.min(sorted.len())]
            );
        }
        let mean = shares.iter().sum::<f64>() / shares.len() as f64;
        println!("  mean top 10 % share: {:.1} %", 100.0 * mean);
    }
}

/// By hand, the iPad case on a full-size experts-last file: only the non-expert prefix is mapped
/// and the model loads from it (run it under `ulimit -v` to show the whole file would not map):
/// `SMOLRUN_LING_SHAPED=ling-mini-shaped-experts-last.gguf cargo test --release -p smolrun
/// --test ling_shaped -- --ignored --nocapture prefix`
#[test]
#[ignore = "needs SMOLRUN_LING_SHAPED=FILE (an experts-last file from ling_shaped.py or smolrun gguf experts-last)"]
fn ling_shaped_prefix_loads() {
    use smolrun_core::model::{ModelError, StoreErrorKind};
    let files = std::env::var("SMOLRUN_LING_SHAPED").expect("SMOLRUN_LING_SHAPED=FILE");
    for path in files.split(',').map(Path::new) {
        let file_len = std::fs::metadata(path).unwrap().len();
        // The header first (its own small mapping), for the offset.
        let offset = {
            let head = MappedFile::open_prefix(path, file_len.min(64 << 20)).unwrap();
            let g = Gguf::parse_header(head.bytes(), file_len).unwrap();
            expert_data_offset(&g)
                .unwrap()
                .expect("not an experts-last file")
        };
        let prefix = MappedFile::open_prefix(path, offset).unwrap();
        let g = Gguf::parse_header(prefix.bytes(), file_len).unwrap();
        let store = ResidentStore::over_prefix(prefix.bytes(), &g).unwrap();
        let kernels = KernelSet::select(&smolrun_linux::detect_features());
        let m = Model::load_from(&g, &store, &kernels).unwrap();
        let mut st = State::new(&m, 16).unwrap();
        let first_expert = match m.forward(&mut st, &store, &SingleThread, 9707, 0) {
            Err(ModelError::WeightRead(e))
                if e.kind == (StoreErrorKind::NotMapped { mapped: offset }) =>
            {
                e.tensor
            }
            other => panic!(
                "expected the first expert outside the prefix, got {:?}",
                other.err()
            ),
        };
        println!(
            "{}: {:.1} MiB of {:.1} MiB mapped; the model loads from it; the first expert read \
             ({first_expert}) is refused as not mapped",
            path.display(),
            offset as f64 / (1 << 20) as f64,
            file_len as f64 / (1 << 20) as f64
        );
    }
}
