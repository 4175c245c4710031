//! `smolrun run` and `smolrun perplexity` end to end, and their errors.
//! Meant for release mode: `cargo test --release -p smolrun`.

mod common;
use common::*;

/// Past this reference top-1 minus top-2 logit gap, smolrun must pick the same token as
/// llama.cpp. Below it the two engines' rounding (different matvec kernels and summation
/// orders over a 4-bit model) can legitimately flip the choice, after which the continuations
/// are different texts and nothing more can be compared.
const NEAR_TIE: f64 = 0.1;

#[test]
fn greedy_run_matches_llama_cpp_on_gemma3_270m() {
    let golden = read_golden("gemma3-270m/greedy.json");
    let model = gemma();
    let mut compared = 0;
    for case in golden["cases"].as_array().unwrap() {
        let prompt = case["prompt"].as_str().unwrap();
        let n = case["n_predict"].as_u64().unwrap();
        let o = smolrun_reference()
            .args(["run", "-m"])
            .arg(&model)
            .args(["-p", prompt, "-n", &n.to_string(), "--temp", "0", "--json"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{prompt:?}: {}", stderr(&o));
        let out = stdout(&o);
        // --json: stdout is exactly one JSON object.
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1, "stdout: {out}");
        let got: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(got["prompt_tokens"], case["prompt_tokens"], "{prompt:?}");
        for key in ["prompt_tok_s", "gen_tok_s"] {
            assert!(got[key].as_f64().unwrap() > 0.0, "{key}: {got}");
        }

        let want: Vec<u64> = serde_json::from_value(case["tokens"].clone()).unwrap();
        let have: Vec<u64> = serde_json::from_value(got["tokens"].clone()).unwrap();
        let margins: Vec<f64> = serde_json::from_value(case["margins"].clone()).unwrap();
        // Compare up to and including the first near-tie in the reference.
        let checked = margins
            .iter()
            .position(|&m| m < NEAR_TIE)
            .map_or(want.len(), |i| i + 1);
        assert!(
            have.len() >= checked.min(want.len()),
            "{prompt:?}: generated {} tokens, expected at least {checked}",
            have.len()
        );
        for i in 0..checked.min(want.len()) {
            if margins[i] >= NEAR_TIE {
                assert_eq!(
                    have[i], want[i],
                    "{prompt:?}: token {i} differs (reference margin {:.3}); smolrun {:?}, llama.cpp {:?}",
                    margins[i], have, want
                );
            }
        }
        if checked == want.len() && have == want {
            // Whole continuation agrees: the text must too.
            assert_eq!(got["text"], case["text"], "{prompt:?}");
        }
        compared += checked;
    }
    // Not a test that passes by comparing nothing.
    assert!(compared >= 40, "only {compared} tokens compared");
}

#[test]
fn run_streams_only_the_generated_text_to_stdout() {
    let o = smolrun()
        .args(["run", "-m"])
        .arg(gemma())
        .args(["-p", "The capital of France is", "-n", "8", "--temp", "0"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    // The reference's first greedy tokens: " the capital of the country of France."
    assert!(out.starts_with(" the capital of"), "stdout: {out:?}");
    assert!(
        !out.contains("capital of France is"),
        "the prompt is not echoed: {out:?}"
    );
    assert!(
        stderr(&o).contains("tok/s"),
        "speeds go to stderr: {}",
        stderr(&o)
    );
}

#[test]
fn sampling_is_reproducible_with_a_seed() {
    let run = |seed: &str| {
        let o = smolrun()
            .args(["run", "-m"])
            .arg(gemma())
            .args([
                "-p",
                "Once upon a time",
                "-n",
                "6",
                "--seed",
                seed,
                "--json",
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        assert_eq!(v["tokens"].as_array().unwrap().len(), 6, "{v}");
        v["tokens"].clone()
    };
    assert_eq!(run("7"), run("7"));
}

#[test]
fn run_reports_bad_input_clearly() {
    let dir = scratch("run-errors");

    let err = expect_failure(smolrun().args(["run", "-m", "no-such-model", "-p", "hi"]));
    // Named, with the way to get a model (models.rs or engine.rs words it).
    assert!(
        err.contains("'no-such-model'") && err.contains("tools/fetch-models.sh"),
        "{err}"
    );

    let err = expect_failure(smolrun().args(["run", "-m"]).arg(gemma()).args(["-p", ""]));
    assert!(err.contains("prompt is empty"), "{err}");

    let err = expect_failure(smolrun().args(["run", "-m"]).arg(gemma()).args([
        "-p",
        "one two three four five six seven",
        "-c",
        "4",
    ]));
    assert!(
        err.contains("context holds 4") && err.contains("raise -c"),
        "{err}"
    );

    let not_gguf = dir.join("notes.gguf");
    std::fs::write(&not_gguf, "just some text, not a model").unwrap();
    let err = expect_failure(
        smolrun()
            .args(["run", "-m"])
            .arg(&not_gguf)
            .args(["-p", "hi"]),
    );
    assert!(err.contains("not a readable GGUF"), "{err}");

    let mamba = dir.join("mamba.gguf");
    write_gguf(&mamba, &[("general.architecture", "mamba")]);
    let err = expect_failure(smolrun().args(["run", "-m"]).arg(&mamba).args(["-p", "hi"]));
    assert!(
        err.contains("'mamba' is not supported") && err.contains("qwen2"),
        "{err}"
    );

    let no_tokenizer = dir.join("no-tokenizer.gguf");
    write_gguf(&no_tokenizer, &[("general.architecture", "qwen2")]);
    let err = expect_failure(
        smolrun()
            .args(["run", "-m"])
            .arg(&no_tokenizer)
            .args(["-p", "hi"]),
    );
    assert!(err.contains("tokenizer.ggml.model"), "{err}");

    let err = expect_failure(
        smolrun()
            .args(["run", "-m"])
            .arg(gemma())
            .args(["-p", "hi", "--top-p", "1.5"]),
    );
    assert!(err.contains("top_p"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn perplexity_rejects_a_text_shorter_than_two_chunks() {
    let dir = scratch("ppl-short");
    let text = dir.join("short.txt");
    std::fs::write(&text, "A few words only.").unwrap();
    let err = expect_failure(
        smolrun()
            .args(["perplexity", "-m"])
            .arg(gemma())
            .arg("-f")
            .arg(&text)
            .args(["-c", "128"]),
    );
    assert!(err.contains("needs at least 256"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn perplexity_json_is_the_librarys_over_llama_perplexitys_chunks_on_gemma3_270m() {
    let golden = read_golden("gemma3-270m/perplexity.json");
    let n_ctx = golden["n_ctx"].as_u64().unwrap().to_string();
    let text = golden_dir().join("ppl-text.txt");
    // The first 4 chunks only (the whole text is tests/tests/perplexity.rs's job): what the CLI
    // adds is the method (tokenizing, chunking, BOS, scoring), and llama-perplexity printed its
    // running estimate after each chunk.
    let chunks = 4;
    let o = smolrun()
        .args(["perplexity", "-m"])
        .arg(gemma())
        .arg("-f")
        .arg(&text)
        .args(["-c", &n_ctx, "--chunks", &chunks.to_string(), "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    // The method: the same tokens (llama-perplexity's, BOS first) cut into the same chunks.
    let ref_tokens = read_golden("gemma3-270m/ppl-tokens.json");
    assert_eq!(
        last["tokens"].as_u64().unwrap() as usize,
        ref_tokens["tokens"].as_array().unwrap().len(),
        "{last}"
    );
    assert_eq!(last["chunks"], chunks, "{last}");
    // The number: the library's perplexity over the same chunks with the same kernels (this CPU's),
    // to the last printed digit. The library's number is held to llama-perplexity's by
    // tests/tests/perplexity.rs over all 41 chunks (0.5 %); what the CLI adds is the method
    // (tokenizing, chunking, BOS, scoring), and any slip there moves the number by far more than
    // the f64 rounding of the sum. (A bound against llama-perplexity's own estimate after 4
    // chunks cannot be tight: its per-token rounding noise, 0.116 nats RMS on Gemma 3, makes one
    // standard error of 0.73 % over 252 tokens, and llama.cpp itself gives 19.3117 or 19.4134
    // for these chunks with 4 or 16 sequences per batch.)
    let ppl = last["ppl"].as_f64().unwrap();
    let n_ctx: usize = n_ctx.parse().unwrap();
    let tokens: Vec<u32> = ref_tokens["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    let library = smolrun_tests::with_model_on(
        "gemma3-270m",
        &smolrun_core::kernels::KernelSet::select(&smolrun_linux::detect_features()),
        |g, m, store| {
            let bos = g
                .get("tokenizer.ggml.add_bos_token")
                .and_then(|v| v.as_bool())
                .unwrap_or(false)
                .then(|| g.get_u64("tokenizer.ggml.bos_token_id").unwrap() as u32);
            let mut state = smolrun_core::model::State::new(m, n_ctx).unwrap();
            let par = smolrun_tests::ScopedThreads::from_env();
            smolrun_core::model::perplexity(
                m,
                &mut state,
                store,
                &par,
                &tokens[..chunks * n_ctx],
                n_ctx,
                bos,
                None,
                |_, _| {},
            )
            .unwrap()
            .ppl
        },
    );
    assert!(
        ((ppl - library) / library).abs() < 1e-9,
        "ppl {ppl}, the library's over the same {chunks} chunks {library}"
    );
    let want = golden["running_ppl"][chunks - 1].as_f64().unwrap();
    println!("ppl {ppl} after {chunks} chunks; llama-perplexity {want}");
    let bpb = last["bits_per_byte"].as_f64().unwrap();
    // ln(ppl) nats per token over ~4 bytes per token of English: 0.5 to 2 bits per byte.
    assert!(bpb > 0.5 && bpb < 2.0, "bits per byte {bpb}");
}

#[test]
fn streamed_text_equals_the_json_text_with_multibyte_characters() {
    // Greedy, so both runs produce the same tokens; the streamed pieces must add up to exactly
    // the text, multi-byte characters included (a split character would show as U+FFFD).
    let prompt = "Order: 3 cafés au lait (€4.50 each). 合計は";
    let run = |json: bool| {
        let mut cmd = smolrun();
        cmd.args(["run", "-m"])
            .arg(gemma())
            .args(["-p", prompt, "-n", "12", "--temp", "0"]);
        if json {
            cmd.arg("--json");
        }
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8(o.stdout).expect("stdout is valid UTF-8")
    };
    let streamed = run(false);
    let json: serde_json::Value = serde_json::from_str(run(true).trim()).unwrap();
    let text = json["text"].as_str().unwrap();
    assert_eq!(streamed.strip_suffix('\n'), Some(text));
    assert!(!text.contains('\u{FFFD}'), "{text:?}");
    assert!(
        !text.is_ascii(),
        "the continuation should have non-ASCII text: {text:?}"
    );
}

/// A block scale that is NaN (a damaged 1-bit file) makes every logit NaN; smolrun stops with
/// the tensor and the block instead of sampling garbage.
#[test]
fn a_nan_block_scale_is_named_not_sampled() {
    let src = model("qwen2.5-coder-0.5b-q1_0.gguf");
    let dir = scratch("nan-scale");
    let bad = dir.join("nan-scale.gguf");
    std::fs::copy(&src, &bad).unwrap();
    let bytes = std::fs::read(&bad).unwrap();
    let g = smolrun_core::gguf::Gguf::parse(&bytes).unwrap();
    let t = g.tensor("blk.0.ffn_down.weight").unwrap();
    assert_eq!(t.ggml_type, smolrun_core::quant::GgmlType::Q1_0);
    // block 5's f16 scale (first two bytes of the 18-byte block) becomes a NaN
    let at = t.offset + 5 * 18;
    drop(g);
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(&bad).unwrap();
    f.write_all_at(&0x7e00u16.to_le_bytes(), at).unwrap();
    drop(f);
    let err = expect_failure(
        smolrun()
            .args(["run", "-m"])
            .arg(&bad)
            .args(["-p", "Hello", "-n", "4", "--temp", "0"]),
    );
    assert!(
        err.contains("logits are not finite or all the same")
            && err.contains("'blk.0.ffn_down.weight' (Q1_0)")
            && err.contains("block 5")
            && err.contains("NaN"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
