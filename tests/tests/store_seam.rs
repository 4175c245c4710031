//! The weight store is the one seam between the forward pass and where a weight lives:
//! - the pread store (nothing mapped, every weight read into one scratch buffer just before its
//!   matvec) and the streaming store (a resident set, the rest read ahead into a ring) give the
//!   resident store's logits to the bit, on Gemma 3 270M, Qwen2.5-Coder-0.5B (1.5B by hand)
//!   and every synthetic architecture file, over the golden logits texts (the positions the
//!   golden tests compare with llama.cpp) and over greedy decoding (two of the synthetic files
//!   over a few tokens only); so does MTP drafting (Qwen3.5's MTP block) through both;
//! - every get is released before the next one, and each decoded token asks for the same
//!   weights in the same order (the order a streaming store learns), hinted ahead of use;
//! - a read that fails (the file truncated after load) stops the pass with an error that
//!   names the tensor and the offset, never a panic or garbage logits.
//!
//! Run in release mode: `cargo test --release -p smolrun-tests --test store_seam`.

use smolrun_core::gguf::Gguf;
use smolrun_core::kernels::KernelSet;
use smolrun_core::model::stream::aligned_span;
use smolrun_core::model::{
    Model, ModelError, RecordingStore, ResidentStore, State, StoreCall, StoreErrorKind,
    StreamBudget, StreamPlan, StreamStore, WeightStore,
};
use smolrun_core::platform::{IoError, ReadAt};
use smolrun_linux::{CondSignal, FileReader, MappedFile, StreamingStore};
use smolrun_tests::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// What a comparison of two stores runs on a model: the logits it returns, in order.
type Run = fn(&Model, &dyn WeightStore, &str) -> Vec<f32>;

/// The golden logits texts at every position, then 8 greedy tokens ([`logits_through`]).
fn golden_texts(m: &Model, store: &dyn WeightStore, model: &str) -> Vec<f32> {
    logits_through(m, store, model, 8)
}

/// The logits at every position of the golden text's first 16 tokens (one batch), then 2
/// greedy tokens: three passes, each reading every weight.
fn a_few_tokens(m: &Model, store: &dyn WeightStore, model: &str) -> Vec<f32> {
    let par = ScopedThreads::from_env();
    let prompt = golden_prompt(model, 16);
    let n_vocab = m.n_vocab();
    let mut state = State::new(m, prompt.len() + 2).expect("state");
    let mut all = Vec::new();
    m.forward_batch_all(&mut state, store, &par, &prompt, 0, 0, &mut |_, l| {
        all.extend_from_slice(&l[..n_vocab])
    })
    .expect("forward_batch_all");
    assert_eq!(all.len(), prompt.len() * n_vocab);
    let mut next = argmax(&all[all.len() - n_vocab..]);
    for i in 0..2 {
        let logits = m
            .forward(&mut state, store, &par, next, prompt.len() + i)
            .expect("forward");
        all.extend_from_slice(&logits[..n_vocab]);
        next = argmax(logits);
    }
    all
}

/// How each synthetic architecture file (golden::SYNTHETIC_MODELS, so that a file added there
/// is checked here too) is run through the stores: these four over the golden texts, the
/// others over a few tokens, which keeps the file's time down (each of those passes reads
/// every weight of the file, in the streaming setups from the disk).
fn synthetic_run(model: &str) -> Run {
    const OVER_THE_GOLDEN_TEXTS: [&str; 4] = [
        "synthetic-qwen3",
        "synthetic-llama",
        "synthetic-qwen3moe",
        "synthetic-bailingmoe2",
    ];
    if OVER_THE_GOLDEN_TEXTS.contains(&model) {
        golden_texts
    } else {
        a_few_tokens
    }
}

fn pread_matches_resident(model: &str, run: Run) {
    let path = model_path(model);
    let file = MappedFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let g = Gguf::parse(file.bytes()).expect("parse");
    // The kernels this CPU runs in production (both stores get the same ones; the seam must
    // not change a bit whichever they are, and these run the texts in seconds, not minutes).
    let kernels = KernelSet::select(&smolrun_linux::detect_features());
    let resident = ResidentStore::new(&g);
    let m = Model::load_from(&g, &resident, &kernels).expect("load");
    let want = run(&m, &resident, model);

    // The pread store reads from a header-only parse, as `--weights pread` does: the prefix
    // that holds the header, and nothing else of the file in memory.
    let header = &file.bytes()[..g.data_offset as usize];
    let g_header = Gguf::parse_header(header, file.bytes().len() as u64).expect("header");
    assert!(!g_header.has_tensor_data());
    let pread = pread_store(&path, &g_header);
    let m_pread = Model::load_from(&g_header, &pread, &kernels).expect("load through pread");
    let got = run(&m_pread, &pread, model);

    assert_eq!(want.len(), got.len());
    let differ = want
        .iter()
        .zip(&got)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    assert_eq!(
        differ,
        0,
        "{model}: {differ} of {} logits differ between the resident and the pread store",
        want.len()
    );
    println!(
        "{model}: {} logits identical through both stores ({} MB scratch)",
        want.len(),
        pread.held_bytes() / 1_000_000
    );
}

#[test]
fn pread_store_gives_the_resident_logits_gemma3_270m() {
    pread_matches_resident("gemma3-270m", golden_texts);
}

#[test]
fn pread_store_gives_the_resident_logits_qwen25_coder_05b() {
    pread_matches_resident("qwen2.5-coder-0.5b", golden_texts);
}

#[test]
#[ignore = "by hand: tools/test.sh --full (Qwen2.5-Coder-1.5B, 1.1 GB; minutes of CPU)"]
fn pread_store_gives_the_resident_logits_qwen25_coder_15b() {
    pread_matches_resident("qwen2.5-coder-1.5b", golden_texts);
}

/// Every synthetic architecture file: dense, MoE, the DeltaNet hybrid ([`synthetic_run`]).
/// The expert pager, the third store, is held to the resident logits over the golden texts on
/// each MoE file by tests/tests/pager.rs.
#[test]
fn pread_store_gives_the_resident_logits_synthetic() {
    for model in smolrun_tests::golden::SYNTHETIC_MODELS {
        pread_matches_resident(model, synthetic_run(model));
    }
}

/// The streaming store (a resident set, the rest read ahead by reader threads into a ring)
/// gives the resident store's logits to the bit: with nothing resident and a ring that holds
/// only the largest weight (every weight waits for its read, the ring wraps all the time), with
/// half the weights resident, and with several readers sharing each weight's chunks.
fn stream_matches_resident(model: &str, all_setups: bool, run: Run) {
    let path = model_path(model);
    let file = MappedFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let g = Gguf::parse(file.bytes()).expect("parse");
    let kernels = KernelSet::select(&smolrun_linux::detect_features());
    let resident = ResidentStore::new(&g);
    let m = Model::load_from(&g, &resident, &kernels).expect("load");
    let want = run(&m, &resident, model);
    let header = &file.bytes()[..g.data_offset as usize];
    let g_header = Gguf::parse_header(header, file.bytes().len() as u64).expect("header");
    let half = m
        .weight_order()
        .iter()
        .map(|&k| g.tensors[k.tensor].n_bytes)
        .sum::<u64>()
        / 2;
    let setups = [
        StreamSetup {
            budget: StreamBudget::Resident(0),
            zone: Some(0),
            readers: 1,
            verify: true,
        },
        StreamSetup {
            budget: StreamBudget::Resident(half),
            zone: None,
            readers: 3,
            verify: false,
        },
        StreamSetup {
            budget: StreamBudget::Resident(0),
            zone: Some(0),
            readers: 4,
            verify: false,
        },
    ];
    // The real models read every streamed byte from the disk for every pass (direct reads):
    // one setup, the one that exercises most (half resident, the smallest ring, verify).
    let mixed = StreamSetup {
        budget: StreamBudget::Resident(half),
        zone: Some(0),
        readers: 2,
        verify: true,
    };
    let setups = if all_setups {
        &setups[..]
    } else {
        &[mixed][..]
    };
    for &setup in setups {
        let reader = FileReader::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let (m_stream, store, plan) = streaming_store(reader, &g_header, &kernels, setup);
        assert!(!plan.streamed.is_empty(), "{model}: nothing streamed");
        let got = run(&m_stream, &store, model);
        assert_eq!(want.len(), got.len());
        let differ = want
            .iter()
            .zip(&got)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(
            differ, 0,
            "{model} {setup:?}: {differ} logits differ from resident"
        );
        let stats = store.stream_stats().expect("stats");
        assert!(
            stats.bytes_read >= plan.streamed_bytes,
            "{model}: {stats:?}"
        );
        assert!(stats.passes > 0);
    }
}

#[test]
fn stream_store_gives_the_resident_logits_gemma3_270m() {
    stream_matches_resident("gemma3-270m", false, golden_texts);
}

#[test]
fn stream_store_gives_the_resident_logits_qwen25_coder_05b() {
    stream_matches_resident("qwen2.5-coder-0.5b", false, golden_texts);
}

#[test]
fn stream_store_gives_the_resident_logits_synthetic() {
    for model in smolrun_tests::golden::SYNTHETIC_MODELS {
        stream_matches_resident(model, true, synthetic_run(model));
    }
}

/// Qwen3.5's MTP drafting, teacher-forced along the golden text as tests/tests/mtp.rs runs it:
/// after a prompt, at each position the MTP block drafts three chained tokens from the token
/// there, then the trunk decodes that token. Returns the drafts and, in order, the prompt's
/// logits, every draft step's logits and every trunk step's.
fn mtp_drafts(m: &Model, store: &dyn WeightStore, model: &str) -> (Vec<u32>, Vec<f32>) {
    const N_PROMPT: usize = 12;
    const N_STEPS: usize = 4;
    const N_DRAFT: usize = 3;
    let par = ScopedThreads::from_env();
    let seq = golden_prompt(model, N_PROMPT + N_STEPS);
    let (prompt, rest) = seq.split_at(N_PROMPT);
    let n_vocab = m.n_vocab();
    let mut state = State::with_mtp(m, 64, 32, 4).expect("state");
    let mut all = m
        .forward_batch(&mut state, store, &par, prompt, 0)
        .expect("prompt")
        .to_vec();
    let mut drafts = Vec::new();
    for (i, &token) in rest.iter().enumerate() {
        let mut logits = m
            .mtp_begin(&mut state, store, &par, token)
            .expect("mtp_begin")[..n_vocab]
            .to_vec();
        for step in 0..N_DRAFT {
            let d = argmax(&logits);
            drafts.push(d);
            all.extend_from_slice(&logits);
            if step + 1 < N_DRAFT {
                logits =
                    m.mtp_next(&mut state, store, &par, d).expect("mtp_next")[..n_vocab].to_vec();
            }
        }
        let trunk = m
            .forward(&mut state, store, &par, token, N_PROMPT + i)
            .expect("forward");
        all.extend_from_slice(trunk);
    }
    assert_eq!(drafts.len(), N_STEPS * N_DRAFT);
    (drafts, all)
}

/// MTP drafting (synthetic-qwen35's MTP block) gives the resident store's drafts and logits to
/// the bit through the pread store and through the streaming store, planned as `--draft mtp`
/// plans it (engine/src/load.rs): the MTP block and the LM head pinned resident, since draft
/// steps read them outside the pass's order; every other weight streamed through the smallest
/// ring, every weight checked against its checksum.
#[test]
fn mtp_drafts_through_the_pread_and_stream_stores_are_the_resident_ones() {
    let model = "synthetic-qwen35";
    let path = model_path(model);
    let file = MappedFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let g = Gguf::parse(file.bytes()).expect("parse");
    let kernels = KernelSet::select(&smolrun_linux::detect_features());
    let resident = ResidentStore::new(&g);
    let mut m = Model::load_from(&g, &resident, &kernels).expect("load");
    m.load_mtp(&g, &resident, &kernels).expect("load_mtp");
    let (want_drafts, want) = mtp_drafts(&m, &resident, model);
    let same = |what: &str, drafts: &[u32], got: &[f32]| {
        assert_eq!(drafts, &want_drafts[..], "{what}: other drafts");
        assert_eq!(want.len(), got.len(), "{what}");
        let differ = want
            .iter()
            .zip(got)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(differ, 0, "{what}: {differ} logits differ from resident");
    };

    let header = &file.bytes()[..g.data_offset as usize];
    let g_header = Gguf::parse_header(header, file.bytes().len() as u64).expect("header");

    let pread = pread_store(&path, &g_header);
    let mut mp = Model::load_from(&g_header, &pread, &kernels).expect("load through pread");
    mp.load_mtp(&g_header, &pread, &kernels)
        .expect("load_mtp through pread");
    let (drafts, got) = mtp_drafts(&mp, &pread, model);
    same("pread", &drafts, &got);

    let reader = FileReader::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let mut store = StreamStore::new(
        reader,
        &g_header,
        CondSignal::default(),
        CondSignal::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut ms = Model::load_from(&g_header, &store, &kernels).expect("load through stream");
    ms.load_mtp(&g_header, &store, &kernels)
        .expect("load_mtp through stream");
    let pinned = ms.mtp.as_ref().expect("the MTP block").keys.clone();
    // A resident budget of the pinned weights' spans alone: nothing else stays.
    let align = store.alignment();
    let pinned_bytes: u64 = pinned
        .iter()
        .map(|&k| {
            let span = aligned_span(&store.table().extent(k).expect("extent"), align);
            span.end - span.start
        })
        .sum();
    let mut plan = StreamPlan::with_pinned(
        store.table(),
        &ms.weight_order(),
        &pinned,
        StreamBudget::Resident(pinned_bytes),
        align,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(!plan.streamed.is_empty(), "{model}: nothing streamed");
    assert!(
        plan.streamed.iter().all(|w| !pinned.contains(&w.key)),
        "{model}: a pinned weight is streamed"
    );
    plan.zone_bytes = plan
        .streamed
        .iter()
        .map(|w| w.span.end - w.span.start)
        .max()
        .unwrap_or(0);
    let zones = store
        .zone_plan(&plan, &ms.expert_keys())
        .unwrap_or_else(|e| panic!("{e}"));
    let region = smolrun_core::arena::Region::heap(zones.total_usize().unwrap()).unwrap();
    store
        .plan(&plan, &ms.expert_keys(), true, region)
        .unwrap_or_else(|e| panic!("{e}"));
    let store = StreamingStore::start(store, 2).expect("reader threads");
    let (drafts, got) = mtp_drafts(&ms, &store, model);
    same("stream", &drafts, &got);
    let stats = store.stream_stats().expect("stats");
    assert!(stats.passes > 0, "{stats:?}");
    println!(
        "{model}: {} MTP drafts and {} logits identical through the resident, pread and \
         stream stores",
        drafts.len(),
        want.len()
    );
}

/// A prompt longer than the state's batch runs in chunks, and only the last one computes
/// logits: every other chunk skips the LM head, which the ring had read ahead. The skip drops
/// what lies between and keeps the rest; the logits stay the resident store's.
#[test]
fn a_prompt_in_chunks_skips_the_head_in_the_ring_and_keeps_the_logits() {
    let path = model_path("synthetic-qwen3");
    let bytes = std::fs::read(&path).unwrap();
    let g = Gguf::parse(&bytes).expect("parse");
    let kernels = test_kernels();
    let resident = ResidentStore::new(&g);
    let m = Model::load_from(&g, &resident, &kernels).expect("load");
    let par = ScopedThreads::from_env();
    let prompt: Vec<u32> = (0..23).map(|i| 1 + (i * 7) % 50).collect();
    let mut state = State::with_batch(&m, 64, 4).expect("state");
    let want = m
        .forward_batch(&mut state, &resident, &par, &prompt, 0)
        .unwrap()
        .to_vec();
    let setup = StreamSetup {
        budget: StreamBudget::Resident(0),
        zone: None,
        readers: 2,
        verify: true,
    };
    let reader = FileReader::open(&path).unwrap();
    let (ms, store, _) = streaming_store(reader, &g, &kernels, setup);
    let mut state = State::with_batch(&ms, 64, 4).expect("state");
    for _ in 0..2 {
        state.reset();
        let got = ms
            .forward_batch(&mut state, &store, &par, &prompt, 0)
            .unwrap()
            .to_vec();
        assert!(want
            .iter()
            .zip(&got)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }
    // Six chunks, five of them without the head, twice: each skip is counted.
    let stats = store.stream_stats().unwrap();
    assert!(stats.misses >= 5, "{stats:?}");
}

/// A file reader whose direct reads fail with EIO once `fail_after` more reads were made.
struct FlakyReader {
    inner: FileReader,
    reads_left: Arc<AtomicU64>,
    failing: Arc<AtomicBool>,
}

impl ReadAt for FlakyReader {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        self.inner.read_at(offset, buf)
    }
    fn read_direct(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        if self.failing.load(Ordering::SeqCst) {
            let left = self.reads_left.load(Ordering::SeqCst);
            if left == 0 {
                return Err(IoError {
                    code: 5,
                    op: "pread O_DIRECT",
                    file: "flaky.gguf".into(),
                    offset,
                    len: buf.len() as u64,
                });
            }
            self.reads_left.store(left - 1, Ordering::SeqCst);
        }
        self.inner.read_direct(offset, buf)
    }
    fn direct_alignment(&self) -> usize {
        self.inner.direct_alignment()
    }
}

/// An I/O error in a reader thread mid-token (EIO) stops the pass with an error naming the
/// tensor, never a wrong token; once reads work again, the next pass gives the right logits.
#[test]
fn a_read_error_while_streaming_names_the_tensor_and_the_store_recovers() {
    let path = model_path("synthetic-qwen3");
    let bytes = std::fs::read(&path).unwrap();
    let g = Gguf::parse(&bytes).expect("parse");
    let kernels = test_kernels();
    let resident = ResidentStore::new(&g);
    let m = Model::load_from(&g, &resident, &kernels).expect("load");
    let par = ScopedThreads::from_env();
    let mut state = State::new(&m, 16).expect("state");
    m.forward(&mut state, &resident, &par, 1, 0).unwrap();
    let want = m
        .forward(&mut state, &resident, &par, 2, 1)
        .unwrap()
        .to_vec();

    let failing = Arc::new(AtomicBool::new(false));
    let reads_left = Arc::new(AtomicU64::new(0));
    let reader = FlakyReader {
        inner: FileReader::open(&path).unwrap(),
        reads_left: reads_left.clone(),
        failing: failing.clone(),
    };
    let setup = StreamSetup {
        budget: StreamBudget::Resident(0),
        zone: Some(0),
        readers: 2,
        verify: false,
    };
    let (ms, store, plan) = streaming_store(reader, &g, &kernels, setup);
    let mut state = State::new(&ms, 16).expect("state");
    ms.forward(&mut state, &store, &par, 1, 0).unwrap();
    reads_left.store(plan.streamed.len() as u64 / 2, Ordering::SeqCst);
    failing.store(true, Ordering::SeqCst);
    let err = ms.forward(&mut state, &store, &par, 2, 1).unwrap_err();
    let ModelError::WeightRead(e) = &err else {
        panic!("expected a read error, got {err}");
    };
    let StoreErrorKind::Io(io) = &e.kind else {
        panic!("expected an I/O error, got {err}");
    };
    assert_eq!(io.code, 5);
    let text = err.to_string();
    let named = plan
        .streamed
        .iter()
        .any(|w| text.contains(g.tensors[w.key.tensor].name));
    assert!(named, "{text}");
    failing.store(false, Ordering::SeqCst);
    let got = ms
        .forward(&mut state, &store, &par, 2, 1)
        .expect("reads again")
        .to_vec();
    assert!(want
        .iter()
        .zip(&got)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
}

/// The gets of one decoded token, checking on the way that each is released before the next
/// get (one weight held at a time) and that every hint comes before its layer's gets.
fn gets_of_one_token(calls: &[StoreCall], what: &str) -> Vec<smolrun_core::model::WeightKey> {
    let mut held = None;
    let mut gets = Vec::new();
    let mut n_prefetch = 0;
    for call in calls {
        match *call {
            StoreCall::Get(k) | StoreCall::GetRepacked(k) => {
                assert_eq!(held, None, "{what}: {k:?} asked for while {held:?} is held");
                held = Some(k);
                gets.push(k);
            }
            StoreCall::Release(k) => {
                assert_eq!(held, Some(k), "{what}: {k:?} released, {held:?} was held");
                held = None;
            }
            StoreCall::Prefetch(n) => {
                assert!(n > 0, "{what}: an empty hint");
                n_prefetch += 1;
            }
            StoreCall::ReadRows(_) => {}
        }
    }
    assert_eq!(held, None, "{what}: {held:?} never released");
    assert!(n_prefetch > 0, "{what}: no prefetch hint");
    gets
}

#[test]
fn every_get_is_released_and_each_token_asks_in_the_same_order() {
    for model in ["synthetic-qwen3", "gemma3-270m"] {
        let path = model_path(model);
        let file = MappedFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let g = Gguf::parse(file.bytes()).expect("parse");
        let m = Model::load_with_kernels(&g, &test_kernels()).expect("load");
        let store = RecordingStore::new(ResidentStore::new(&g), 1 << 16);
        let par = ScopedThreads::from_env();
        let mut state = State::new(&m, 64).expect("state");
        let prompt = golden_prompt(model, 12);
        let mut next = argmax(
            m.forward_batch(&mut state, &store, &par, &prompt, 0)
                .unwrap(),
        );
        let prompt_calls = store.take();
        let prompt_gets = gets_of_one_token(&prompt_calls, &format!("{model} prompt"));
        // The embedding rows of the prompt are read by row, never fetched whole.
        let embd = m.token_embd.key;
        let rows = prompt_calls
            .iter()
            .filter(|c| **c == StoreCall::ReadRows(embd))
            .count();
        assert_eq!(rows, prompt.len(), "{model}: one row read per prompt token");

        let mut first_order = None;
        for i in 0..5 {
            let logits = m
                .forward(&mut state, &store, &par, next, prompt.len() + i)
                .unwrap();
            next = argmax(logits);
            let calls = store.take();
            let gets = gets_of_one_token(&calls, &format!("{model} token {i}"));
            // Every layer matrix and the head, each once.
            let expected = m.layers.iter().map(|l| l.matrices().len()).sum::<usize>() + 1;
            assert_eq!(gets.len(), expected, "{model} token {i}");
            assert_eq!(calls.first(), Some(&StoreCall::ReadRows(embd)));
            match &first_order {
                None => first_order = Some(gets),
                Some(order) => {
                    assert_eq!(&gets, order, "{model}: token {i} asked in another order")
                }
            }
        }
        // A one-chunk prompt asks in the decode order too.
        assert_eq!(
            Some(&prompt_gets),
            first_order.as_ref(),
            "{model}: prompt order"
        );
    }
}

#[test]
fn a_file_truncated_after_load_gives_an_error_naming_the_tensor() {
    let src = model_path("synthetic-qwen3");
    let dir = std::env::temp_dir().join(format!("smolrun-store-seam-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("truncated.gguf");
    std::fs::copy(&src, &path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let g = Gguf::parse(&bytes).expect("parse");
    let store = pread_store(&path, &g);
    let m = Model::load_from(&g, &store, &test_kernels()).expect("load");
    let mut state = State::new(&m, 16).expect("state");
    let par = ScopedThreads::from_env();
    m.forward(&mut state, &store, &par, 1, 0)
        .expect("the whole file reads");

    // Cut the file in the middle of the matrix that lies last in it.
    let matrices = m.layers.iter().flat_map(|l| l.matrices());
    let last = matrices
        .chain([&m.output])
        .map(|mat| &g.tensors[mat.id])
        .max_by_key(|t| t.offset)
        .unwrap();
    let cut = last.offset + last.n_bytes / 2;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(cut)
        .unwrap();
    let err = m.forward(&mut state, &store, &par, 2, 1).unwrap_err();
    let ModelError::WeightRead(e) = &err else {
        panic!("expected a read error, got {err}");
    };
    let StoreErrorKind::Io(io) = &e.kind else {
        panic!("expected an I/O error, got {err}");
    };
    assert_eq!(io.code, IoError::UNEXPECTED_EOF);
    let text = err.to_string();
    assert!(text.contains(last.name), "{text}");
    assert!(text.contains(&format!("offset {}", last.offset)), "{text}");
    assert!(text.contains("truncated"), "{text}");
    // The store is free again: after the failed read nothing is held.
    std::fs::copy(&src, &path).unwrap();
    m.forward(&mut state, &store, &par, 2, 1)
        .expect("reads again once the file is whole");
    std::fs::remove_dir_all(&dir).unwrap();
}
