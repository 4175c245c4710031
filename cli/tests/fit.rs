//! `smolrun fit`: a fitted file gives the stock file's logits bit for bit on the kept head rows
//! (and -inf on the dropped ones) where it changed no tensor's type, for every architecture
//! smolrun runs, tied heads (Gemma 3, Qwen2.5 0.5B) and untied; its experts, requantized, equal
//! `gguf requant`'s of the same tensors; the experts are written last and the run profile reads
//! back; `--plan` writes nothing; what it cannot do is refused before anything is written.

mod common;

use common::{expect_failure, model, scratch, smolrun};
use smolrun_core::gguf::{expert_data_offset, Gguf};
use smolrun_core::kernels::KernelSet;
use smolrun_core::model::{Model, ResidentStore, State};
use smolrun_core::platform::SingleThread;
use smolrun_engine::profile::RunProfile;
use smolrun_linux::MappedFile;
use std::path::Path;

/// The logits after each of `tokens`, fed one by one.
fn logits(path: &Path, tokens: &[u32]) -> Vec<Vec<f32>> {
    let file = MappedFile::open(path).unwrap();
    let g = Gguf::parse(file.bytes()).unwrap();
    let kernels = KernelSet::select(&smolrun_linux::detect_features());
    let m = Model::load_with_kernels(&g, &kernels).unwrap();
    let store = ResidentStore::new(&g);
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

fn n_vocab(path: &Path) -> usize {
    let file = MappedFile::open(path).unwrap();
    let g = Gguf::parse(file.bytes()).unwrap();
    g.tensor("token_embd.weight").unwrap().dims[1] as usize
}

fn fit(stock: &Path, out: &Path, extra: &[&str]) -> String {
    let o = smolrun()
        .args(["fit", stock.to_str().unwrap(), "-o", out.to_str().unwrap()])
        .args(["--mem", "8G", "--flash-mbps", "278"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "fit {} {extra:?}: {}",
        stock.display(),
        common::stderr(&o)
    );
    common::stdout(&o)
}

const PROMPT: [u32; 6] = [1, 5, 9, 33, 2, 7];

#[test]
fn a_fitted_file_gives_the_stock_logits_on_the_kept_rows_for_every_architecture() {
    let dir = scratch("fit-every-arch");
    for file in [
        "synthetic-llama.gguf",
        "synthetic-qwen3.gguf",
        "synthetic-qwen3moe.gguf",
        "synthetic-qwen2moe.gguf",
        "synthetic-bailingmoe2.gguf",
        "synthetic-qwen35.gguf",
        "synthetic-smollm3.gguf",
        "synthetic-phi3.gguf",
        "synthetic-olmoe.gguf",
        "synthetic-qwen35moe.gguf",
        "synthetic-lfm2.gguf",
        "synthetic-lfm2moe.gguf",
        "synthetic-smallthinker.gguf",
        "synthetic-granitehybrid.gguf",
        "gemma-3-270m-q4_k_m.gguf",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    ] {
        let stock = model(file);
        let n = n_vocab(&stock);
        // 1024 ids spread over the vocabulary (a multiple of 16, as the head wants).
        let ids: Vec<u32> = (0..1024).map(|i| (i * (n / 1024)) as u32).collect();
        let ids_path = dir.join("ids.txt");
        let text: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
        std::fs::write(&ids_path, text.join("\n")).unwrap();
        let out = dir.join(file);
        fit(
            &stock,
            &out,
            &[
                "--head-ids",
                ids_path.to_str().unwrap(),
                "--experts-type",
                "keep",
            ],
        );
        let want = logits(&stock, &PROMPT);
        let got = logits(&out, &PROMPT);
        for (pos, (w, g)) in want.iter().zip(&got).enumerate() {
            assert_eq!(w.len(), g.len(), "{file}");
            for (id, (a, b)) in w.iter().zip(g).enumerate() {
                if ids.binary_search(&(id as u32)).is_ok() {
                    assert_eq!(a.to_bits(), b.to_bits(), "{file}: pos {pos} id {id}");
                } else {
                    assert_eq!(*b, f32::NEG_INFINITY, "{file}: pos {pos} dropped id {id}");
                }
            }
        }
        // The experts last, the profile as planned.
        let f = MappedFile::open(&out).unwrap();
        let g = Gguf::parse(f.bytes()).unwrap();
        // The mixtures of experts: those named so, and SmallThinker.
        let moe = file.contains("moe") || file.contains("smallthinker");
        let offset = expert_data_offset(&g).unwrap();
        assert_eq!(offset.is_some(), moe, "{file}");
        if let Some(offset) = offset {
            let first = g
                .tensors
                .iter()
                .position(smolrun_core::gguf::is_expert_tensor)
                .unwrap();
            assert!(g.tensors[first..]
                .iter()
                .all(smolrun_core::gguf::is_expert_tensor));
            assert_eq!(g.tensors[first].offset, offset, "{file}");
        }
        let profile = RunProfile::of(&g);
        assert!(profile.ctx.is_some(), "{file}: {profile:?}");
        let _ = std::fs::remove_file(&out);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn requantized_experts_equal_gguf_requant_of_the_same_tensors() {
    let dir = scratch("fit-experts");
    let stock = model("synthetic-qwen3moe.gguf");
    let fitted = dir.join("fitted.gguf");
    let requant = dir.join("requant.gguf");
    fit(
        &stock,
        &fitted,
        &["--head-rows", "1000000", "--experts-type", "q4_0"],
    );
    let o = smolrun()
        .args(["gguf", "requant", "-m", stock.to_str().unwrap()])
        .args(["--type", "Q4_0", "--tensors", "_exps", "-o"])
        .arg(&requant)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", common::stderr(&o));
    assert_eq!(logits(&fitted, &PROMPT), logits(&requant, &PROMPT));
    let f = MappedFile::open(&fitted).unwrap();
    let g = Gguf::parse(f.bytes()).unwrap();
    for t in g.tensors.iter().filter(|t| t.name.contains("_exps")) {
        // ffn_down_exps rows are 128 long: whole Q4_0 blocks, so no fallback.
        assert_eq!(t.ggml_type.name(), "Q4_0", "{}", t.name);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fit_plan_writes_nothing_and_bad_requests_are_refused() {
    let dir = scratch("fit-refusals");
    let out = dir.join("out.gguf");
    let dense = model("synthetic-qwen3.gguf");
    let plan = fit(
        &dense,
        &out,
        &["--head-rows", "4096", "--model-positions", "0", "--plan"],
    );
    assert!(
        plan.contains("fitted:") && plan.contains("4096 of its rows kept"),
        "{plan}"
    );
    assert!(!out.exists(), "--plan wrote {}", out.display());
    let e = expect_failure(
        smolrun()
            .args(["fit", dense.to_str().unwrap(), "-o", out.to_str().unwrap()])
            .args([
                "--mem",
                "8G",
                "--flash-mbps",
                "278",
                "--experts-type",
                "q2_k",
            ]),
    );
    assert!(e.contains("no expert tensors"), "{e}");
    let e = expect_failure(smolrun().args(["fit", dense.to_str().unwrap(), "-o", "x.gguf"]));
    assert!(e.contains("--device"), "{e}");
    // The head ids are chosen (their report on stderr) before the fitted plan says no.
    let o = smolrun()
        .args(["fit", dense.to_str().unwrap(), "-o", out.to_str().unwrap()])
        .args(["--mem", "1M", "--flash-mbps", "278", "--head-rows", "1024"])
        .args(["--model-positions", "0"])
        .output()
        .unwrap();
    let e = common::stderr(&o);
    assert!(!o.status.success());
    assert!(
        e.contains("smolrun: even the fitted file does not fit")
            && e.contains("nothing was written"),
        "{e}"
    );
    assert!(!out.exists());
    // The run profile: the fitted context is what plan (and run, chat, serve, bench) take
    // unless told otherwise.
    fit(
        &dense,
        &out,
        &["-c", "512", "--head-rows", "2048", "--model-positions", "0"],
    );
    let plan_ctx = |extra: &[&str]| {
        let o = smolrun()
            .args([
                "plan",
                out.to_str().unwrap(),
                "--mem",
                "8G",
                "--flash-mbps",
                "278",
            ])
            .args(["--json"])
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", common::stderr(&o));
        let v: serde_json::Value = serde_json::from_str(common::stdout(&o).trim()).unwrap();
        v["n_ctx"].as_u64().unwrap()
    };
    assert_eq!(plan_ctx(&[]), 512);
    assert_eq!(plan_ctx(&["-c", "1024"]), 1024);
    let _ = std::fs::remove_dir_all(&dir);
}
