//! Developer tool: greedy continuation of token ids, printing ids and timing.
//! `cargo run --release -p smolrun-tests --example gen -- MODEL.gguf N id id id ...`
//! (SMOLRUN_TEST_KERNELS=native: this CPU's kernels instead of the scalar reference)
use smolrun_core::gguf::Gguf;
use smolrun_core::model::{Model, ResidentStore, State};
use smolrun_core::platform::SingleThread;
use smolrun_tests::test_kernels;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let file = smolrun_linux::MappedFile::open(std::path::Path::new(&args[1])).unwrap();
    let n: usize = args[2].parse().unwrap();
    let prompt: Vec<u32> = args[3..].iter().map(|s| s.parse().unwrap()).collect();
    let g = Gguf::parse(file.bytes()).unwrap();
    let model = Model::load_with_kernels(&g, &test_kernels()).unwrap();
    let store = ResidentStore::new(&g);
    let mut state = State::new(&model, 512).unwrap();
    let par = SingleThread;
    let t0 = Instant::now();
    let logits = model
        .forward_batch(&mut state, &store, &par, &prompt, 0)
        .unwrap();
    let mut top: Vec<(usize, f32)> = logits.iter().copied().enumerate().collect();
    top.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
    println!(
        "prompt {:?} in {:?}; top5 {:?}",
        prompt.len(),
        t0.elapsed(),
        &top[..5]
    );
    let mut tok = top[0].0 as u32;
    let mut out = vec![tok];
    let t1 = Instant::now();
    for i in 0..n {
        let logits = model
            .forward(&mut state, &store, &par, tok, prompt.len() + i)
            .unwrap();
        let mut top: Vec<(usize, f32)> = logits.iter().copied().enumerate().collect();
        top.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
        println!(
            "step {} top2 {:?} margin {:.4}",
            i + 1,
            &top[..2],
            top[0].1 - top[1].1
        );
        tok = top[0].0 as u32;
        out.push(tok);
    }
    println!("{:?}", out);
    println!(
        "{:.1} ms/token",
        t1.elapsed().as_secs_f64() * 1000.0 / n as f64
    );
}
