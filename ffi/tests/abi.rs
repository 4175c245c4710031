//! The C ABI as a C program meets it, called through its extern "C" functions on Gemma 3 270M:
//! NULL handles and pointers, a bad model path, a too-small tokenize buffer, a callback that
//! stops, a cancel from another thread, a callback that calls back into its engine, and the
//! text against the engine's own `generate`.

use ::smolrun_engine::smolrun_core::sampler::SamplerParams;
use ::smolrun_engine::{Engine, EngineOptions, GenerateOptions};
use smolrun_ffi::engine::*;
use smolrun_ffi::options::*;
use smolrun_ffi::status::smolrun_status::{self, *};
use smolrun_ffi::status::{smolrun_last_error, smolrun_status_name};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::{null, null_mut};
use std::sync::mpsc;

fn gemma() -> CString {
    let path = smolrun_tests::model_path("gemma3-270m");
    CString::new(path.to_str().unwrap()).unwrap()
}

const N_CTX: u32 = 256;
const THREADS: u32 = 2;

/// Gemma 3 270M with a small context (the options a C program would set).
fn open_gemma() -> *mut smolrun_engine {
    unsafe {
        let options = smolrun_options_new();
        assert!(!options.is_null());
        assert_eq!(smolrun_options_set_context(options, N_CTX), SMOLRUN_OK);
        assert_eq!(smolrun_options_set_threads(options, THREADS), SMOLRUN_OK);
        let mut engine = null_mut();
        let status = smolrun_open(gemma().as_ptr(), options, &mut engine);
        smolrun_options_free(options);
        assert_eq!(status, SMOLRUN_OK, "{}", last_error());
        assert!(!engine.is_null());
        engine
    }
}

fn last_error() -> String {
    unsafe { CStr::from_ptr(smolrun_last_error()) }
        .to_str()
        .unwrap()
        .to_string()
}

/// What a piece callback saw: the text, how many pieces, and when to stop.
#[derive(Default)]
struct Pieces {
    text: String,
    count: usize,
    /// Return non-zero once this many pieces arrived.
    stop_after: Option<usize>,
    /// Pieces that arrived after the callback asked to stop.
    after_stop: usize,
    /// Called with the first piece (the cancel test's handshake).
    on_first: Option<Box<dyn FnMut()>>,
}

/// The callback: appends the piece. Nothing in it may panic (it is an extern "C" fn: a panic
/// would abort the test process), so it only records.
unsafe extern "C" fn collect(piece: *const c_char, len: usize, user_data: *mut c_void) -> c_int {
    let pieces = unsafe { &mut *(user_data as *mut Pieces) };
    let bytes = unsafe { std::slice::from_raw_parts(piece.cast::<u8>(), len) };
    if pieces.stop_after.is_some_and(|n| pieces.count >= n) {
        pieces.after_stop += 1;
    }
    pieces.text.push_str(&String::from_utf8_lossy(bytes));
    pieces.count += 1;
    if pieces.count == 1 {
        if let Some(f) = pieces.on_first.as_mut() {
            f();
        }
    }
    c_int::from(pieces.stop_after.is_some_and(|n| pieces.count >= n))
}

fn generate(
    engine: *mut smolrun_engine,
    prompt: &CStr,
    max_tokens: i32,
    pieces: &mut Pieces,
) -> (smolrun_status, smolrun_result) {
    let mut result = smolrun_result {
        prompt_tokens: 0,
        prompt_evaluated: 0,
        generated_tokens: 0,
        stop: -1,
        prompt_tokens_per_second: 0.0,
        generated_tokens_per_second: 0.0,
    };
    let status = unsafe {
        smolrun_generate(
            engine,
            prompt.as_ptr(),
            max_tokens,
            0.0,
            0,
            Some(collect),
            (pieces as *mut Pieces).cast(),
            &mut result,
        )
    };
    (status, result)
}

#[test]
fn null_handles_and_pointers_return_a_status_and_say_which() {
    unsafe {
        let mut engine = null_mut();
        let mut n = 0usize;
        let mut ids = [0u32; 4];
        assert_eq!(
            smolrun_open(null(), null(), &mut engine),
            SMOLRUN_NULL_ARGUMENT
        );
        assert_eq!(
            last_error(),
            "smolrun_open: `model` is NULL; pass a valid pointer"
        );
        assert_eq!(
            smolrun_open(gemma().as_ptr(), null(), null_mut()),
            SMOLRUN_NULL_ARGUMENT
        );
        assert!(
            last_error().contains("`engine` is NULL"),
            "{}",
            last_error()
        );
        assert_eq!(
            smolrun_tokenize(null_mut(), c"x".as_ptr(), 1, 1, ids.as_mut_ptr(), 4, &mut n),
            SMOLRUN_NULL_ARGUMENT
        );
        assert_eq!(
            smolrun_generate(
                null_mut(),
                c"x".as_ptr(),
                1,
                0.0,
                0,
                None,
                null_mut(),
                null_mut()
            ),
            SMOLRUN_NULL_ARGUMENT
        );
        assert_eq!(
            last_error(),
            "smolrun_generate: `engine` is NULL; pass a valid pointer"
        );
        assert_eq!(smolrun_cancel(null_mut()), SMOLRUN_NULL_ARGUMENT);
        smolrun_free(null_mut());
        smolrun_options_free(null_mut());

        // A real engine, NULL arguments.
        let engine = open_gemma();
        assert_eq!(
            smolrun_tokenize(engine, null(), 1, 1, ids.as_mut_ptr(), 4, &mut n),
            SMOLRUN_NULL_ARGUMENT
        );
        assert!(last_error().contains("`text` is NULL"), "{}", last_error());
        assert_eq!(
            smolrun_tokenize(engine, c"x".as_ptr(), 1, 1, ids.as_mut_ptr(), 4, null_mut()),
            SMOLRUN_NULL_ARGUMENT
        );
        assert_eq!(
            smolrun_tokenize(engine, c"x".as_ptr(), 1, 1, null_mut(), 4, &mut n),
            SMOLRUN_NULL_ARGUMENT
        );
        assert_eq!(
            smolrun_generate(engine, null(), 1, 0.0, 0, None, null_mut(), null_mut()),
            SMOLRUN_NULL_ARGUMENT
        );
        assert!(
            last_error().contains("`prompt` is NULL"),
            "{}",
            last_error()
        );
        // No callback and no result: allowed, the tokens are generated and dropped.
        assert_eq!(
            smolrun_generate(
                engine,
                c"Hello".as_ptr(),
                2,
                0.0,
                0,
                None,
                null_mut(),
                null_mut()
            ),
            SMOLRUN_OK
        );
        smolrun_free(engine);
    }
}

#[test]
fn a_bad_model_path_is_model_not_found_with_the_path_in_the_message() {
    unsafe {
        let mut engine = std::ptr::dangling_mut::<smolrun_engine>(); // set to NULL on failure
        let status = smolrun_open(c"/no/such/dir/model.gguf".as_ptr(), null(), &mut engine);
        assert_eq!(status, SMOLRUN_MODEL_NOT_FOUND);
        assert!(engine.is_null());
        let message = last_error();
        assert!(message.contains("/no/such/dir/model.gguf"), "{message}");
        let name = CStr::from_ptr(smolrun_status_name(status as c_int));
        assert_eq!(name, c"model-not-found");

        // A file that is not a GGUF model.
        let junk =
            std::env::temp_dir().join(format!("smolrun-ffi-junk-{}.gguf", std::process::id()));
        std::fs::write(&junk, b"this is not a gguf file at all").unwrap();
        let path = CString::new(junk.to_str().unwrap()).unwrap();
        let status = smolrun_open(path.as_ptr(), null(), &mut engine);
        std::fs::remove_file(&junk).unwrap();
        assert_eq!(status, SMOLRUN_BAD_FILE, "{}", last_error());
        assert!(
            last_error().contains(junk.to_str().unwrap()),
            "{}",
            last_error()
        );

        // A path that is not UTF-8.
        let status = smolrun_open(c"/tmp/\xff\xfe.gguf".as_ptr(), null(), &mut engine);
        assert_eq!(status, SMOLRUN_MODEL_NOT_FOUND);
        assert!(last_error().contains("not UTF-8"), "{}", last_error());
    }
}

#[test]
fn a_bad_option_fails_the_open_with_bad_option() {
    unsafe {
        let options = smolrun_options_new();
        // Longer than Gemma 3 270M was trained on (32768).
        assert_eq!(smolrun_options_set_context(options, 1 << 20), SMOLRUN_OK);
        let mut engine = null_mut();
        let status = smolrun_open(gemma().as_ptr(), options, &mut engine);
        smolrun_options_free(options);
        assert_eq!(status, SMOLRUN_BAD_OPTION, "{}", last_error());
        assert!(engine.is_null());
    }
}

#[test]
fn tokenize_says_the_size_needed_when_the_buffer_is_too_small() {
    unsafe {
        let engine = open_gemma();
        let text = c"The three laws of robotics are";
        // The size alone: no buffer.
        let mut needed = 0usize;
        let status = smolrun_tokenize(engine, text.as_ptr(), 1, 1, null_mut(), 0, &mut needed);
        assert_eq!(status, SMOLRUN_BUFFER_TOO_SMALL);
        assert!(
            last_error().contains(&format!("room for {needed}")),
            "{}",
            last_error()
        );
        assert!(needed > 2, "{needed}");
        // One short: nothing written.
        let mut ids = vec![u32::MAX; needed];
        let mut n = 0usize;
        let status = smolrun_tokenize(
            engine,
            text.as_ptr(),
            1,
            1,
            ids.as_mut_ptr(),
            needed - 1,
            &mut n,
        );
        assert_eq!(status, SMOLRUN_BUFFER_TOO_SMALL);
        assert_eq!(n, needed);
        assert!(ids.iter().all(|&id| id == u32::MAX));
        // Exactly enough.
        let status = smolrun_tokenize(
            engine,
            text.as_ptr(),
            1,
            1,
            ids.as_mut_ptr(),
            needed,
            &mut n,
        );
        assert_eq!(status, SMOLRUN_OK);
        assert_eq!(n, needed);
        // Without BOS: the same ids after it.
        let mut plain = vec![0u32; needed];
        let status = smolrun_tokenize(
            engine,
            text.as_ptr(),
            0,
            1,
            plain.as_mut_ptr(),
            needed,
            &mut n,
        );
        assert_eq!(status, SMOLRUN_OK);
        assert_eq!(n, needed - 1);
        assert_eq!(&ids[1..], &plain[..n]);
        // The engine's own tokenizer agrees.
        let ours = Engine::open(gemma().to_str().unwrap(), &small_options())
            .unwrap()
            .tokenize(text.to_str().unwrap(), true, true);
        assert_eq!(ids, ours);
        // Text that is not UTF-8.
        let status = smolrun_tokenize(
            engine,
            c"\xff".as_ptr(),
            1,
            1,
            ids.as_mut_ptr(),
            needed,
            &mut n,
        );
        assert_eq!(status, SMOLRUN_BAD_PROMPT);
        smolrun_free(engine);
    }
}

fn small_options() -> EngineOptions {
    EngineOptions {
        n_ctx: Some(N_CTX as usize),
        threads: Some(THREADS as usize),
        ..EngineOptions::default()
    }
}

#[test]
fn greedy_text_is_what_the_engine_generates() {
    let prompt = c"The capital of France is";
    let n = 12;
    let mut engine = Engine::open(gemma().to_str().unwrap(), &small_options()).unwrap();
    let tokens = engine.tokenize(prompt.to_str().unwrap(), true, true);
    // `smolrun run --temp 0`'s sampler.
    let params = SamplerParams {
        temperature: 0.0,
        repeat_penalty: 1.0,
        ..SamplerParams::default()
    };
    let mut sampler = engine.sampler(params).unwrap();
    let options = GenerateOptions {
        max_tokens: Some(n),
        penalize_prompt: true,
        ..GenerateOptions::default()
    };
    let (_, want) = engine
        .generate(&tokens, &mut sampler, options, None, |_| {})
        .unwrap();
    drop(engine);

    let engine = open_gemma();
    let mut pieces = Pieces::default();
    let (status, result) = generate(engine, prompt, n as i32, &mut pieces);
    assert_eq!(status, SMOLRUN_OK, "{}", last_error());
    assert_eq!(pieces.text, want);
    assert_eq!(result.prompt_tokens as usize, tokens.len());
    assert_eq!(result.prompt_evaluated as usize, tokens.len());
    assert_eq!(result.generated_tokens as usize, n);
    assert_eq!(result.stop, smolrun_stop::SMOLRUN_STOP_LENGTH as i32);
    assert!(result.generated_tokens_per_second > 0.0);

    // The same prompt again: its cache is reused (only the last token runs), same text.
    let mut again = Pieces::default();
    let (status, result) = generate(engine, prompt, n as i32, &mut again);
    assert_eq!(status, SMOLRUN_OK, "{}", last_error());
    assert_eq!(again.text, want);
    assert_eq!(result.prompt_evaluated, 1);
    unsafe { smolrun_free(engine) };
}

#[test]
fn a_callback_that_returns_non_zero_stops_the_generation() {
    let engine = open_gemma();
    let mut pieces = Pieces {
        stop_after: Some(3),
        ..Pieces::default()
    };
    let (status, result) = generate(engine, c"Once upon a time", 50, &mut pieces);
    assert_eq!(status, SMOLRUN_OK, "{}", last_error());
    assert_eq!(pieces.count, 3);
    assert_eq!(pieces.after_stop, 0);
    assert_eq!(result.stop, smolrun_stop::SMOLRUN_STOP_CALLBACK as i32);
    assert_eq!(result.generated_tokens, 3);
    unsafe { smolrun_free(engine) };
}

/// An engine pointer handed to another thread (a C program does this freely).
struct SendEngine(*mut smolrun_engine);
unsafe impl Send for SendEngine {}

#[test]
fn a_cancel_from_another_thread_stops_the_generation_and_keeps_its_text() {
    let engine = open_gemma();
    // The first piece tells the canceller to go and waits until it has cancelled, so the
    // generation is stopped before its next token, whatever the threads' timing.
    let (go, wait_go) = mpsc::channel::<()>();
    let (done, wait_done) = mpsc::channel::<()>();
    let target = SendEngine(engine);
    let canceller = std::thread::spawn(move || {
        let target = target;
        wait_go.recv().unwrap();
        let status = unsafe { smolrun_cancel(target.0) };
        done.send(()).unwrap();
        status
    });
    let mut pieces = Pieces {
        on_first: Some(Box::new(move || {
            let _ = go.send(());
            let _ = wait_done.recv();
        })),
        ..Pieces::default()
    };
    let (status, result) = generate(engine, c"Once upon a time", 100, &mut pieces);
    assert_eq!(canceller.join().unwrap(), SMOLRUN_OK);
    assert_eq!(status, SMOLRUN_CANCELLED);
    assert_eq!(
        last_error(),
        "smolrun_generate: cancelled by smolrun_cancel after 1 token"
    );
    assert_eq!(result.stop, smolrun_stop::SMOLRUN_STOP_CANCELLED as i32);
    assert_eq!(result.generated_tokens, 1);
    assert_eq!(pieces.count, 1);
    assert!(!pieces.text.is_empty());

    // The request ended with that generation: the next one runs.
    let mut next = Pieces::default();
    let (status, result) = generate(engine, c"Once upon a time", 4, &mut next);
    assert_eq!(status, SMOLRUN_OK, "{}", last_error());
    assert_eq!(result.generated_tokens, 4);
    assert!(
        next.text.starts_with(&pieces.text),
        "{:?} vs {:?}",
        next.text,
        pieces.text
    );

    // A cancel while nothing runs stops the next generation before its prompt runs.
    assert_eq!(unsafe { smolrun_cancel(engine) }, SMOLRUN_OK);
    let mut none = Pieces::default();
    let (status, result) = generate(engine, c"Once upon a time", 4, &mut none);
    assert_eq!(status, SMOLRUN_CANCELLED);
    assert_eq!((result.generated_tokens, none.count), (0, 0));
    let (status, _) = generate(engine, c"Once upon a time", 4, &mut Pieces::default());
    assert_eq!(status, SMOLRUN_OK, "{}", last_error());
    unsafe { smolrun_free(engine) };
}

/// What the re-entrant callback saw: its engine and the statuses of its calls.
struct Reentrant {
    engine: *mut smolrun_engine,
    tokenize: Option<smolrun_status>,
    cancel: Option<smolrun_status>,
}

unsafe extern "C" fn call_back_in(_: *const c_char, _: usize, user_data: *mut c_void) -> c_int {
    let seen = unsafe { &mut *(user_data as *mut Reentrant) };
    let mut n = 0usize;
    seen.tokenize =
        Some(unsafe { smolrun_tokenize(seen.engine, c"x".as_ptr(), 1, 1, null_mut(), 0, &mut n) });
    seen.cancel = Some(unsafe { smolrun_cancel(seen.engine) });
    0
}

#[test]
fn a_callback_calling_its_own_engine_gets_busy_but_may_cancel() {
    let engine = open_gemma();
    let mut seen = Reentrant {
        engine,
        tokenize: None,
        cancel: None,
    };
    let status = unsafe {
        smolrun_generate(
            engine,
            c"Hello".as_ptr(),
            20,
            0.0,
            0,
            Some(call_back_in),
            (&mut seen as *mut Reentrant).cast(),
            null_mut(),
        )
    };
    assert_eq!(seen.tokenize, Some(SMOLRUN_BUSY));
    assert_eq!(seen.cancel, Some(SMOLRUN_OK));
    assert_eq!(status, SMOLRUN_CANCELLED, "{}", last_error());
    // The engine is still usable afterwards.
    let mut n = 0usize;
    let mut ids = [0u32; 8];
    let status =
        unsafe { smolrun_tokenize(engine, c"Hello".as_ptr(), 1, 1, ids.as_mut_ptr(), 8, &mut n) };
    assert_eq!(status, SMOLRUN_OK);
    unsafe { smolrun_free(engine) };
}

#[test]
fn a_prompt_that_fills_the_context_is_a_bad_prompt() {
    let engine = open_gemma();
    let long = CString::new("word ".repeat(N_CTX as usize)).unwrap();
    let (status, _) = generate(engine, &long, 4, &mut Pieces::default());
    assert_eq!(status, SMOLRUN_BAD_PROMPT);
    assert!(
        last_error().contains("the context holds 256"),
        "{}",
        last_error()
    );
    let (status, _) = generate(engine, c"\xff\xfe", 4, &mut Pieces::default());
    assert_eq!(status, SMOLRUN_BAD_PROMPT);
    assert!(last_error().contains("not UTF-8"), "{}", last_error());
    let status = unsafe {
        smolrun_generate(
            engine,
            c"Hi".as_ptr(),
            4,
            f32::NAN,
            0,
            None,
            null_mut(),
            null_mut(),
        )
    };
    assert_eq!(status, SMOLRUN_BAD_OPTION);
    unsafe { smolrun_free(engine) };
}
