//! `smolrun fit`: a fitted file gives the stock file's logits bit for bit on the kept head rows
//! (and -inf on the dropped ones) where it changed no tensor's type, for every architecture
//! smolrun runs, tied heads (Gemma 3, Qwen2.5 0.5B) and untied; its experts, requantized, equal
//! `gguf requant`'s of the same tensors; the experts are written last and the run profile reads
//! back; `--plan` writes nothing; what it cannot do is refused before anything is written; a
//! mixture of experts whose experts are paged gets a q8_0 KV cache in its profile, one that
//! fits gets none.

mod common;

use common::{expect_failure, model, require_python_with_gguf, scratch, smolrun, write_small_ling};
use smolrun_core::gguf::{expert_data_offset, Gguf};
use smolrun_core::kernels::KernelSet;
use smolrun_core::model::{Model, ResidentStore, State};
use smolrun_core::platform::SingleThread;
use smolrun_engine::options::KvCacheType;
use smolrun_engine::profile::{self, RunProfile};
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
        // Everything fits in 8 GB: the stock file's f16 cache, no cache type written.
        assert_eq!(profile.cache_type, None, "{file}: {profile:?}");
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

/// A Ling-shaped mixture of experts (3 layers, 2 of them 128 experts of 256x2048, 133 MB of
/// experts in a 184 MB file) fitted for 150 MB: its experts are paged, so the fitted file gets
/// a q8_0 KV cache in its profile (and its pool is planned with it), which plan and bench use
/// unless told `-ctk f16 -ctv f16`; fitted for 8 GB (every expert in RAM), no cache type.
#[test]
fn a_fitted_moe_whose_experts_are_paged_gets_a_q8_0_kv_cache() {
    require_python_with_gguf();
    let dir = scratch("fit-kv-q8");
    let stock = dir.join("ling.gguf");
    write_small_ling(&stock, "128", "2048", &["--experts-last"]);
    let out = dir.join("fitted.gguf");
    let fit_for = |mem: &str| {
        let o = smolrun()
            .args(["fit", stock.to_str().unwrap(), "-o", out.to_str().unwrap()])
            .args(["--mem", mem, "--flash-mbps", "278", "-c", "256"])
            .args(["--model-positions", "0", "--experts-type", "keep"])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "fit --mem {mem}: {}",
            common::stderr(&o)
        );
        let text = common::stdout(&o);
        let f = MappedFile::open(&out).unwrap();
        let g = Gguf::parse(f.bytes()).unwrap();
        (
            text,
            RunProfile::of(&g),
            g.get(profile::CACHE_TYPE_KEY).is_some(),
        )
    };

    let (text, p, _) = fit_for("150M");
    assert!(
        text.contains("kv cache type") && text.contains("KV cache q8_0"),
        "{text}"
    );
    assert_eq!(p.cache_type, Some(KvCacheType::Q8_0), "{p:?}");
    let pool = p.moe_pool.expect("a paged fit has a pool");
    assert!(pool < 128, "{p:?}");
    let plan = |extra: &[&str]| {
        let o = smolrun()
            .args(["plan", out.to_str().unwrap(), "--mem", "150M"])
            .args(["--flash-mbps", "278", "--json"])
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", common::stderr(&o));
        let v: serde_json::Value = serde_json::from_str(common::stdout(&o).trim()).unwrap();
        v
    };
    let q8 = plan(&[]);
    assert_eq!(q8["kv_cache_type"], "q8_0", "{q8}");
    assert_eq!(q8["weights"], "paged", "{q8}");
    assert_eq!(
        q8["moe_slots_per_layer"].as_u64(),
        Some(pool as u64),
        "{q8}"
    );
    assert!(q8["fits"].as_bool().unwrap(), "{q8}");
    let f16 = plan(&["-ctk", "f16", "-ctv", "f16"]);
    assert_eq!(f16["kv_cache_type"], "f16", "{f16}");
    // -ctk alone: values unset are f16 too; the profile stays out.
    assert_eq!(plan(&["-ctk", "f16"])["kv_cache_type"], "f16");
    // The run itself: bench's engine takes the profile's type unless told otherwise.
    let bench = |extra: &[&str]| {
        let o = smolrun()
            .args(["bench", "-m", out.to_str().unwrap()])
            .args(["-p", "4", "-n", "2", "-r", "1", "-t", "1", "--json"])
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", common::stderr(&o));
        let line = common::stdout(&o);
        let last = line.lines().last().unwrap_or_default().to_string();
        let v: serde_json::Value = serde_json::from_str(&last).unwrap();
        v["kv_cache_type"].as_str().unwrap_or_default().to_string()
    };
    assert_eq!(bench(&[]), "q8_0");
    assert_eq!(bench(&["-ctk", "f16", "-ctv", "f16"]), "f16");

    // Every expert in RAM: no cache type written.
    let (text, p, written) = fit_for("8G");
    assert_eq!(p.cache_type, None, "{p:?}\n{text}");
    assert!(!written, "{text}");
    assert!(!text.contains("KV cache q8_0"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
