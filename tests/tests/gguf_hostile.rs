//! Hostile GGUF files, each built by hand, each rejected with its own error variant: the
//! reader must never panic, read out of bounds, or allocate what the file cannot back.

use smolrun_core::gguf::{Gguf, GgufError, GgufWriter, MAX_ARRAY_NESTING};
use smolrun_core::quant::GgmlType;
use smolrun_tests::gguf_bytes::{GgufBytes, T_ARRAY, T_STR, T_U32, T_U64};

const F32: u32 = 0;

fn parse_err(b: &GgufBytes) -> GgufError {
    match Gguf::parse(b.bytes()) {
        Ok(g) => panic!(
            "expected an error, parsed {} keys and {} tensors",
            g.metadata.len(),
            g.tensors.len()
        ),
        Err(e) => {
            // Every error must render; the text is what a user sees.
            assert!(!e.to_string().is_empty());
            e
        }
    }
}

/// A well-formed file with one f32 tensor of `n` elements, for the cases that break only the data.
fn one_tensor_file(dims: &[u64], type_id: u32, offset: u64) -> GgufBytes {
    GgufBytes::header(3, 1, 0).tensor("w", dims, type_id, offset)
}

#[test]
fn truncated_header() {
    let e = parse_err(&GgufBytes(b"GGUF\x03\x00\x00\x00\x01\x00".to_vec()));
    match &e {
        GgufError::Truncated {
            what,
            offset,
            needed,
            available,
        } => {
            assert_eq!(what, "tensor count");
            assert_eq!((*offset, *needed, *available), (8, 8, 2));
        }
        e => panic!("wrong error: {e:?}"),
    }
    assert!(matches!(
        parse_err(&GgufBytes(b"GG".to_vec())),
        GgufError::Truncated { .. }
    ));
}

#[test]
fn bad_magic_and_unsupported_versions() {
    assert_eq!(
        parse_err(&GgufBytes(b"GGML\x03\x00\x00\x00".to_vec())),
        GgufError::BadMagic { found: *b"GGML" }
    );
    for version in [0, 1, 4, 0x0300_0000] {
        assert_eq!(
            parse_err(&GgufBytes::header(version, 0, 0)),
            GgufError::UnsupportedVersion { found: version }
        );
    }
}

#[test]
fn tensor_data_past_end_of_file() {
    // 64 f32 = 256 bytes promised, 100 present.
    let b = one_tensor_file(&[64], F32, 0).pad_to(32).data(100);
    match parse_err(&b) {
        GgufError::TensorOutOfBounds {
            tensor,
            offset,
            n_bytes,
            data_len,
        } => {
            assert_eq!(tensor, "w");
            assert_eq!((offset, n_bytes, data_len), (0, 256, 100));
        }
        e => panic!("wrong error: {e:?}"),
    }
}

#[test]
fn tensor_offset_near_u64_max_does_not_wrap() {
    let b = one_tensor_file(&[8], F32, u64::MAX - 31)
        .pad_to(32)
        .data(32);
    assert!(matches!(
        parse_err(&b),
        GgufError::TensorOutOfBounds { offset, .. } if offset == u64::MAX - 31
    ));
}

#[test]
fn padding_before_data_missing() {
    // The tensor info ends mid-block; the padding to the data section is not there.
    let b = one_tensor_file(&[0], F32, 0);
    assert!(matches!(
        parse_err(&b),
        GgufError::Truncated { what, .. } if what.contains("padding")
    ));
}

#[test]
fn tensor_count_2_pow_62() {
    let b = GgufBytes::header(3, 1 << 62, 0).data(64);
    match parse_err(&b) {
        GgufError::CountExceedsFile {
            what,
            count,
            max_possible,
        } => {
            assert_eq!(what, "tensor count");
            assert_eq!(count, 1 << 62);
            assert_eq!(
                max_possible, 2,
                "64 bytes hold at most two 32-byte tensor infos"
            );
        }
        e => panic!("wrong error: {e:?}"),
    }
}

#[test]
fn metadata_count_past_end() {
    let b = GgufBytes::header(2, 0, u64::MAX).data(26);
    assert!(matches!(
        parse_err(&b),
        GgufError::CountExceedsFile { what, count: u64::MAX, max_possible: 2 } if what == "metadata count"
    ));
}

#[test]
fn string_length_past_end() {
    // A string value that claims 1000 bytes with 3 present.
    let b = GgufBytes::header(3, 0, 1)
        .str("general.name")
        .u32(T_STR)
        .u64(1000)
        .raw(b"abc");
    match parse_err(&b) {
        GgufError::Truncated {
            what,
            needed,
            available,
            ..
        } => {
            assert_eq!(what, "value of metadata key 'general.name'");
            assert_eq!((needed, available), (1000, 3));
        }
        e => panic!("wrong error: {e:?}"),
    }
    // The key itself, with a length of u64::MAX.
    let b = GgufBytes::header(3, 0, 1).u64(u64::MAX).data(16);
    assert!(matches!(
        parse_err(&b),
        GgufError::Truncated { what, needed: u64::MAX, .. } if what == "key of metadata entry 0"
    ));
}

#[test]
fn array_of_2_pow_40_elements() {
    let b = GgufBytes::header(3, 0, 1)
        .str("tokenizer.ggml.scores")
        .u32(T_ARRAY)
        .u32(T_U32)
        .u64(1 << 40)
        .data(40);
    match parse_err(&b) {
        GgufError::CountExceedsFile {
            what,
            count,
            max_possible,
        } => {
            assert_eq!(what, "element count of array 'tokenizer.ggml.scores'");
            assert_eq!((count, max_possible), (1 << 40, 10));
        }
        e => panic!("wrong error: {e:?}"),
    }
    // Strings: each needs at least its 8-byte length.
    let b = GgufBytes::header(3, 0, 1)
        .str("tokenizer.ggml.tokens")
        .u32(T_ARRAY)
        .u32(T_STR)
        .u64(1 << 40)
        .data(40);
    assert!(matches!(
        parse_err(&b),
        GgufError::CountExceedsFile { count, max_possible: 5, .. } if count == 1 << 40
    ));
}

#[test]
fn misaligned_tensor_offset() {
    let b = one_tensor_file(&[4], F32, 4).pad_to(32).data(64);
    assert_eq!(
        parse_err(&b),
        GgufError::MisalignedTensor {
            tensor: "w".into(),
            offset: 4,
            alignment: 32
        }
    );
    // With general.alignment = 8, offset 4 is still misaligned, offset 8 is fine.
    let with_alignment = |offset| {
        GgufBytes::header(3, 1, 1)
            .kv_u32("general.alignment", 8)
            .tensor("w", &[4], F32, offset)
            .pad_to(8)
            .data(64)
    };
    assert!(matches!(
        parse_err(&with_alignment(4)),
        GgufError::MisalignedTensor { alignment: 8, .. }
    ));
    assert!(Gguf::parse(with_alignment(8).bytes()).is_ok());
}

#[test]
fn unknown_tensor_type_999() {
    let b = one_tensor_file(&[4], 999, 0).pad_to(32).data(64);
    assert_eq!(
        parse_err(&b),
        GgufError::UnknownTensorType {
            tensor: "w".into(),
            found: 999
        }
    );
}

#[test]
fn duplicate_tensor_names() {
    let b = GgufBytes::header(3, 2, 0)
        .tensor("blk.0.attn_q.weight", &[8], F32, 0)
        .tensor("blk.0.attn_q.weight", &[8], F32, 32)
        .pad_to(32)
        .data(64);
    assert_eq!(
        parse_err(&b),
        GgufError::DuplicateTensor {
            tensor: "blk.0.attn_q.weight".into()
        }
    );
}

#[test]
fn duplicate_metadata_keys() {
    let b = GgufBytes::header(3, 0, 2)
        .kv_str("general.architecture", "llama")
        .kv_str("general.architecture", "qwen2");
    assert_eq!(
        parse_err(&b),
        GgufError::DuplicateKey {
            key: "general.architecture".into()
        }
    );
}

#[test]
fn shape_whose_element_count_overflows_u64() {
    let b = one_tensor_file(&[1 << 32, 1 << 32], F32, 0)
        .pad_to(32)
        .data(64);
    assert_eq!(
        parse_err(&b),
        GgufError::ShapeOverflow {
            tensor: "w".into(),
            dims: [1 << 32, 1 << 32, 1, 1]
        }
    );
    // A dimension above i64::MAX (negative in ggml's int64_t).
    let b = one_tensor_file(&[4, u64::MAX], F32, 0).pad_to(32).data(64);
    assert!(matches!(parse_err(&b), GgufError::ShapeOverflow { .. }));
    // An empty axis does not excuse a row whose byte size overflows.
    let b = one_tensor_file(&[1 << 62, 0], F32, 0).pad_to(32).data(64);
    assert!(matches!(parse_err(&b), GgufError::ShapeOverflow { .. }));
    // Elements fit in i64, bytes do not (8 bytes each).
    let b = one_tensor_file(&[1 << 62], 28, 0).pad_to(32).data(64);
    assert!(matches!(parse_err(&b), GgufError::ShapeOverflow { .. }));
}

#[test]
fn rows_not_whole_blocks() {
    let b = one_tensor_file(&[100, 2], GgmlType::Q4_K.id(), 0)
        .pad_to(32)
        .data(64);
    assert_eq!(
        parse_err(&b),
        GgufError::RowNotWholeBlocks {
            tensor: "w".into(),
            ggml_type: GgmlType::Q4_K,
            row_len: 100,
            block_size: 256
        }
    );
    // the 1-bit, 2-bit and ternary types, whose blocks are 128, 64 and 256 long, and IQ4_NL
    // (32) and IQ4_XS (256)
    for (ty, row_len, block_size) in [
        (GgmlType::Q1_0, 192, 128),
        (GgmlType::Q2_0, 96, 64),
        (GgmlType::TQ1_0, 128, 256),
        (GgmlType::TQ2_0, 384, 256),
        (GgmlType::IQ4_NL, 48, 32),
        (GgmlType::IQ4_XS, 896, 256),
    ] {
        let b = one_tensor_file(&[row_len, 2], ty.id(), 0)
            .pad_to(32)
            .data(4096);
        assert_eq!(
            parse_err(&b),
            GgufError::RowNotWholeBlocks {
                tensor: "w".into(),
                ggml_type: ty,
                row_len,
                block_size
            }
        );
    }
}

#[test]
fn general_alignment_zero_or_not_power_of_two() {
    for bad in [0u32, 48, 3] {
        let b = GgufBytes::header(3, 0, 1).kv_u32("general.alignment", bad);
        assert_eq!(parse_err(&b), GgufError::BadAlignment { found: bad as u64 });
    }
    let b = GgufBytes::header(3, 0, 1)
        .str("general.alignment")
        .u32(T_U64)
        .u64(32);
    assert_eq!(
        parse_err(&b),
        GgufError::WrongValueType {
            key: "general.alignment".into(),
            expected: "u32",
            found: "u64"
        }
    );
}

#[test]
fn unknown_value_type() {
    let b = GgufBytes::header(3, 0, 1).str("k").u32(13).u32(0);
    assert_eq!(
        parse_err(&b),
        GgufError::UnknownValueType {
            key: "k".into(),
            found: 13
        }
    );
    // Also as an array's element type.
    let b = GgufBytes::header(3, 0, 1)
        .str("k")
        .u32(T_ARRAY)
        .u32(0xdead)
        .u64(0);
    assert_eq!(
        parse_err(&b),
        GgufError::UnknownValueType {
            key: "k".into(),
            found: 0xdead
        }
    );
}

#[test]
fn array_nesting_too_deep() {
    // `levels` arrays, each holding one array, the innermost holding no u32.
    let nested = |levels: u32| {
        let mut b = GgufBytes::header(3, 0, 1).str("deep").u32(T_ARRAY);
        for _ in 1..levels {
            b = b.u32(T_ARRAY).u64(1);
        }
        b.u32(T_U32).u64(0)
    };
    assert!(Gguf::parse(nested(MAX_ARRAY_NESTING).bytes()).is_ok());
    assert_eq!(
        parse_err(&nested(MAX_ARRAY_NESTING + 1)),
        GgufError::ArrayTooDeep {
            key: "deep".into(),
            depth: MAX_ARRAY_NESTING + 1
        }
    );
    // Far deeper than the limit, and truncated: still the nesting error, no deep recursion.
    assert!(matches!(
        parse_err(&nested(100_000)),
        GgufError::ArrayTooDeep { .. }
    ));
}

#[test]
fn dimension_count_0_and_5() {
    for dims in [&[][..], &[1, 1, 1, 1, 1][..]] {
        let b = one_tensor_file(dims, F32, 0).pad_to(32).data(64);
        assert_eq!(
            parse_err(&b),
            GgufError::BadDimCount {
                tensor: "w".into(),
                found: dims.len() as u32
            }
        );
    }
}

#[test]
fn invalid_utf8_key() {
    let b = GgufBytes::header(3, 0, 1)
        .u64(2)
        .raw(&[0xff, 0xfe])
        .u32(T_U32)
        .u32(1);
    assert!(matches!(
        parse_err(&b),
        GgufError::InvalidUtf8 { what, offset: 24 } if what == "key of metadata entry 0"
    ));
}

/// A metadata array of strings `key` = `texts`, each given as raw bytes.
fn string_array_file(texts: &[&[u8]]) -> GgufBytes {
    let mut b = GgufBytes::header(3, 0, 1)
        .u64(6)
        .raw(b"tokens")
        .u32(T_ARRAY)
        .u32(T_STR)
        .u64(texts.len() as u64);
    for t in texts {
        b = b.u64(t.len() as u64).raw(t);
    }
    b
}

#[test]
fn string_arrays_are_checked_as_utf8_string_by_string() {
    // Valid: multi-byte characters, an empty string, one of 200 bytes (its length is not ASCII).
    let long = "\u{2581}ab".repeat(40);
    let ok = string_array_file(&[b"a", "\u{2581}the".as_bytes(), b"", long.as_bytes(), b"z"]);
    let g = Gguf::parse(ok.bytes()).unwrap();
    let texts: Vec<&[u8]> = g
        .get("tokens")
        .and_then(|v| v.as_array())
        .and_then(|a| a.string_bytes())
        .unwrap()
        .collect();
    assert_eq!(texts[1], "\u{2581}the".as_bytes());
    assert_eq!(texts[3], long.as_bytes());
    assert_eq!(texts.len(), 5);

    // A character cut in two by the boundary between strings is invalid in both: the error
    // names the first, at the offset of its length.
    let split = "\u{2581}".as_bytes();
    let bad = string_array_file(&[b"ok", &split[..2], &split[2..]]);
    let header = 24 + 8 + 6 + 4 + 4 + 8;
    match parse_err(&bad) {
        GgufError::InvalidUtf8 { what, offset } => {
            assert_eq!(what, "element 1 of array 'tokens'");
            assert_eq!(offset, (header + 8 + 2) as u64);
        }
        e => panic!("wrong error: {e:?}"),
    }
    // The same with a long valid string before it (the one-pass check is off then).
    let bad = string_array_file(&[long.as_bytes(), b"ok", &[b'x', 0xC3]]);
    assert!(matches!(
        parse_err(&bad),
        GgufError::InvalidUtf8 { what, .. } if what == "element 2 of array 'tokens'"
    ));
}

/// A small valid model-like file from the writer; its last tensor ends exactly at the end of
/// the file (its size is a multiple of the alignment), so no trailing padding can be cut off.
fn small_valid_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add("general.architecture", "llama").unwrap();
    w.add("general.alignment", 32u32).unwrap();
    w.add("tokenizer.ggml.tokens", vec!["<s>", "a", "b"])
        .unwrap();
    w.add("tokenizer.ggml.scores", vec![0.0f32, -1.0, -2.0])
        .unwrap();
    w.add("llama.rope.freq_base", 10000.0f32).unwrap();
    w.add_tensor("token_embd.weight", GgmlType::Q8_0, &[32, 3])
        .unwrap();
    w.add_tensor("output_norm.weight", GgmlType::F32, &[8])
        .unwrap();
    let data: Vec<Vec<u8>> = (0..2)
        .map(|i| vec![i as u8 + 1; w.tensor_bytes(i) as usize])
        .collect();
    w.to_bytes(&[&data[0], &data[1]]).unwrap()
}

#[test]
fn every_prefix_of_a_valid_file_is_an_error() {
    let file = small_valid_file();
    let g = Gguf::parse(&file).expect("the full file parses");
    let last = g.tensors.last().unwrap();
    assert_eq!(last.offset + last.n_bytes, file.len() as u64);
    for len in 0..file.len() {
        match Gguf::parse(&file[..len]) {
            Ok(_) => panic!("a {len}-byte prefix of a {}-byte file parsed", file.len()),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}

#[test]
fn every_single_byte_corruption_is_handled() {
    // Not every flipped byte makes the file invalid (a tensor byte, a string's letter), but none
    // may panic, and what parses must still be walkable end to end.
    let file = small_valid_file();
    let header_len = Gguf::parse(&file).unwrap().data_offset as usize;
    for i in 0..header_len {
        for x in [0x00, 0xff, 0x80, 0x01] {
            let mut f = file.clone();
            f[i] ^= x;
            smolrun_tests::exercise_gguf(&f);
        }
    }
}
