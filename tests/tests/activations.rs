//! Activation functions against the reference engine's own numbers.
use smolrun_core::math::{gelu_tanh, GeluTable};
use std::path::PathBuf;

/// llama.cpp computes GELU (and Gemma's GEGLU) from a table of f16 results, one per f16 input,
/// for inputs in (-10, 10). Our table must hold the same bits: one differing entry is one
/// activation of one token off by an f16 step (~1e-3 relative), and in a quantized model that
/// is enough to flip later rounding decisions (Gemma 3 hit the entry at -1.999 in text 2 of its
/// logits golden when our formula rounded `1 + a*x*x` before adding).
#[test]
fn gelu_table_holds_the_reference_engines_bits() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden/gelu-f16-table.bin");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        bytes.len(),
        2 << 16,
        "{}: one u16 per f16 input",
        path.display()
    );
    let table = GeluTable::new();
    let mut checked = 0;
    for (bits, entry) in bytes.chunks_exact(2).enumerate() {
        let x = half::f16::from_bits(bits as u16).to_f32();
        if x.is_nan() || x.abs() >= 10.0 {
            continue; // the reference does not read the table there (0 or x), nor for NaN
        }
        let want = half::f16::from_le_bytes([entry[0], entry[1]]).to_f32();
        assert_eq!(
            table.gelu(x).to_bits(),
            want.to_bits(),
            "GELU({x}) (f16 bits {bits:#06x}): ours {}, llama.cpp {want}",
            table.gelu(x)
        );
        assert_eq!(gelu_tanh(x).to_bits(), want.to_bits(), "gelu_tanh({x})");
        checked += 1;
    }
    assert!(checked > 37_000, "only {checked} inputs checked");
}
