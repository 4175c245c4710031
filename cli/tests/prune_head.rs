//! `smolrun gguf head-ids` and `prune-head` on gemma3-270m (tied head, 262,144 rows): the ids
//! file keeps every control, byte and end-of-generation token, the rewritten file parses back
//! with every other tensor and key byte-identical, and its logits equal the stock model's bit
//! for bit on the kept ids (same kernels) and are -inf on the others.

use smolrun_core::gguf::Gguf;
use smolrun_core::kernels::KernelSet;
use smolrun_core::model::head::KEPT_IDS_KEY;
use smolrun_core::model::{Model, ResidentStore, State};
use smolrun_core::platform::SingleThread;
use smolrun_core::tokenizer::{attr, Tokenizer};
use smolrun_linux::MappedFile;
use std::path::{Path, PathBuf};
use std::process::Command;

fn models_dir() -> PathBuf {
    match std::env::var_os("SMOLRUN_MODELS") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/smolrun/models"),
    }
}

fn require_model(file: &str) -> PathBuf {
    let path = models_dir().join(file);
    assert!(
        path.is_file(),
        "{} is missing: run tools/fetch-models.sh to download the test models",
        path.display()
    );
    path
}

fn smolrun(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_smolrun"))
        .args(args)
        .output()
        .expect("run smolrun");
    assert!(
        out.status.success(),
        "smolrun {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Removes the scratch folder when the test ends, passed or not.
struct Scratch(PathBuf);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn read_ids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

fn logits(g: &Gguf, kernels: &KernelSet, tokens: &[u32]) -> Vec<Vec<f32>> {
    let m = Model::load_with_kernels(g, kernels).unwrap();
    let store = ResidentStore::new(g);
    let mut st = State::new(&m, 32).unwrap();
    tokens
        .iter()
        .enumerate()
        .map(|(pos, &t)| {
            m.forward(&mut st, &store, &SingleThread, t, pos)
                .unwrap()
                .to_vec()
        })
        .collect()
}

#[test]
fn gemma3_pruned_head_matches_the_stock_model_on_kept_ids() {
    let stock_path = require_model("gemma-3-270m-q4_k_m.gguf");
    let dir = std::env::temp_dir().join(format!("smolrun-prune-head-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _cleanup = Scratch(dir.clone());
    let ids_path = dir.join("ids.txt");
    let out_path = dir.join("pruned.gguf");
    let stock = stock_path.to_str().unwrap();
    smolrun(&[
        "gguf",
        "head-ids",
        "-m",
        stock,
        "--keep",
        "32000",
        // A short run of the model's predictions (10 files x 16 positions) keeps the test quick.
        "--model-positions",
        "64",
        "-o",
        ids_path.to_str().unwrap(),
    ]);
    smolrun(&[
        "gguf",
        "prune-head",
        "-m",
        stock,
        "--ids",
        ids_path.to_str().unwrap(),
        "-o",
        out_path.to_str().unwrap(),
    ]);

    // The ids: sorted, unique, padded to 16, with every token generation cannot do without.
    let ids = read_ids(&ids_path);
    assert_eq!(ids.len(), 32000, "32000 is a multiple of 16 already");
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let stock_file = MappedFile::open(&stock_path).unwrap();
    let a = Gguf::parse(stock_file.bytes()).unwrap();
    let tok = Tokenizer::from_gguf(&a).unwrap();
    let kept = |id: u32| ids.binary_search(&id).is_ok();
    let mut n_byte = 0;
    for id in 0..tok.n_vocab() as u32 {
        let at = tok.token_attr(id);
        let text = tok.token_text(id).unwrap();
        let placeholder = text.starts_with(b"<unused");
        if at & attr::BYTE != 0 {
            n_byte += 1;
        }
        if at & (attr::BYTE | attr::USER_DEFINED) != 0 || (at & attr::CONTROL != 0 && !placeholder)
        {
            assert!(
                kept(id),
                "id {id} ({}) dropped",
                String::from_utf8_lossy(text)
            );
        }
    }
    assert_eq!(n_byte, 256);
    for id in tok.eog_ids().iter().chain(&[tok.bos().unwrap()]) {
        assert!(kept(*id), "end-of-generation / BOS id {id} dropped");
    }
    for marker in [&b"<start_of_turn>"[..], b"<end_of_turn>"] {
        assert!(kept(tok.token_id(marker).unwrap()));
    }

    // The file: every key and tensor but the new head byte-identical.
    let pruned_file = MappedFile::open(&out_path).unwrap();
    let b = Gguf::parse(pruned_file.bytes()).unwrap();
    for e in &a.metadata {
        assert_eq!(b.get(e.key), Some(e.value), "key {}", e.key);
    }
    assert!(b.get(KEPT_IDS_KEY).is_some());
    assert_eq!(b.tensors.len(), a.tensors.len() + 1);
    for t in &a.tensors {
        let u = b.tensor(t.name).unwrap();
        assert_eq!((u.ggml_type, u.dims), (t.ggml_type, t.dims), "{}", t.name);
        assert!(a.tensor_data(t) == b.tensor_data(u), "{} differs", t.name);
    }
    let embd = a.tensor("token_embd.weight").unwrap();
    let head = b.tensor("output.weight").unwrap();
    assert_eq!(head.ggml_type, embd.ggml_type);
    assert_eq!(head.dims, [640, 32000, 1, 1]);
    let rb = embd.row_bytes();
    for (row, &id) in ids.iter().enumerate().step_by(97) {
        let id = id as usize;
        assert!(
            b.tensor_data(head)[row * rb..(row + 1) * rb]
                == a.tensor_data(embd)[id * rb..(id + 1) * rb]
        );
    }

    // `run --json` and `perplexity --json` say how much of the text fell outside the head: the
    // prompt's and the generated text's stock ids the head cannot write, and the text's share.
    let outside = |t: &[u32]| t.iter().filter(|&&i| !kept(i)).count();
    let cut_path = out_path.to_str().unwrap();
    let prompt_text = "The miller of Zürich oiled the rattled gears of the Bäckerei's kneader";
    let mut prompt_ids = Vec::new();
    tok.encode(prompt_text, true, true, &mut prompt_ids);
    let run = smolrun_json(&[
        "run",
        "-m",
        cut_path,
        "-p",
        prompt_text,
        "-n",
        "8",
        "--temp",
        "0",
        "--json",
    ]);
    assert_eq!(run["head_rows"], 32000);
    let n_outside = outside(&prompt_ids);
    assert!(
        n_outside > 0,
        "a 32K head keeps every id of {prompt_text:?}"
    );
    assert_eq!(run["prompt_outside_head"], n_outside);
    let share = run["prompt_outside_head_share"].as_f64().unwrap();
    assert!((share - n_outside as f64 / prompt_ids.len() as f64).abs() < 1e-12);
    let mut text_ids = Vec::new();
    tok.encode(run["text"].as_str().unwrap(), false, false, &mut text_ids);
    assert_eq!(run["text_outside_head"], outside(&text_ids));
    // The story's first 3 KB (about 700 tokens) keep the run short.
    let story = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/golden/ppl-text.txt");
    let text = std::fs::read_to_string(story).unwrap();
    let cut = text
        .char_indices()
        .take_while(|&(i, _)| i < 3000)
        .last()
        .unwrap()
        .0;
    let text = &text[..text[..cut].rfind('\n').unwrap() + 1];
    let story = dir.join("story.txt");
    std::fs::write(&story, text).unwrap();
    let story = story.to_str().unwrap();
    let ppl = smolrun_json(&[
        "perplexity",
        "-m",
        cut_path,
        "-f",
        story,
        "-c",
        "64",
        "--json",
    ]);
    let mut story_ids = Vec::new();
    tok.encode(
        text.strip_suffix('\n').unwrap_or(text),
        true,
        false,
        &mut story_ids,
    );
    assert!(outside(&story_ids) > 0);
    assert_eq!(ppl["outside_head"], outside(&story_ids));
    assert_eq!(ppl["respelled"], outside(&story_ids));
    let share = ppl["outside_head_share"].as_f64().unwrap();
    assert!((share - outside(&story_ids) as f64 / story_ids.len() as f64).abs() < 1e-12);
    // A full head reports nothing of the kind.
    let full = smolrun_json(&["run", "-m", stock, "-p", prompt_text, "-n", "2", "--json"]);
    assert!(full.get("prompt_outside_head").is_none());

    // The logits: a prompt with dropped ids in it still runs (the embeddings are complete).
    let dropped: Vec<u32> = (1000..262144).filter(|&i| !kept(i)).take(2).collect();
    let mut prompt = vec![tok.bos().unwrap()];
    tok.encode("The quick brown fox", false, false, &mut prompt);
    prompt.extend(&dropped);
    prompt.push(tok.token_id(b"<end_of_turn>").unwrap());
    let kernels = KernelSet::select(&smolrun_linux::detect_features());
    let full = logits(&a, &kernels, &prompt);
    let cut = logits(&b, &kernels, &prompt);
    for (pos, (f, c)) in full.iter().zip(&cut).enumerate() {
        let mut k = 0;
        for id in 0..f.len() {
            if k < ids.len() && ids[k] as usize == id {
                assert_eq!(f[id].to_bits(), c[id].to_bits(), "position {pos}, id {id}");
                k += 1;
            } else {
                assert_eq!(c[id], f32::NEG_INFINITY, "position {pos}, dropped id {id}");
            }
        }
    }
}

/// Runs smolrun and parses the last line of its stdout as JSON.
fn smolrun_json(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_smolrun"))
        .args(args)
        .output()
        .expect("run smolrun");
    assert!(
        out.status.success(),
        "smolrun {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("one JSON line")
}

fn smolrun_fails(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_smolrun"))
        .args(args)
        .output()
        .expect("run smolrun");
    assert!(!out.status.success(), "smolrun {args:?} should have failed");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `head-ids --word-freq`: the ids of a listed word's spellings (lower case and capitalised,
/// after a space or not) are kept by its count, ids that neither corpus nor list weighs are not;
/// a malformed list is refused with its line. No model run (--model-positions 0): only the
/// tokenizer is loaded, so this takes well under a second.
#[test]
fn gemma3_head_ids_keeps_the_spellings_of_listed_words() {
    let stock_path = require_model("gemma-3-270m-q4_k_m.gguf");
    let stock = stock_path.to_str().unwrap();
    let dir = std::env::temp_dir().join(format!("smolrun-head-words-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _cleanup = Scratch(dir.clone());
    let corpus = dir.join("corpus.txt");
    std::fs::write(&corpus, "The cat sat on the mat.\n").unwrap();
    let words = dir.join("words.tsv");
    // Rare words (several tokens each in Gemma's vocabulary) with large counts.
    std::fs::write(
        &words,
        "# word<TAB>count\nzymurgy\t5000\nquixotically\t4000\nsesquipedalian\t3000\n",
    )
    .unwrap();
    let file = MappedFile::open(&stock_path).unwrap();
    let g = Gguf::parse(file.bytes()).unwrap();
    let tok = Tokenizer::from_gguf(&g).unwrap();
    let mut listed = Vec::new();
    for word in ["zymurgy", "quixotically", "sesquipedalian"] {
        let cap = format!("{}{}", word[..1].to_uppercase(), &word[1..]);
        for spelling in [format!(" {word}"), word.to_string(), format!(" {cap}"), cap] {
            tok.encode(&spelling, false, false, &mut listed);
        }
    }
    listed.sort();
    listed.dedup();

    let head_ids = |extra: &[&str], out: &Path| {
        let mut args = vec![
            "gguf",
            "head-ids",
            "-m",
            stock,
            "--corpus",
            corpus.to_str().unwrap(),
            "--model-positions",
            "0",
            "--keep",
            "1000",
            "-o",
            out.to_str().unwrap(),
        ];
        args.extend(extra);
        smolrun(&args);
        read_ids(out)
    };
    let with_list = head_ids(
        &["--word-freq", words.to_str().unwrap()],
        &dir.join("a.txt"),
    );
    let without = head_ids(&["--no-word-freq"], &dir.join("b.txt"));
    assert_eq!(with_list.len(), 1008, "1000 padded up to a multiple of 16");
    assert!(with_list.windows(2).all(|w| w[0] < w[1]));
    for id in &listed {
        assert!(
            with_list.binary_search(id).is_ok(),
            "id {id} ({:?}) of a listed word dropped",
            String::from_utf8_lossy(tok.token_text(*id).unwrap())
        );
    }
    let missed = listed
        .iter()
        .filter(|id| without.binary_search(id).is_err())
        .count();
    assert!(
        missed > listed.len() / 2,
        "without the list, only {missed} of the {} ids of the rare words should be dropped",
        listed.len()
    );
    // The corpus's own ids are kept either way.
    let mut cat = Vec::new();
    tok.encode("The cat sat on the mat.", false, false, &mut cat);
    for id in cat {
        assert!(with_list.binary_search(&id).is_ok() && without.binary_search(&id).is_ok());
    }

    std::fs::write(&words, "zymurgy 5000\n").unwrap();
    let err = smolrun_fails(&[
        "gguf",
        "head-ids",
        "-m",
        stock,
        "--corpus",
        corpus.to_str().unwrap(),
        "--word-freq",
        words.to_str().unwrap(),
        "--model-positions",
        "0",
        "--keep",
        "1000",
        "-o",
        dir.join("c.txt").to_str().unwrap(),
    ]);
    assert!(err.contains("words.tsv line 1: no tab"), "{err}");
}
