//! Developer tool: perplexity with the running value after each chunk, as llama-perplexity
//! prints it. `ppl MODEL.gguf ppl-tokens.json N_CTX [BOS]`
//! (PER_TOKEN=1: also each scored token's negative log-likelihood, `nll INDEX VALUE`)
use smolrun_core::gguf::Gguf;
use smolrun_core::model::{perplexity, Model, ResidentStore, State};
use smolrun_tests::*;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let file = smolrun_linux::MappedFile::open(std::path::Path::new(&a[1])).unwrap();
    let toks: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a[2]).unwrap()).unwrap();
    let tokens = ids(&toks["tokens"]);
    let n_ctx: usize = a[3].parse().unwrap();
    let bos: Option<u32> = a.get(4).map(|s| s.parse().unwrap());
    let g = Gguf::parse(file.bytes()).unwrap();
    let m = Model::load_with_kernels(&g, &test_kernels()).unwrap();
    let store = ResidentStore::new(&g);
    let mut st = State::new(&m, n_ctx).unwrap();
    let par = ScopedThreads::from_env();
    let (mut sum, mut n) = (0f64, 0usize);
    let per_token = std::env::var_os("PER_TOKEN").is_some();
    let t0 = std::time::Instant::now();
    let r = perplexity(
        &m,
        &mut st,
        &store,
        &par,
        &tokens,
        n_ctx,
        bos,
        None,
        |i, nll| {
            sum += nll;
            n += 1;
            if per_token {
                println!("nll {i} {nll:.6}");
            }
            if (i + 1) % n_ctx == 0 {
                println!("[{}] {:.4}", (i + 1) / n_ctx, (sum / n as f64).exp());
            }
        },
    )
    .unwrap();
    println!(
        "ppl {:.4} over {} tokens in {:?}",
        r.ppl,
        r.n_scored,
        t0.elapsed()
    );
}
