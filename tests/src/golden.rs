//! Typed access to the golden data in tests/golden/ (see tests/golden/README.md for the formats
//! and how tools/oracle/regen.sh produced them), the model files they belong to, and the one
//! comparison every logits test needs: a KL divergence against the reference's top-20.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const REAL_MODELS: [&str; 3] = ["gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"];
pub const SYNTHETIC_MODELS: [&str; 14] = [
    "synthetic-qwen3",
    "synthetic-llama",
    "synthetic-qwen3moe",
    "synthetic-qwen2moe",
    "synthetic-bailingmoe2",
    "synthetic-qwen35",
    "synthetic-smollm3",
    "synthetic-phi3",
    "synthetic-olmoe",
    "synthetic-qwen35moe",
    "synthetic-lfm2",
    "synthetic-lfm2moe",
    "synthetic-smallthinker",
    "synthetic-granitehybrid",
];

/// Models requantized to the 1-bit, 2-bit and ternary types by `llama-quantize
/// --allow-requantize --pure` (the goldens' files) or `smolrun gguf requant` (tools/fetch-models.sh
/// lowbit: the same bytes, checked in golden_files.rs). Qwen2.5-Coder-0.5B in Q1_0 and Q2_K (real
/// shapes; Q2_K's rows of 896 do not divide into 256-blocks, so only ffn_down is Q2_K there, the
/// rest llama.cpp's fallback Q4_0). Q2_0 and the ternary types make the 0.5B chaotic (its text
/// degenerates and a last-bit change in an activation moves later logits by whole units:
/// llama.cpp's own F16 copy of its Q2_0 file scores 8% another perplexity on 630 tokens, and
/// ours differs from llama.cpp's by as much), so those are the synthetic Qwen3 requantized, and
/// so is Q2_K a second time, in every matrix. And the 0.5B in IQ4_NL and IQ4_XS (#33; IQ4_XS's
/// rows of 896 fall back to IQ4_NL, so there half the matrices are IQ4_XS, half IQ4_NL). And the
/// synthetic Qwen3 in IQ2_XXS, IQ3_XXS, IQ2_XS, IQ2_S, IQ3_S, IQ1_S and IQ1_M (#33): every matrix but
/// the token
/// embedding (Q8_0: no matmul reads
/// it, so the importance matrix IQ2_XXS needs has no entry for it), made by llama-quantize with
/// tools/oracle/imatrix/synthetic-qwen3.gguf.
pub const LOWBIT_MODELS: [&str; 15] = [
    "qwen2.5-coder-0.5b-q1_0",
    "qwen2.5-coder-0.5b-q2_k",
    "synthetic-qwen3-q2_0",
    "synthetic-qwen3-tq1_0",
    "synthetic-qwen3-tq2_0",
    "synthetic-qwen3-q2_k",
    "qwen2.5-coder-0.5b-iq4_nl",
    "qwen2.5-coder-0.5b-iq4_xs",
    "synthetic-qwen3-iq2_xxs",
    "synthetic-qwen3-iq3_xxs",
    "synthetic-qwen3-iq2_xs",
    "synthetic-qwen3-iq2_s",
    "synthetic-qwen3-iq3_s",
    "synthetic-qwen3-iq1_s",
    "synthetic-qwen3-iq1_m",
];

/// Qwen2.5-Coder-1.5B requantized to the types of #33 by tools/oracle/qwen15b-types.sh
/// (llama-quantize b11434 with its importance matrix): `-pure`, every matrix the type (the head,
/// output.weight, is its own tensor in this file and one of them) and the token embedding Q8_0;
/// without, the mix llama-quantize makes for that type, as published files are made. The by-hand
/// group (tools/test.sh --full): the files are 0.5-1.1 GB each and no test makes them; goldens by
/// tools/oracle/regen.sh NAME.
pub const LOWBIT_15B_MODELS: [&str; 8] = [
    "qwen2.5-coder-1.5b-iq4_nl-pure",
    "qwen2.5-coder-1.5b-iq4_xs-pure",
    "qwen2.5-coder-1.5b-iq2_xxs",
    "qwen2.5-coder-1.5b-iq3_xxs",
    "qwen2.5-coder-1.5b-iq3_xxs-pure",
    "qwen2.5-coder-1.5b-iq2_xxs-pure",
    "qwen2.5-coder-1.5b-q3_k-pure",
    "qwen2.5-coder-1.5b-q5_k-pure",
];

/// Models with no greedy.json: their greedy text is degenerate. Qwen2.5-Coder-0.5B in Q1_0
/// continues every prompt of tools/oracle/texts.json with one token, " \r\n\r\n", 32 times:
/// a test over it would check one argmax again and again, where its logits test
/// (tests/tests/logits.rs) holds the Q1_0 kernel to llama.cpp's logits at every position of
/// real text. tools/oracle/regen.sh removes the file it writes.
pub const NO_GREEDY: [&str; 1] = ["qwen2.5-coder-0.5b-q1_0"];

const REGEN: &str = "run tools/oracle/regen.sh to regenerate the golden data";

pub use crate::{models_dir, repo_root};

/// tests/golden/<model>/
pub fn golden_dir(model: &str) -> PathBuf {
    repo_root().join("tests/golden").join(model)
}

/// The GGUF file a golden directory was produced from.
pub fn model_file(model: &str) -> Result<PathBuf, String> {
    if !REAL_MODELS.contains(&model)
        && !SYNTHETIC_MODELS.contains(&model)
        && !LOWBIT_MODELS.contains(&model)
        && !LOWBIT_15B_MODELS.contains(&model)
    {
        return Err(format!("no golden data for a model named {model:?}"));
    }
    Ok(models_dir().join(crate::model_file_name(model)))
}

/// A real model's file, or an error that says how to fetch it.
pub fn real_model(model: &str) -> Result<PathBuf, String> {
    let path = model_file(model)?;
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} is missing: run tools/fetch-models.sh{}",
            path.display(),
            if model == "qwen2.5-coder-1.5b" {
                " all"
            } else {
                ""
            }
        ))
    }
}

/// A synthetic model's file, written by tools/oracle/synth_model.py if it is absent or its size
/// differs from the one the goldens were made from (tests/golden/<model>/model.json).
pub fn synthetic_model(model: &str) -> Result<PathBuf, String> {
    let arch = model
        .strip_prefix("synthetic-")
        .ok_or_else(|| format!("{model:?} is not a synthetic model"))?;
    let path = model_file(model)?;
    let recorded = read_json(&golden_dir(model).join("model.json"))?;
    let bytes = recorded.get("bytes").and_then(Value::as_u64).unwrap_or(0);
    let sha256 = recorded.get("sha256").and_then(Value::as_str).unwrap_or("");
    // A file left by an older synth_model.py can have the same size (same shapes and types,
    // other weights), so the content is compared too: the goldens are only valid for those bytes.
    if std::fs::metadata(&path).map(|m| m.len()).ok() == Some(bytes)
        && file_sha256(&path)? == sha256
    {
        return Ok(path);
    }
    let vocab = real_model("qwen2.5-coder-0.5b")
        .map_err(|e| format!("the synthetic models copy its tokenizer: {e}"))?;
    let run = Command::new("python3")
        .arg(repo_root().join("tools/oracle/synth_model.py"))
        .arg(arch)
        .arg("--out")
        .arg(models_dir())
        .arg("--tokenizer-from")
        .arg(vocab)
        .output()
        .map_err(|e| format!("cannot run python3 tools/oracle/synth_model.py: {e}"))?;
    if !run.status.success() {
        return Err(format!(
            "tools/oracle/synth_model.py {arch} failed (it needs python3 with numpy and gguf==0.19.0): {}{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        ));
    }
    let written = file_sha256(&path)?;
    if written != sha256 {
        return Err(format!(
            "{} has sha256 {written}, the goldens were made from a file with {sha256} \
             (tests/golden/{model}/model.json): {REGEN}",
            path.display()
        ));
    }
    Ok(path)
}

/// sha256 of a GGUF file's tensor data, from the file's own data offset (headers written by
/// two tools may differ), as tools/oracle/tensor_data_sha256.py computes it for the goldens'
/// `tensor_data_sha256`: (that offset, the hex digest). Panics with python3's message.
pub fn tensor_data_sha256(path: &Path) -> (u64, String) {
    let out = Command::new("python3")
        .arg(repo_root().join("tools/oracle/tensor_data_sha256.py"))
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 tools/oracle/tensor_data_sha256.py: {e}"));
    assert!(
        out.status.success(),
        "tools/oracle/tensor_data_sha256.py {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    let (offset, sha) = printed.trim().split_once(' ').expect("offset and hash");
    (offset.parse().expect("an offset"), sha.to_string())
}

/// sha256 of a file, by python3's hashlib (which writing a synthetic model needs anyway).
fn file_sha256(path: &Path) -> Result<String, String> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], 'rb').read()).hexdigest())",
        ])
        .arg(path)
        .output()
        .map_err(|e| format!("cannot run python3 to hash {}: {e}", path.display()))?;
    if !out.status.success() {
        return Err(format!(
            "python3 could not hash {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}; {REGEN}", path.display()))?;
    serde_json::from_str(&text)
        .map_err(|e| format!("{} is not valid JSON: {e}; {REGEN}", path.display()))
}

fn get<'a>(v: &'a Value, key: &str, file: &str) -> Result<&'a Value, String> {
    v.get(key)
        .ok_or_else(|| format!("{file}: missing key {key:?}; {REGEN}"))
}

fn get_str(v: &Value, key: &str, file: &str) -> Result<String, String> {
    get(v, key, file)?
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{file}: {key:?} is not a string"))
}

fn get_u64(v: &Value, key: &str, file: &str) -> Result<u64, String> {
    get(v, key, file)?
        .as_u64()
        .ok_or_else(|| format!("{file}: {key:?} is not an unsigned integer"))
}

fn get_f64(v: &Value, key: &str, file: &str) -> Result<f64, String> {
    get(v, key, file)?
        .as_f64()
        .ok_or_else(|| format!("{file}: {key:?} is not a number"))
}

fn get_array<'a>(v: &'a Value, key: &str, file: &str) -> Result<&'a Vec<Value>, String> {
    get(v, key, file)?
        .as_array()
        .ok_or_else(|| format!("{file}: {key:?} is not an array"))
}

fn get_ids(v: &Value, key: &str, file: &str) -> Result<Vec<u32>, String> {
    get_array(v, key, file)?
        .iter()
        .map(|x| {
            x.as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .ok_or_else(|| format!("{file}: {key:?} holds {x}, not a token id"))
        })
        .collect()
}

fn get_floats(v: &Value, key: &str, file: &str) -> Result<Vec<f64>, String> {
    get_array(v, key, file)?
        .iter()
        .map(|x| {
            x.as_f64()
                .ok_or_else(|| format!("{file}: {key:?} holds {x}, not a number"))
        })
        .collect()
}

/// tokenize.json: one case per entry of tools/oracle/corpus.json
pub struct TokenizeCase {
    pub text: String,
    pub add_special: bool,
    pub parse_special: bool,
    pub ids: Vec<u32>,
}

pub fn load_tokenize(model: &str) -> Result<Vec<TokenizeCase>, String> {
    let file = format!("{model}/tokenize.json");
    let doc = read_json(&golden_dir(model).join("tokenize.json"))?;
    get_array(&doc, "cases", &file)?
        .iter()
        .map(|c| {
            Ok(TokenizeCase {
                text: get_str(c, "text", &file)?,
                add_special: get(c, "add_special", &file)?.as_bool() == Some(true),
                parse_special: get(c, "parse_special", &file)?.as_bool() == Some(true),
                ids: get_ids(c, "ids", &file)?,
            })
        })
        .collect()
}

/// logits.json: teacher-forced reference logits of one text
pub struct LogitsText {
    pub text: String,
    pub tokens: Vec<u32>,
    /// top[i]: the 20 largest (id, logit) after reading tokens[0..=i], descending
    pub top: Vec<Vec<(u32, f32)>>,
    /// lse[i]: log-sum-exp of all logits at position i
    pub lse: Vec<f64>,
}

pub struct LogitsGolden {
    pub n_ctx: usize,
    pub n_vocab: usize,
    pub texts: Vec<LogitsText>,
}

pub fn load_logits(model: &str) -> Result<LogitsGolden, String> {
    let file = format!("{model}/logits.json");
    let doc = read_json(&golden_dir(model).join("logits.json"))?;
    let mut texts = Vec::new();
    for t in get_array(&doc, "texts", &file)? {
        let mut top = Vec::new();
        for pos in get_array(t, "top", &file)? {
            let pairs = pos
                .as_array()
                .ok_or_else(|| format!("{file}: a top entry is not an array"))?;
            let mut row = Vec::with_capacity(pairs.len());
            for pair in pairs {
                let id = pair.get(0).and_then(Value::as_u64);
                let logit = pair.get(1).and_then(Value::as_f64);
                match (id, logit) {
                    (Some(id), Some(logit)) => row.push((id as u32, logit as f32)),
                    _ => return Err(format!("{file}: {pair} is not an [id, logit] pair")),
                }
            }
            top.push(row);
        }
        texts.push(LogitsText {
            text: get_str(t, "text", &file)?,
            tokens: get_ids(t, "tokens", &file)?,
            top,
            lse: get_floats(t, "lse", &file)?,
        });
    }
    Ok(LogitsGolden {
        n_ctx: get_u64(&doc, "n_ctx", &file)? as usize,
        n_vocab: get_u64(&doc, "n_vocab", &file)? as usize,
        texts,
    })
}

/// greedy.json: one greedy continuation
pub struct GreedyCase {
    pub prompt: String,
    pub prompt_tokens: Vec<u32>,
    pub n_predict: usize,
    pub tokens: Vec<u32>,
    pub text: String,
    pub stopped_at_eog: bool,
    /// top-1 minus top-2 logit at each generated step: below a test's tolerance, a correct
    /// engine may pick the other token, so compare only up to the first such step
    pub margins: Vec<f64>,
}

pub fn load_greedy(model: &str) -> Result<Vec<GreedyCase>, String> {
    let file = format!("{model}/greedy.json");
    let doc = read_json(&golden_dir(model).join("greedy.json"))?;
    get_array(&doc, "cases", &file)?
        .iter()
        .map(|c| {
            Ok(GreedyCase {
                prompt: get_str(c, "prompt", &file)?,
                prompt_tokens: get_ids(c, "prompt_tokens", &file)?,
                n_predict: get_u64(c, "n_predict", &file)? as usize,
                tokens: get_ids(c, "tokens", &file)?,
                text: get_str(c, "text", &file)?,
                stopped_at_eog: get(c, "stopped_at_eog", &file)?.as_bool() == Some(true),
                margins: get_floats(c, "margins", &file)?,
            })
        })
        .collect()
}

/// perplexity.json: llama-perplexity on tests/golden/ppl-text.txt
pub struct PerplexityGolden {
    pub text_file: PathBuf,
    pub n_ctx: usize,
    pub ppl: f64,
    pub n_chunks: usize,
}

pub fn load_perplexity(model: &str) -> Result<PerplexityGolden, String> {
    let file = format!("{model}/perplexity.json");
    let doc = read_json(&golden_dir(model).join("perplexity.json"))?;
    Ok(PerplexityGolden {
        text_file: repo_root().join(get_str(&doc, "file", &file)?),
        n_ctx: get_u64(&doc, "n_ctx", &file)? as usize,
        ppl: get_f64(&doc, "ppl", &file)?,
        n_chunks: get_u64(&doc, "n_chunks", &file)? as usize,
    })
}

/// KL(reference || ours) over the partition {each of the reference's top-20 ids, every other id},
/// which the golden data determines exactly: the reference's probability of id k is
/// exp(logit_k - lse), the rest gets 1 - their sum; ours come from our full logits.
pub fn kl_top20(top: &[(u32, f32)], lse: f64, ours: &[f32]) -> f64 {
    crate::kl_top_k(top, lse, ours)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kl_is_zero_for_the_reference_itself_and_grows_with_a_shift() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 100) as f32 / 10.0).collect();
        let mut ids: Vec<u32> = (0..100).collect();
        ids.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
        let top: Vec<(u32, f32)> = ids[..20].iter().map(|&i| (i, logits[i as usize])).collect();
        let max = top[0].1 as f64;
        let lse = max
            + logits
                .iter()
                .map(|&x| (x as f64 - max).exp())
                .sum::<f64>()
                .ln();
        assert!(kl_top20(&top, lse, &logits) < 1e-12);
        // a constant shift of every logit leaves the softmax unchanged
        let shifted: Vec<f32> = logits.iter().map(|x| x + 3.0).collect();
        assert!(kl_top20(&top, lse, &shifted) < 1e-9);
        // moving mass from the best id to another is a real divergence
        let mut moved = logits.clone();
        moved[top[0].0 as usize] -= 2.0;
        moved[top[19].0 as usize] += 2.0;
        assert!(kl_top20(&top, lse, &moved) > 1e-3);
    }
}
