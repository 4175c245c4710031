//! `smolrun gguf head-ids` and `smolrun gguf prune-head`: choose the vocabulary rows worth
//! keeping in the LM head, and write a copy of a model whose head holds only those rows.
//!
//! Selection ranks ids by how often they occur when a mixed corpus is tokenized (English prose,
//! code, a few other languages; tools/head-corpus/ by default), plus how often the model itself
//! expects them there: the model reads `--model-positions` positions of the corpus and each
//! position adds its next-token probabilities to the ids' expected counts. The shipped corpus
//! (3.3 MB) sees ~42K distinct Gemma ids, fewer than a 64K head keeps; the model's predictions
//! spread that evidence to the words it would have written in the same places (synonyms,
//! inflections, the rest of a topic's vocabulary). A corpus that size still cannot say which
//! of a 262K vocabulary's rarer English words a text will need, so word frequency lists weigh in
//! too (`--word-freq`; by default tools/head-corpus/words/en-wordfreq.tsv, the 100,000 most
//! frequent English words from wordfreq): each word is tokenized the ways running text writes
//! it (lower case and capitalised, after a space and not) and its ids gain its frequency. Ids
//! with none of this evidence are ranked by the tokenizer's own prior: the SentencePiece score,
//! or the merge order (lower id) of a BPE vocabulary. Some ids are kept whatever their rank, because losing them would break
//! generation rather than cost a rare word: control tokens (BOS, EOS, chat markers), user-defined
//! tokens, byte tokens (`<0x41>`, and every single-byte token of a byte-level BPE), so any text
//! can still be spelled out, the end-of-generation ids, every token the chat template
//! writes, and the runs of one punctuation mark ([`is_ruler`]). Gemma's `<unusedN>` control placeholders (6,242 of them, never trained) are the one
//! exception: they are not forced, and rank like any other id.

use smolrun_core::gguf::Gguf;
use smolrun_core::model::head::{self, TensorSource};
use smolrun_core::tokenizer::Tokenizer;
use smolrun_linux::MappedFile;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Row counts of the head are padded up to a multiple of this: the interleaved kernels take
/// rows in groups of 4 or 8, and the matvec hands out rows in chunks of 16.
pub const ROW_MULTIPLE: usize = 16;

/// The corpus shipped with the source, used when no `--corpus` is given.
fn default_corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/head-corpus")
}

/// Text files of the corpus: each argument is a file or a directory (its files but notes and
/// scripts, `*.md` and `*.py`, not recursive, in name order).
pub(crate) fn corpus_files(args: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let args = if args.is_empty() {
        vec![default_corpus_dir()]
    } else {
        args.to_vec()
    };
    let mut files = Vec::new();
    for a in &args {
        if a.is_dir() {
            let mut in_dir: Vec<PathBuf> = std::fs::read_dir(a)
                .map_err(|e| format!("cannot list corpus directory {}: {e}", a.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    // The corpus's notes and generators are not part of it.
                    p.is_file() && !name.ends_with(".md") && !name.ends_with(".py")
                })
                .collect();
            in_dir.sort();
            files.extend(in_dir);
        } else if a.is_file() {
            files.push(a.clone());
        } else {
            return Err(format!(
                "corpus {} not found: give text files or directories with --corpus",
                a.display()
            ));
        }
    }
    if files.is_empty() {
        return Err("the corpus has no files: give text files with --corpus".into());
    }
    Ok(files)
}

/// Why an id is kept.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KeptCounts {
    /// Control, byte, end-of-generation and chat-template ids.
    pub forced: usize,
    /// Ids with evidence: corpus counts, the model's predictions or the word lists.
    pub weighed: usize,
    /// Ids with no evidence at all, ranked by the tokenizer's prior.
    pub by_prior: usize,
}

/// The word lists shipped with the source, used when no `--word-freq` is given.
fn default_word_lists() -> Vec<PathBuf> {
    vec![default_corpus_dir().join("words/en-wordfreq.tsv")]
}

/// Reads a word list: `word<TAB>count` lines (count: occurrences in any unit, the same for every
/// line of the file); blank lines and lines starting with `#` are ignored.
pub fn read_word_list(path: &Path) -> Result<Vec<(String, f64)>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read word list {}: {e}", path.display()))?;
    let mut words = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: &str| {
            format!(
                "{} line {}: {why}: a word list has one 'word<TAB>count' per line",
                path.display(),
                n + 1
            )
        };
        let (word, count) = line.split_once('\t').ok_or_else(|| bad("no tab"))?;
        let count: f64 = count
            .trim()
            .parse()
            .map_err(|_| bad(&format!("'{}' is not a count", count.trim())))?;
        if !(count.is_finite() && count >= 0.0) {
            return Err(bad(&format!("count {count} is not a finite number >= 0")));
        }
        if word.is_empty() {
            return Err(bad("empty word"));
        }
        words.push((word.to_string(), count));
    }
    if words.is_empty() {
        return Err(format!("word list {} has no words", path.display()));
    }
    Ok(words)
}

/// How a listed word shows up in running English text, and the share of its count each spelling
/// gets: (capitalisation, preceded by a space, share). Measured on the corpus's everyday English
/// (en-prose.txt: 92 % of words lower case after a space, 5 % capitalised after a space, 3 %
/// capitalised at a line start or after a quote or bracket, 0.6 % lower case there; upper case
/// is rare outside headings). Pieces of the rarer spellings are mostly ids of their own, so
/// their shares decide how many rows go to them instead of to the next word.
const SPELLINGS: [(Case, bool, f64); 5] = [
    (Case::AsListed, true, 0.905),
    (Case::AsListed, false, 0.01),
    (Case::Capitalised, true, 0.055),
    (Case::Capitalised, false, 0.025),
    (Case::Upper, true, 0.005),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Case {
    AsListed,
    Capitalised,
    Upper,
}

impl Case {
    /// For a word mostly written capitalised: its listed and capitalised spellings trade places.
    fn swapped(self) -> Case {
        match self {
            Case::AsListed => Case::Capitalised,
            Case::Capitalised => Case::AsListed,
            Case::Upper => Case::Upper,
        }
    }
}

fn share_of(case: Case, space: bool) -> f64 {
    SPELLINGS
        .iter()
        .find(|s| s.0 == case && s.1 == space)
        .map_or(0.0, |s| s.2)
}

fn spell(word: &str, case: Case, space: bool) -> String {
    let mut s = String::with_capacity(word.len() + 1);
    if space {
        s.push(' ');
    }
    match case {
        Case::AsListed => s.push_str(word),
        Case::Upper => s.extend(word.chars().flat_map(char::to_uppercase)),
        Case::Capitalised => {
            let mut chars = word.chars();
            s.extend(chars.next().into_iter().flat_map(char::to_uppercase));
            s.push_str(chars.as_str());
        }
    }
    s
}

/// Each id's weight from word lists: every word is tokenized in each of its [`SPELLINGS`], and
/// every id of a spelling's tokens gains the word's count times the spelling's share (an id
/// that a spelling uses twice gains twice). Each list is scaled to sum to 1 over its spellings'
/// tokens, so lists in different units weigh the same.
///
/// Word lists that fold case cannot tell "sherlock" from "house". The tokenizer can, a little:
/// its vocabulary was built from cased text, so a word mostly written capitalised may have
/// " Sherlock" as one token and no lower-case token at all. Such a word's capitalised spellings
/// get the lower-case shares and the other way round.
pub fn word_list_weights(tok: &Tokenizer, lists: &[Vec<(String, f64)>]) -> Vec<f64> {
    let mut weight = vec![0f64; tok.n_vocab()];
    let mut list_weight = vec![0f64; tok.n_vocab()];
    let mut spelled: [Vec<u32>; SPELLINGS.len()] = Default::default();
    for words in lists {
        list_weight.iter_mut().for_each(|w| *w = 0.0);
        for (word, count) in words {
            for (ids, (case, space, _)) in spelled.iter_mut().zip(SPELLINGS) {
                ids.clear();
                tok.encode(&spell(word, case, space), false, false, ids);
            }
            // SPELLINGS[0] is the listed case after a space, SPELLINGS[2] the capitalised one.
            // Only a capitalised spelling that is one token where the listed one is several says
            // so: when both are single tokens, their order says little (" Madam" ranks ahead of
            // " madam", yet prose writes "madam" far more often; swapping them dropped " madam"
            // from a 64K head and cost 4 re-spellings in a 24 KB story).
            let capitalised_first = spelled[0].len() > 1 && spelled[2].len() == 1;
            for (ids, (case, space, share)) in spelled.iter().zip(SPELLINGS) {
                // Two spellings can be one string ("2024" has no case): each adds its share.
                let share = if capitalised_first {
                    share_of(case.swapped(), space)
                } else {
                    share
                };
                for &id in ids {
                    if let Some(w) = list_weight.get_mut(id as usize) {
                        *w += count * share;
                    }
                }
            }
        }
        let total: f64 = list_weight.iter().sum();
        if total > 0.0 {
            for (w, l) in weight.iter_mut().zip(&list_weight) {
                *w += l / total;
            }
        }
    }
    weight
}

/// A run of one ASCII punctuation mark ("----", " ==", "********", "//"), after a space or not:
/// rulers, underlines and operators that any kind of text may use (the code comments of the
/// held-out texts lost 48 of their 353 dropped tokens to them with a corpus-ranked 64K head),
/// 292 of Gemma's 262K ids, so a head keeps them all.
fn is_ruler(bytes: &[u8]) -> bool {
    let run = bytes.strip_prefix(b" ").unwrap_or(bytes);
    run.len() >= 2 && run[0].is_ascii_punctuation() && run.iter().all(|&b| b == run[0])
}

/// Ids that every pruned head keeps (see the module docs), sorted.
pub fn forced_ids(tok: &Tokenizer, template_text: Option<&str>) -> Vec<u32> {
    use smolrun_core::tokenizer::attr;
    let mut keep = vec![false; tok.n_vocab()];
    for (id, k) in keep.iter_mut().enumerate() {
        let id = id as u32;
        let a = tok.token_attr(id);
        let placeholder = tok
            .token_text(id)
            .is_some_and(|t| t.starts_with(b"<unused") && t.ends_with(b">"));
        let special = a & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0;
        let byte = a & attr::BYTE != 0 || (a & attr::NORMAL != 0 && tok.token_bytes(id).len() == 1);
        *k = (special && !placeholder) || byte || is_ruler(tok.token_bytes(id));
    }
    let mut extra: Vec<u32> = tok.eog_ids().to_vec();
    extra.extend([tok.bos(), tok.eos(), tok.eot()].into_iter().flatten());
    if let Some(text) = template_text {
        let mut ids = Vec::new();
        tok.encode(text, true, true, &mut ids);
        extra.extend(ids);
    }
    for id in extra {
        if let Some(k) = keep.get_mut(id as usize) {
            *k = true;
        }
    }
    (0..tok.n_vocab() as u32)
        .filter(|&i| keep[i as usize])
        .collect()
}

/// Chooses `keep` ids (padded up to [`ROW_MULTIPLE`]): the forced ones, then by `weight` (the
/// evidence of the corpus, the model's predictions and the word lists), then by `prior` (higher
/// first; ties and missing priors by lower id). Returns them sorted.
pub fn select_ids(
    n_vocab: usize,
    forced: &[u32],
    weight: &[f64],
    prior: Option<&[f32]>,
    keep: usize,
) -> Result<(Vec<u32>, KeptCounts), String> {
    let target = keep.next_multiple_of(ROW_MULTIPLE).min(n_vocab);
    if forced.len() > target {
        return Err(format!(
            "--keep {keep} is fewer than the {} ids every head must keep (control, byte and chat \
             template tokens): use --keep {} or more",
            forced.len(),
            forced.len().next_multiple_of(ROW_MULTIPLE)
        ));
    }
    let mut kept = vec![false; n_vocab];
    forced.iter().for_each(|&i| kept[i as usize] = true);
    let mut order: Vec<u32> = (0..n_vocab as u32).filter(|&i| !kept[i as usize]).collect();
    let prior_of = |i: u32| {
        prior
            .and_then(|p| p.get(i as usize).copied())
            .unwrap_or(0.0)
    };
    order.sort_by(|&a, &b| {
        weight[b as usize]
            .total_cmp(&weight[a as usize])
            .then(prior_of(b).total_cmp(&prior_of(a)))
            .then(a.cmp(&b))
    });
    let mut stats = KeptCounts {
        forced: forced.len(),
        ..Default::default()
    };
    for &id in order.iter().take(target - forced.len()) {
        kept[id as usize] = true;
        if weight[id as usize] > 0.0 {
            stats.weighed += 1;
        } else {
            stats.by_prior += 1;
        }
    }
    let ids = (0..n_vocab as u32).filter(|&i| kept[i as usize]).collect();
    Ok((ids, stats))
}

/// How `expected_counts` reads about `n_positions` positions of `n_files` files: (windows per
/// file, tokens per window). Windows of up to 256 tokens give the model context: as few per
/// file as that allows, each as long as needed to make up `n_positions` (rounded up; fewer
/// than 16 per file, a quick run or a test, still read 16).
fn prediction_windows(n_positions: usize, n_files: usize) -> (usize, usize) {
    let n_files = n_files.max(1);
    let per_file = n_positions.div_ceil(n_files * 256).max(1);
    let window_len = n_positions.div_ceil(n_files * per_file).clamp(16, 256);
    (per_file, window_len)
}

/// The model's expected count of each id over about `n_positions` positions of the corpus: the
/// sum of its next-token probabilities. The positions are windows of up to 256 tokens, shared
/// equally among the corpus files (so that a short file of prose weighs as much as a long one
/// of code) and evenly spaced within each.
fn expected_counts(
    path: &Path,
    globals: &crate::args::Globals,
    files: &[Vec<u32>],
    n_positions: usize,
    threads: usize,
) -> Result<Vec<f64>, String> {
    let (per_file, window_len) = prediction_windows(n_positions, files.len());
    let options = smolrun_engine::EngineOptions {
        n_ctx: Some(window_len),
        threads: Some(threads),
        ..globals.base_options()
    };
    let mut engine = smolrun_engine::Engine::open(&path.to_string_lossy(), &options)?;
    let n_vocab = engine.n_vocab();
    let mut expected = vec![0f64; n_vocab];
    let bos = engine
        .tokenizer
        .bos()
        .filter(|_| engine.tokenizer.adds_bos());
    let (_, model, state, store, par) = engine.parts();
    let mut window = Vec::with_capacity(window_len);
    let mut probs = vec![0f32; n_vocab];
    let mut done = 0;
    let windows = files.iter().flat_map(|f| {
        let stride = (f.len() / per_file).max(1);
        (0..per_file).map(move |w| (f, w * stride))
    });
    for (stream, start) in windows {
        let end = (start + window_len - bos.is_some() as usize).min(stream.len());
        if start >= end {
            continue;
        }
        window.clear();
        window.extend(bos);
        window.extend_from_slice(&stream[start..end]);
        state.reset();
        model
            .forward_batch_all(state, store, par, &window, 0, 0, &mut |_, logits| {
                let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                let mut sum = 0f64;
                for (p, &l) in probs.iter_mut().zip(logits) {
                    *p = (l - max).exp();
                    sum += *p as f64;
                }
                for (e, &p) in expected.iter_mut().zip(&probs) {
                    *e += p as f64 / sum;
                }
            })
            .map_err(|e| format!("{}: {e}", path.display()))?;
        done += window.len();
        eprint!("\rmodel predictions: {done} positions");
    }
    eprintln!();
    Ok(expected)
}

/// `smolrun gguf head-ids`.
#[allow(clippy::too_many_arguments)]
pub fn head_ids(
    model: &str,
    corpus: &[PathBuf],
    word_lists: Option<&[PathBuf]>,
    word_weight: f64,
    keep: usize,
    model_positions: usize,
    threads: usize,
    out: &Path,
    globals: &crate::args::Globals,
) -> Result<(), String> {
    let path = crate::args::resolve(model)?;
    let file = MappedFile::open(&path)?;
    let g = Gguf::parse(file.bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
    let kept = choose_ids(
        &g,
        &path.display().to_string(),
        Some(&path),
        corpus,
        word_lists,
        word_weight,
        keep,
        model_positions,
        threads,
        globals,
    )?;
    let mut w = BufWriter::new(
        File::create(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?,
    );
    for id in &kept {
        writeln!(w, "{id}").map_err(|e| format!("writing {}: {e}", out.display()))?;
    }
    w.flush()
        .map_err(|e| format!("writing {}: {e}", out.display()))?;
    eprintln!("wrote {}", out.display());
    Ok(())
}

/// The head rows to keep of the model whose header is `g` (`label` in messages): ranked by
/// the corpus, the word lists and, with `model_positions` and the weights at `model`, the
/// model's own predictions (a header read over HTTP has no weights: `None`).
#[allow(clippy::too_many_arguments)]
pub fn choose_ids(
    g: &Gguf,
    label: &str,
    model: Option<&Path>,
    corpus: &[PathBuf],
    word_lists: Option<&[PathBuf]>,
    word_weight: f64,
    keep: usize,
    model_positions: usize,
    threads: usize,
    globals: &crate::args::Globals,
) -> Result<Vec<u32>, String> {
    let tok = Tokenizer::from_gguf(g).map_err(|e| format!("{label}: {e}"))?;
    let n_vocab = g
        .tensor("token_embd.weight")
        .map(|t| t.dims[1] as usize)
        .ok_or_else(|| format!("{label}: no token_embd.weight tensor"))?;
    if keep == 0 {
        return Err("--keep 0: keep at least the control and byte tokens".into());
    }
    if !(word_weight.is_finite() && word_weight >= 0.0) {
        return Err(format!(
            "--word-freq-weight {word_weight}: give a finite number >= 0"
        ));
    }
    let word_lists = match word_lists {
        None => default_word_lists(),
        Some(l) => l.to_vec(),
    };
    let lists = word_lists
        .iter()
        .map(|p| read_word_list(p))
        .collect::<Result<Vec<_>, _>>()?;

    let mut counts = vec![0u64; n_vocab];
    let mut n_tokens = 0usize;
    let mut ids = Vec::new();
    let mut files = Vec::new();
    for f in corpus_files(corpus)? {
        let text = std::fs::read_to_string(&f)
            .map_err(|e| format!("cannot read corpus file {}: {e}", f.display()))?;
        ids.clear();
        tok.encode(&text, false, false, &mut ids);
        n_tokens += ids.len();
        files.push(ids.clone());
        for &id in &ids {
            if let Some(c) = counts.get_mut(id as usize) {
                *c += 1;
            }
        }
    }
    let template = smolrun_engine::chat_template::ChatTemplate::from_gguf(g)
        .and_then(|t| {
            use smolrun_engine::chat_template::ChatMessage;
            t.render(
                &[
                    ChatMessage::new("system", "s"),
                    ChatMessage::new("user", "u"),
                    ChatMessage::new("assistant", "a"),
                    ChatMessage::new("user", "u"),
                ],
                true,
            )
        })
        .ok();
    let forced = forced_ids(&tok, template.as_deref());
    let prior: Option<Vec<f32>> = g
        .get("tokenizer.ggml.scores")
        .and_then(|v| v.as_array())
        .and_then(|a| a.f32s().map(|it| it.collect()));
    let mut weight: Vec<f64> = counts.iter().map(|&c| c as f64).collect();
    if let (true, Some(path)) = (model_positions > 0, model) {
        let expected = expected_counts(path, globals, &files, model_positions, threads)?;
        // Scaled to the corpus's size, so that both kinds of evidence weigh the same in total.
        let scale = n_tokens as f64 / expected.iter().sum::<f64>().max(1e-9);
        for (w, e) in weight.iter_mut().zip(&expected) {
            *w += e * scale;
        }
    }
    if !lists.is_empty() && word_weight > 0.0 {
        // Each list sums to 1; it weighs `word_weight` times the corpus's tokens in total.
        let from_words = word_list_weights(&tok, &lists);
        let scale = word_weight * n_tokens as f64;
        for (w, f) in weight.iter_mut().zip(&from_words) {
            *w += f * scale;
        }
    }
    let (kept, stats) = select_ids(n_vocab, &forced, &weight, prior.as_deref(), keep)?;
    let covered: u64 = kept.iter().map(|&i| counts[i as usize]).sum();
    eprintln!(
        "kept {} of {n_vocab} ids ({} forced, {} by the corpus, {}{} word lists, {} by the \
         tokenizer's prior alone); they cover {:.2} % of the corpus's {n_tokens} tokens",
        kept.len(),
        stats.forced,
        stats.weighed,
        if model.is_some() && model_positions > 0 {
            "the model's predictions and "
        } else {
            ""
        },
        lists.len(),
        stats.by_prior,
        100.0 * covered as f64 / n_tokens.max(1) as f64,
    );
    Ok(kept)
}

/// Reads a kept-ids file: one decimal id per line (blank lines and `#` comments ignored).
pub fn read_ids(path: &Path) -> Result<Vec<u32>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read ids file {}: {e}", path.display()))?;
    let mut ids = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        ids.push(line.parse::<u32>().map_err(|_| {
            format!(
                "{} line {}: '{line}' is not a token id (one non-negative integer per line)",
                path.display(),
                n + 1
            )
        })?);
    }
    Ok(ids)
}

/// Bytes copied per read and write while streaming tensors: the rewriter's memory bound.
const COPY_BUFFER: usize = 8 << 20;

/// `smolrun gguf prune-head`: one sequential pass over the output; the input is read with
/// positioned reads through one bounded buffer, never mapped or loaded whole (only its header
/// is mapped to plan the output).
pub fn prune_head(input: &str, ids_path: &Path, out: &Path) -> Result<(), String> {
    let in_path = crate::args::resolve(input)?;
    let ids = read_ids(ids_path)?;
    let mapped = MappedFile::open(&in_path)?;
    let g = Gguf::parse(mapped.bytes()).map_err(|e| format!("{}: {e}", in_path.display()))?;
    let plan = head::plan_prune(&g, &ids)
        .map_err(|e| format!("{} with {}: {e}", in_path.display(), ids_path.display()))?;
    drop(g);
    drop(mapped);
    if out == in_path {
        return Err("-o must not be the input file".into());
    }

    let src =
        File::open(&in_path).map_err(|e| format!("cannot open {}: {e}", in_path.display()))?;
    // OUT.tmp-PID, removed on any error, renamed when complete and checked.
    let partial = super::gguf_out::PartialFile::for_output(out);
    let tmp = partial.path.clone();
    let dst = File::create(&tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    let mut w = BufWriter::with_capacity(1 << 20, dst);
    let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
    let header = plan.writer.header();
    w.write_all(&header)
        .map_err(|e| io("writing the header", e))?;
    let mut written = 0u64; // bytes of the data section so far
    let mut buf = vec![0u8; COPY_BUFFER];
    let zeros = vec![0u8; plan.writer.alignment() as usize];
    for (i, source) in plan.sources.iter().enumerate() {
        let start = plan.writer.tensor_offset(i);
        w.write_all(&zeros[..(start - written) as usize])
            .map_err(|e| io("writing padding", e))?;
        written = start;
        let read = |buf: &mut [u8], at: u64| {
            src.read_exact_at(buf, at)
                .map_err(|e| format!("reading {} at byte {at}: {e}", in_path.display()))
        };
        match *source {
            TensorSource::Copy { offset, len } => {
                let mut done = 0u64;
                while done < len {
                    let n = (len - done).min(COPY_BUFFER as u64) as usize;
                    read(&mut buf[..n], offset + done)?;
                    w.write_all(&buf[..n]).map_err(|e| io("writing", e))?;
                    done += n as u64;
                }
                written += len;
            }
            TensorSource::KeptRows { offset, row_bytes } => {
                let rb = row_bytes as usize;
                let per_buf = (COPY_BUFFER / rb).max(1);
                // Runs of consecutive ids are one read each, at most a buffer long.
                let mut k = 0;
                while k < plan.ids.len() {
                    let first = plan.ids[k];
                    let mut n = 1;
                    while k + n < plan.ids.len()
                        && n < per_buf
                        && plan.ids[k + n] == first + n as u32
                    {
                        n += 1;
                    }
                    read(&mut buf[..n * rb], offset + first as u64 * row_bytes)?;
                    w.write_all(&buf[..n * rb]).map_err(|e| io("writing", e))?;
                    k += n;
                }
                written += plan.ids.len() as u64 * row_bytes;
            }
        }
        debug_assert_eq!(written, start + plan.writer.tensor_bytes(i));
    }
    w.write_all(&zeros[..(plan.writer.data_len() - written) as usize])
        .map_err(|e| io("writing padding", e))?;
    let dst = w.into_inner().map_err(|e| io("writing", e.into_error()))?;
    dst.sync_all().map_err(|e| io("syncing", e))?;
    drop(dst);

    // Parse the result back before it takes the final name.
    let check = MappedFile::open(&tmp)?;
    let expected_len = header.len() as u64 + plan.writer.data_len();
    if check.bytes().len() as u64 != expected_len {
        return Err(format!(
            "{}: wrote {} bytes, expected {expected_len}",
            tmp.display(),
            check.bytes().len()
        ));
    }
    Gguf::parse(check.bytes())
        .map_err(|e| format!("{} does not parse back: {e}", tmp.display()))?;
    drop(check);
    partial.commit(out)?;
    eprintln!(
        "wrote {} ({:.1} MiB): head cut to {} rows",
        out.display(),
        expected_len as f64 / (1 << 20) as f64,
        plan.ids.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--join-pieces` in the decoder: on a Gemma whose head dropped "Holmes", decoding "Hol"
    /// then "mes" leaves the cache and the logits exactly as decoding "Holmes" after the same
    /// prompt does (the join rewinds to "Hol" and runs "Holmes" there); without joining the
    /// pieces stay and the logits differ.
    #[test]
    fn joined_pieces_decode_as_the_dropped_token() {
        let path = crate::test_support::gemma_path();
        let file = MappedFile::open(&path).unwrap();
        let tok = Tokenizer::from_gguf(&Gguf::parse(file.bytes()).unwrap()).unwrap();
        let id = |text: &str| tok.token_id(text.as_bytes()).unwrap();
        let (hol, mes, holmes) = (id("Hol"), id("mes"), id("Holmes"));
        let dir = std::env::temp_dir().join(format!("smolrun-join-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (ids_path, pruned_path) = (dir.join("ids.txt"), dir.join("pruned.gguf"));
        let kept: Vec<String> = (0..tok.n_vocab() as u32)
            .filter(|&i| i != holmes)
            .map(|i| i.to_string())
            .collect();
        std::fs::write(&ids_path, kept.join("\n")).unwrap();
        prune_head(path.to_str().unwrap(), &ids_path, &pruned_path).unwrap();
        let mut engine = crate::test_support::open(&pruned_path, 64, 1);
        let prompt = engine.tokenize("He turned to my friend and said, \"", true, false);
        let n = prompt.len();

        engine.set_join_pieces(true);
        engine.prefill(&prompt).unwrap();
        engine.decode(hol).unwrap();
        engine.decode(mes).unwrap();
        let joined = engine.logits().to_vec();
        assert_eq!(&engine.cached_tokens()[n..], &[holmes]);

        engine.set_join_pieces(false);
        engine.prefill(&prompt).unwrap();
        engine.decode(holmes).unwrap();
        assert!(engine.logits() == joined.as_slice(), "joined logits differ");

        engine.prefill(&prompt).unwrap();
        engine.decode(hol).unwrap();
        engine.decode(mes).unwrap();
        assert_eq!(&engine.cached_tokens()[n..], &[hol, mes]);
        assert!(engine.logits() != joined.as_slice());
        drop(engine);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_model_reads_about_the_positions_asked_for() {
        // 2048 over 10 files: one window of 205 each (it was two of 204: 4080 positions).
        assert_eq!(prediction_windows(2048, 10), (1, 205));
        assert_eq!(prediction_windows(4080, 10), (2, 204));
        assert_eq!(prediction_windows(2560, 10), (1, 256));
        assert_eq!(prediction_windows(2561, 10), (2, 129));
        assert_eq!(prediction_windows(64, 10), (1, 16));
        assert_eq!(prediction_windows(100, 0), (1, 100));
        for (n, files) in [(2048, 10), (32768, 7), (1000, 3), (5000, 1)] {
            let (per_file, len) = prediction_windows(n, files);
            let read = per_file * len * files;
            assert!(
                read >= n && read < n + per_file * files,
                "{n} over {files}: {read}"
            );
        }
    }

    #[test]
    fn rulers_are_runs_of_one_punctuation_mark() {
        for r in [&b"--"[..], b" ==", b"********", b" //", b"...."] {
            assert!(is_ruler(r), "{:?}", String::from_utf8_lossy(r));
        }
        for r in [
            &b"-"[..],
            b" -",
            b"-=",
            b"  --",
            b"aa",
            b"--a",
            b"",
            b" ",
            b"\xe2\x80\x94\xe2\x80\x94",
        ] {
            assert!(!is_ruler(r), "{:?}", String::from_utf8_lossy(r));
        }
    }

    #[test]
    fn spellings_cover_case_and_leading_space() {
        assert_eq!(spell("über", Case::AsListed, true), " über");
        assert_eq!(spell("über", Case::Capitalised, false), "Über");
        assert_eq!(spell("i'm", Case::Capitalised, true), " I'm");
        assert_eq!(spell("straße", Case::Upper, true), " STRASSE");
        assert_eq!(spell("2024", Case::Upper, false), "2024");
        let shares: f64 = SPELLINGS.iter().map(|s| s.2).sum();
        assert!((shares - 1.0).abs() < 1e-12, "shares sum to {shares}");
    }

    #[test]
    fn word_lists_parse_and_refuse_bad_lines() {
        let dir = std::env::temp_dir().join(format!("smolrun-wordlist-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.tsv");
        std::fs::write(&path, "# comment\n\nthe\t53700000\ndon't\t1.5e3\n").unwrap();
        assert_eq!(
            read_word_list(&path).unwrap(),
            vec![
                ("the".to_string(), 53700000.0),
                ("don't".to_string(), 1500.0)
            ]
        );
        for (text, why) in [
            ("the 12\n", "line 1: no tab"),
            ("a\t1\nthe\tmany\n", "line 2: 'many' is not a count"),
            ("the\t-1\n", "line 1: count -1 is not a finite number >= 0"),
            ("\t5\n", "line 1: empty word"),
            ("# only a comment\n", "has no words"),
        ] {
            std::fs::write(&path, text).unwrap();
            let err = read_word_list(&path).unwrap_err();
            assert!(err.contains(why), "{text:?}: {err}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
