fn main() {
    let p = std::env::args().nth(1).unwrap();
    let b = std::fs::read(p).unwrap();
    let g = smolrun_core::gguf::Gguf::parse(&b).unwrap();
    for e in &g.metadata {
        match e.value {
            smolrun_core::gguf::Value::Array(a) => {
                println!("{} = array<{:?}>[{}]", e.key, a.elem_type, a.len)
            }
            v => println!("{} = {:?}", e.key, v),
        }
    }
    for t in g.tensors.iter().take(40) {
        println!(
            "{} {} {:?} {}",
            t.name,
            t.ggml_type,
            &t.dims[..t.n_dims],
            t.offset
        );
    }
    println!("{} tensors", g.tensors.len());
}
