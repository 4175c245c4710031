//! Developer tool for debugging a disagreement with llama.cpp: per-position KL divergence and
//! logit differences against a logits.json golden.
//!
//! `klpos MODEL.gguf logits.json TEXT_INDEX N_POS`
//!   TAP=i      print a summary (sum, l2, first values) of every tapped tensor at position i,
//!              named like llama.cpp's graph tensors, to compare with its eval callback
//!   FULL=name  also print every value of that tensor (e.g. FULL=kqv_out-9)
//!   DECODE=1   run token by token (the decode kernels) instead of as one batch
use smolrun_core::gguf::Gguf;
use smolrun_core::model::{Model, ResidentStore, State};
use smolrun_tests::*;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let file = smolrun_linux::MappedFile::open(std::path::Path::new(&a[1])).unwrap();
    let gold: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a[2]).unwrap()).unwrap();
    let ti: usize = a[3].parse().unwrap();
    let n: usize = a[4].parse().unwrap();
    let g = Gguf::parse(file.bytes()).unwrap();
    let m = Model::load_with_kernels(&g, &test_kernels()).unwrap();
    let store = ResidentStore::new(&g);
    let par = ScopedThreads::from_env();
    let text = &gold["texts"][ti];
    let tokens = ids(&text["tokens"]);
    let mut st = State::new(&m, tokens.len()).unwrap();
    let tap_pos: Option<usize> = std::env::var("TAP").ok().and_then(|s| s.parse().ok());
    if let Some(p) = tap_pos {
        WANT.store(p, std::sync::atomic::Ordering::Relaxed);
        st.tap = Some(print_tap);
    }
    let mut all = Vec::new();
    if std::env::var("DECODE").is_ok_and(|v| !v.is_empty()) {
        for (i, &t) in tokens[..n].iter().enumerate() {
            all.push(m.forward(&mut st, &store, &par, t, i).unwrap().to_vec());
        }
    } else {
        m.forward_batch_all(&mut st, &store, &par, &tokens, 0, 0, &mut |_, l| {
            all.push(l.to_vec());
        })
        .unwrap();
    }
    for i in 0..n {
        let logits = &all[i][..];
        let top: Vec<(u32, f32)> = text["top"][i]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_f64().unwrap() as f32))
            .collect();
        let lse = text["lse"][i].as_f64().unwrap();
        let our_lse = smolrun_core::math::log_sum_exp(logits);
        let kl = kl_top_k(&top, lse, logits);
        let d: Vec<String> = top[..4]
            .iter()
            .map(|&(id, l)| format!("{}:{:+.3}", id, logits[id as usize] - l))
            .collect();
        // nll of the actual next token, ours and the reference's (when it is in the top 20)
        let dnll = tokens.get(i + 1).and_then(|&next| {
            let r = top.iter().find(|p| p.0 == next)?;
            Some((our_lse - logits[next as usize] as f64) - (lse - r.1 as f64))
        });
        println!(
            "{i:3} kl {kl:.5} lse ref {lse:.3} ours {our_lse:.3} d[top4] {} dnll {:+.4}",
            d.join(" "),
            dnll.unwrap_or(f64::NAN)
        );
    }
}

static POS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static WANT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(usize::MAX);

/// Prints a summary of each tapped tensor at the position asked for with TAP.
pub fn print_tap(name: &str, layer: usize, x: &[f32]) {
    use std::sync::atomic::Ordering::Relaxed;
    if name == "inp_scaled" {
        POS.fetch_add(1, Relaxed);
    }
    if POS.load(Relaxed) != WANT.load(Relaxed) + 1 {
        return;
    }
    if std::env::var("FULL").ok().as_deref() == Some(&format!("{name}-{layer}")) {
        for v in x {
            println!("{v:.7e}");
        }
    }
    let s: f64 = x.iter().map(|&v| v as f64).sum();
    let l2: f64 = x
        .iter()
        .map(|&v| (v as f64) * (v as f64))
        .sum::<f64>()
        .sqrt();
    println!(
        "{:<24} n={} sum={s:.6} l2={l2:.6} first={:.6} {:.6} {:.6}",
        format!("{name}-{layer}"),
        x.len(),
        x[0],
        x[1],
        x[2]
    );
}
