//! Every tensor of the real models, dequantized by core::quant, must be bit-identical to what
//! the independent `gguf` Python package (gguf.quants.dequantize, numpy) computes. The golden
//! files hold one sha256 per tensor over its little-endian f32 values; regenerate them with
//! tools/quant-golden.py. Run in release: the 1.5B model alone is ~1.5 G floats.

use smolrun_core::gguf::Gguf;
use smolrun_core::quant::{dequantize_row, GgmlType};
use smolrun_linux::MappedFile;
use std::collections::BTreeMap;
use std::path::PathBuf;

fn models_dir() -> PathBuf {
    match std::env::var_os("SMOLRUN_MODELS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is not set"))
            .join(".cache/smolrun/models"),
    }
}

fn golden(model: &str) -> serde_json::Value {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("golden/dequant-{model}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; regenerate it with tools/quant-golden.py {model}",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: bad JSON: {e}", path.display()))
}

/// Dequantizes every tensor of `model` and compares its digest with the golden one.
/// An absent file fails the test, saying what fetches it.
fn check_model(model: &str) {
    let want = golden(model);
    let file = want["file"].as_str().expect("golden has no \"file\"");
    let path = models_dir().join(file);
    if !path.exists() {
        panic!(
            "{} is absent: run tools/fetch-models.sh {model} (tools/test.sh fetches the small \
             models, tools/test.sh --full the 1.5B)",
            path.display()
        );
    }
    let mapped = MappedFile::open(&path).unwrap();
    let gguf = Gguf::parse(mapped.bytes()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let want_tensors = want["tensors"]
        .as_object()
        .expect("golden has no \"tensors\"");
    assert_eq!(
        gguf.tensors.len(),
        want_tensors.len(),
        "{model}: tensor count differs from the golden"
    );

    // Per type: (tensors bit-exact, tensors differing).
    let mut per_type: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut mismatches = Vec::new();
    let mut buf = vec![0f32; 1 << 16];
    let mut bytes = Vec::with_capacity(4 << 16);
    for t in &gguf.tensors {
        let w = &want_tensors
            .get(t.name)
            .unwrap_or_else(|| panic!("{model}: tensor {} is not in the golden", t.name));
        assert_eq!(
            w["type"].as_str(),
            Some(t.ggml_type.name()),
            "{model}: {} type",
            t.name
        );
        assert_eq!(
            w["n_elements"].as_u64(),
            Some(t.n_elements()),
            "{model}: {} size",
            t.name
        );

        let data = gguf.tensor_data(t);
        let ty: GgmlType = t.ggml_type;
        // Dequantize in pieces of whole blocks that fit the buffer, feeding the hash as we go.
        let elems_per_piece = buf.len() / ty.block_size() * ty.block_size();
        let bytes_per_piece = elems_per_piece / ty.block_size() * ty.type_size();
        let mut hasher = Sha256::new();
        let mut left = t.n_elements() as usize;
        for src in data.chunks(bytes_per_piece) {
            let n = elems_per_piece.min(left);
            dequantize_row(ty, src, &mut buf[..n])
                .unwrap_or_else(|e| panic!("{model}: {}: {e}", t.name));
            bytes.clear();
            for v in &buf[..n] {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
            hasher.update(&bytes);
            left -= n;
        }
        let got = hasher.finish_hex();
        let entry = per_type.entry(ty.name().to_string()).or_default();
        if Some(got.as_str()) == w["sha256"].as_str() {
            entry.0 += 1;
        } else {
            entry.1 += 1;
            mismatches.push(format!("{} ({ty})", t.name));
        }
    }
    eprintln!("{model}: bit-exact tensors per type (exact, differing): {per_type:?}");
    assert!(
        mismatches.is_empty(),
        "{model}: {} tensors differ from gguf-py: {mismatches:?}",
        mismatches.len()
    );
}

#[test]
fn gemma3_270m_dequantizes_like_gguf_py() {
    check_model("gemma3-270m");
}

#[test]
fn qwen25_coder_05b_dequantizes_like_gguf_py() {
    check_model("qwen2.5-coder-0.5b");
}

#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B, 1.1 GB; minutes of CPU)"]
fn qwen25_coder_15b_dequantizes_like_gguf_py() {
    check_model("qwen2.5-coder-1.5b");
}

#[test]
fn sha256_known_answers() {
    let mut h = Sha256::new();
    h.update(b"abc");
    assert_eq!(
        h.finish_hex(),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    // Fed in uneven pieces across the 64-byte block boundary.
    let msg = b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    let mut h = Sha256::new();
    h.update(&msg[..5]);
    h.update(&msg[5..]);
    assert_eq!(
        h.finish_hex(),
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
    );
}

/// SHA-256 (FIPS 180-4), streaming, so the test matches Python's hashlib without a crate.
struct Sha256 {
    state: [u32; 8],
    block: [u8; 64],
    filled: usize,
    total: u64,
}

const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

impl Sha256 {
    fn new() -> Sha256 {
        Sha256 {
            state: [
                0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
                0x5be0cd19,
            ],
            block: [0; 64],
            filled: 0,
            total: 0,
        }
    }

    fn compress(state: &mut [u32; 8], block: &[u8]) {
        let mut w = [0u32; 64];
        for (i, c) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = *state;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = h
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            h = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (s, v) in state.iter_mut().zip([a, b, c, d, e, f, g, h]) {
            *s = s.wrapping_add(v);
        }
    }

    fn update(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        if self.filled > 0 {
            let take = (64 - self.filled).min(data.len());
            self.block[self.filled..self.filled + take].copy_from_slice(&data[..take]);
            self.filled += take;
            data = &data[take..];
            if self.filled < 64 {
                return;
            }
            Self::compress(&mut self.state, &self.block);
            self.filled = 0;
        }
        let mut chunks = data.chunks_exact(64);
        for c in &mut chunks {
            Self::compress(&mut self.state, c);
        }
        let rest = chunks.remainder();
        self.block[..rest.len()].copy_from_slice(rest);
        self.filled = rest.len();
    }

    fn finish_hex(mut self) -> String {
        let bits = self.total * 8;
        self.update(&[0x80]);
        while self.filled != 56 {
            self.update(&[0]);
        }
        self.update(&bits.to_be_bytes());
        self.state.iter().map(|w| format!("{w:08x}")).collect()
    }
}
