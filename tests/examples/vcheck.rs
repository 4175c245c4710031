//! Developer tool: recomputes blk.0 V and K three ways to see which llama.cpp matches.
use smolrun_core::gguf::Gguf;
use smolrun_core::model::{Model, ResidentStore, State};
use smolrun_core::platform::SingleThread;
use smolrun_core::quant;
use std::sync::Mutex;

static XB: Mutex<Vec<f32>> = Mutex::new(Vec::new());
fn grab(name: &str, l: usize, x: &[f32]) {
    if name == "attn_norm" && l == 0 {
        *XB.lock().unwrap() = x.to_vec();
    }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let file = smolrun_linux::MappedFile::open(std::path::Path::new(&a[1])).unwrap();
    let g = Gguf::parse(file.bytes()).unwrap();
    let m = Model::load(&g).unwrap();
    let store = ResidentStore::new(&g);
    let mut st = State::new(&m, 8).unwrap();
    st.tap = Some(grab);
    m.forward(&mut st, &store, &SingleThread, a[2].parse().unwrap(), 0)
        .unwrap();
    let x = XB.lock().unwrap().clone();
    for name in [&a[3]] {
        let t = g.tensor(name).unwrap();
        let data = g.tensor_data(t);
        let (n_cols, rb) = (t.dims[0] as usize, t.row_bytes());
        let mut row = vec![0f32; n_cols];
        let act_ty = quant::vec_dot_type(t.ggml_type).unwrap();
        let mut aq = vec![0u8; quant::row_bytes(act_ty, n_cols).unwrap()];
        quant::quantize_row(act_ty, &x, &mut aq).unwrap();
        let mut xd = vec![0f32; n_cols];
        quant::dequantize_row(act_ty, &aq, &mut xd).unwrap();
        let dot = quant::vec_dot_fn(t.ggml_type).unwrap();
        for r in 0..3 {
            quant::dequantize_row(t.ggml_type, &data[r * rb..(r + 1) * rb], &mut row).unwrap();
            let exact: f64 = row.iter().zip(&x).map(|(&w, &v)| w as f64 * v as f64).sum();
            let deq: f64 = row
                .iter()
                .zip(&xd)
                .map(|(&w, &v)| w as f64 * v as f64)
                .sum();
            let q = dot(n_cols, &data[r * rb..(r + 1) * rb], &aq);
            println!("{name} row {r}: f32 act {exact:.6}  q-act dequant {deq:.6}  kernel {q:.6}");
        }
    }
}
