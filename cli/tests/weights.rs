//! `--weights`: where the weights live while running. A model file bigger than the address
//! space this process may map (iOS 1.7 GB, 32-bit 3 GB, `ulimit -v`, or SMOLRUN_ADDRESS_SPACE
//! as here) opens with the pread store instead of being refused, and gives the text the mapped
//! run gives; `--weights resident` still refuses it, with both sizes.
//! Meant for release mode: `cargo test --release -p smolrun`.

mod common;
use common::*;

const PROMPT: &str = "def fibonacci(n):";

fn greedy(extra: &[&str], env: Option<(&str, &str)>) -> std::process::Output {
    let mut cmd = smolrun();
    cmd.args(["run", "-m"])
        .arg(model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
        .args([
            "-p", PROMPT, "-n", "12", "--temp", "0", "-c", "256", "--json",
        ])
        .args(extra);
    if let Some((k, v)) = env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn tokens(o: &std::process::Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", stderr(o));
    let got: serde_json::Value = serde_json::from_str(stdout(o).trim()).unwrap();
    got["tokens"].clone()
}

#[test]
fn a_file_bigger_than_the_address_space_opens_with_the_pread_store() {
    let mapped = greedy(&[], None);
    assert!(!stderr(&mapped).contains("pread"), "{}", stderr(&mapped));

    // The 491 MB file against a 300 MiB address space (less the 384 MiB kept for the program:
    // no room at all for the file).
    let budget = Some(("SMOLRUN_ADDRESS_SPACE", "300M"));
    let unmapped = greedy(&[], budget);
    let err = stderr(&unmapped);
    assert!(err.contains("read with pread instead of mapped"), "{err}");
    assert!(err.contains("491 MB"), "{err}");
    assert_eq!(tokens(&unmapped), tokens(&mapped));

    // Forced, without any budget: the same text.
    assert_eq!(
        tokens(&greedy(&["--weights", "pread"], None)),
        tokens(&mapped)
    );

    // Forced to map it: refused before mapping, with both sizes and what to do.
    let o = greedy(&["--weights", "resident"], budget);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("491 MB") && err.contains("can map only"),
        "{err}"
    );
}
