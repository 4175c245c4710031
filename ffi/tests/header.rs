//! include/smolrun.h is written by hand; these tests hold it to the library:
//! - the functions it declares are the `smolrun_*` symbols the shared library exports (its
//!   dynamic symbol table, read with `nm`), no more and no fewer;
//! - each declaration's return and parameter types are the Rust definition's, in C spelling;
//! - its enums' values and its struct's fields are the Rust ones.

use smolrun_ffi::engine::smolrun_stop;
use smolrun_ffi::status::ALL_STATUSES;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The header without comments and preprocessor lines.
fn header() -> String {
    let path = crate_dir().join("include/smolrun.h");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find("/*") {
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find("*/")
            .expect("an unterminated comment in smolrun.h");
        rest = &rest[start + end + 2..];
    }
    out.push_str(rest);
    out.lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A C type with its spacing made canonical: `const char *`, `smolrun_engine **`.
fn c_type(text: &str) -> String {
    let spaced = text.replace('*', " * ");
    let words: Vec<&str> = spaced.split_whitespace().collect();
    words.join(" ").replace("* *", "**")
}

/// A declared parameter (`const char *model`) without its name.
fn without_name(param: &str) -> String {
    let param = param.trim();
    let name_start = param
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |i| i + 1);
    c_type(&param[..name_start])
}

/// A declared function: its return type and its parameters' types.
#[derive(Debug, PartialEq, Eq)]
struct Signature {
    returns: String,
    params: Vec<String>,
}

/// Every function smolrun.h declares (not function-pointer typedefs).
fn header_functions() -> BTreeMap<String, Signature> {
    let mut functions = BTreeMap::new();
    for decl in header().split([';', '{', '}']) {
        let decl = decl.trim();
        if decl.starts_with("typedef") || decl.starts_with("extern") {
            continue;
        }
        let Some(open) = decl.find('(') else { continue };
        let before = decl[..open].trim_end();
        let name_start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let name = &before[name_start..];
        if !name.starts_with("smolrun_") {
            continue;
        }
        let close = decl.rfind(')').expect("a declaration without ')'");
        let params = decl[open + 1..close].trim();
        let params = if params == "void" {
            Vec::new()
        } else {
            params.split(',').map(without_name).collect()
        };
        let signature = Signature {
            returns: c_type(&before[..name_start]),
            params,
        };
        assert!(
            functions.insert(name.to_string(), signature).is_none(),
            "smolrun.h declares {name} twice"
        );
    }
    functions
}

/// A Rust FFI type in C spelling.
fn rust_to_c(rust: &str) -> String {
    let rust = rust.trim();
    if let Some(inner) = rust.strip_prefix("*const ") {
        return c_type(&format!("const {} *", rust_to_c(inner)));
    }
    if let Some(inner) = rust.strip_prefix("*mut ") {
        return c_type(&format!("{} *", rust_to_c(inner)));
    }
    let c = match rust {
        "c_char" => "char",
        "c_int" => "int",
        "c_void" => "void",
        "u32" => "uint32_t",
        "i32" => "int32_t",
        "u64" => "uint64_t",
        "usize" => "size_t",
        "f32" => "float",
        "Option<smolrun_piece_fn>" => "smolrun_piece_fn",
        other if other.starts_with("smolrun_") => other,
        other => panic!("no C spelling for the Rust type `{other}`: add it to rust_to_c"),
    };
    c.to_string()
}

/// Every `#[no_mangle]` function in the crate's source, with its signature in C spelling.
fn source_functions() -> BTreeMap<String, Signature> {
    let mut functions = BTreeMap::new();
    let src = crate_dir().join("src");
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for (at, _) in text.match_indices("#[no_mangle]") {
            let rest = &text[at..];
            let fn_at = rest.find("extern \"C\" fn ").unwrap_or_else(|| {
                panic!("{path:?}: #[no_mangle] on something other than an extern \"C\" fn")
            }) + "extern \"C\" fn ".len();
            let rest = &rest[fn_at..];
            let open = rest.find('(').unwrap();
            let name = rest[..open].trim().to_string();
            // The parameter list ends at the ')' that closes the '(' (types hold no parens).
            let close = rest.find(')').unwrap();
            let params: Vec<String> = rest[open + 1..close]
                .split(',')
                .filter(|p| !p.trim().is_empty())
                .map(|p| rust_to_c(p.split_once(':').expect("a parameter without a type").1))
                .collect();
            let body = rest[close + 1..].find('{').unwrap();
            let returns = match rest[close + 1..close + 1 + body].trim() {
                "" => "void".to_string(),
                r => rust_to_c(r.strip_prefix("->").expect("a return type after ->")),
            };
            let signature = Signature { returns, params };
            assert!(
                functions.insert(name.clone(), signature).is_none(),
                "{name} is defined twice"
            );
        }
    }
    functions
}

/// The shared library this test was built beside (cargo builds every crate type of the
/// library before its tests).
fn shared_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let lib = deps.join("libsmolrun_ffi.so");
    assert!(
        lib.exists(),
        "{} is missing: cargo builds it (crate-type cdylib) before this test; was the \
         crate-type list in ffi/Cargo.toml changed?",
        lib.display()
    );
    lib
}

/// The `smolrun_*` functions the shared library exports.
fn exported_functions() -> BTreeSet<String> {
    let lib = shared_library();
    let out = std::process::Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .unwrap_or_else(|e| panic!("cannot run nm (binutils) on {}: {e}", lib.display()));
    assert!(out.status.success(), "nm {}: {:?}", lib.display(), out);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| {
            // "0000000000012345 T smolrun_open"
            let mut fields = line.split_whitespace();
            let (_, kind, name) = (fields.next()?, fields.next()?, fields.next()?);
            (kind == "T" && name.starts_with("smolrun_")).then(|| name.to_string())
        })
        .collect()
}

#[test]
fn the_header_declares_exactly_what_the_library_exports() {
    let declared: BTreeSet<String> = header_functions().into_keys().collect();
    let exported = exported_functions();
    assert!(
        declared.len() >= 20,
        "too few declarations found: {declared:?}"
    );
    let undeclared: Vec<_> = exported.difference(&declared).collect();
    let missing: Vec<_> = declared.difference(&exported).collect();
    assert!(
        undeclared.is_empty() && missing.is_empty(),
        "exported but not in smolrun.h: {undeclared:?}; in smolrun.h but not exported: {missing:?}"
    );
}

#[test]
fn the_header_spells_each_signature_as_the_source_defines_it() {
    let declared = header_functions();
    let defined = source_functions();
    assert_eq!(
        declared.keys().collect::<Vec<_>>(),
        defined.keys().collect::<Vec<_>>()
    );
    for (name, signature) in &declared {
        assert_eq!(signature, &defined[name], "{name}: smolrun.h vs ffi/src");
    }
}

/// `NAME = VALUE` pairs of the header's `typedef enum NAME { ... } NAME;`.
fn header_enum(name: &str) -> Vec<(String, i64)> {
    let text = header();
    let start = text
        .find(&format!("typedef enum {name} {{"))
        .unwrap_or_else(|| panic!("smolrun.h has no enum {name}"));
    let body = &text[start..];
    let body = &body[body.find('{').unwrap() + 1..body.find('}').unwrap()];
    body.split(',')
        .filter(|item| !item.trim().is_empty())
        .map(|item| {
            let (k, v) = item
                .split_once('=')
                .unwrap_or_else(|| panic!("{name}: give every value explicitly: {item}"));
            (k.trim().to_string(), v.trim().parse().unwrap())
        })
        .collect()
}

#[test]
fn the_header_enums_have_the_rust_values() {
    let statuses: Vec<(String, i64)> = ALL_STATUSES
        .iter()
        .map(|s| (format!("{s:?}"), *s as i64))
        .collect();
    assert_eq!(header_enum("smolrun_status"), statuses);
    use smolrun_stop::*;
    let stops: Vec<(String, i64)> = [
        SMOLRUN_STOP_END_OF_TEXT,
        SMOLRUN_STOP_LENGTH,
        SMOLRUN_STOP_CONTEXT_FULL,
        SMOLRUN_STOP_CALLBACK,
        SMOLRUN_STOP_CANCELLED,
        SMOLRUN_STOP_LOW_MEMORY,
    ]
    .iter()
    .map(|s| (format!("{s:?}"), *s as i64))
    .collect();
    assert_eq!(header_enum("smolrun_stop"), stops);
}

#[test]
fn the_header_weights_reach_the_right_mode() {
    use ::smolrun_engine::WeightsMode;
    let want = [
        ("SMOLRUN_WEIGHTS_AUTO", WeightsMode::Auto),
        ("SMOLRUN_WEIGHTS_RESIDENT", WeightsMode::Resident),
        ("SMOLRUN_WEIGHTS_STREAM", WeightsMode::Stream),
        ("SMOLRUN_WEIGHTS_PREAD", WeightsMode::Pread),
    ];
    let declared = header_enum("smolrun_weights");
    assert_eq!(declared.len(), want.len());
    for ((name, value), (want_name, mode)) in declared.iter().zip(want) {
        assert_eq!(name, want_name);
        let o = smolrun_ffi::options::smolrun_options_new();
        unsafe {
            let status = smolrun_ffi::options::smolrun_options_set_weights(o, *value as i32);
            assert_eq!(status, smolrun_ffi::smolrun_status::SMOLRUN_OK);
            assert_eq!((*o).engine_options().weights, mode, "{name}");
            smolrun_ffi::options::smolrun_options_free(o);
        }
    }
}

#[test]
fn the_header_result_struct_has_the_rust_fields() {
    let text = header();
    let start = text
        .find("typedef struct smolrun_result {")
        .expect("smolrun.h has no struct smolrun_result");
    let body = &text[start..];
    let body = &body[body.find('{').unwrap() + 1..body.find('}').unwrap()];
    let declared: Vec<String> = body
        .split(';')
        .filter(|f| !f.trim().is_empty())
        .map(|f| c_type(f.trim()))
        .collect();
    // The Rust struct's fields, in order, from the source (name: type).
    let src = std::fs::read_to_string(crate_dir().join("src/engine.rs")).unwrap();
    let start = src.find("pub struct smolrun_result {").unwrap();
    let body = &src[start..];
    let body = &body[body.find('{').unwrap() + 1..body.find('}').unwrap()];
    let defined: Vec<String> = body
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("pub "))
        .map(|l| {
            let (name, ty) = l.trim_start_matches("pub ").split_once(':').unwrap();
            let ty = ty.trim().trim_end_matches(',');
            let ty = if ty == "f64" {
                "double".into()
            } else {
                rust_to_c(ty)
            };
            c_type(&format!("{ty} {name}"))
        })
        .collect();
    assert_eq!(declared, defined);
}
