//! `smolrun_engine`: one [`Engine`] behind a lock, and the flag that `smolrun_cancel` sets
//! without taking that lock. Open, tokenize, generate with a callback, cancel, free.

use crate::options::smolrun_options;
use crate::status::{boundary, smolrun_status, Failure};
use ::smolrun_engine::smolrun_core::sampler::SamplerParams;
use ::smolrun_engine::smolrun_core::tokenizer::StreamDecoder;
use ::smolrun_engine::{Engine, EngineError, EngineOptions, GenerateOptions, StopReason};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// A loaded model. Every call but `smolrun_cancel` takes `engine`'s lock; `cancel` is the
/// generation loop's interrupt flag, set from any thread.
#[allow(non_camel_case_types)]
pub struct smolrun_engine {
    engine: Mutex<Engine>,
    cancel: AtomicBool,
}

// smolrun_cancel reaches the engine from any thread while another one generates on it.
const _: () = {
    const fn shared_between_threads<T: Send + Sync>() {}
    shared_between_threads::<smolrun_engine>();
};

/// `smolrun_piece_fn` in smolrun.h.
#[allow(non_camel_case_types)]
pub type smolrun_piece_fn =
    unsafe extern "C" fn(piece: *const c_char, len: usize, user_data: *mut c_void) -> c_int;

/// `smolrun_stop` in smolrun.h.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum smolrun_stop {
    SMOLRUN_STOP_END_OF_TEXT = 0,
    SMOLRUN_STOP_LENGTH = 1,
    SMOLRUN_STOP_CONTEXT_FULL = 2,
    SMOLRUN_STOP_CALLBACK = 3,
    SMOLRUN_STOP_CANCELLED = 4,
    SMOLRUN_STOP_LOW_MEMORY = 5,
}

impl From<StopReason> for smolrun_stop {
    fn from(stop: StopReason) -> smolrun_stop {
        match stop {
            StopReason::EndOfText => smolrun_stop::SMOLRUN_STOP_END_OF_TEXT,
            StopReason::Length => smolrun_stop::SMOLRUN_STOP_LENGTH,
            StopReason::ContextFull => smolrun_stop::SMOLRUN_STOP_CONTEXT_FULL,
            StopReason::Stopped => smolrun_stop::SMOLRUN_STOP_CALLBACK,
            StopReason::Interrupted => smolrun_stop::SMOLRUN_STOP_CANCELLED,
            StopReason::LowMemory => smolrun_stop::SMOLRUN_STOP_LOW_MEMORY,
        }
    }
}

/// `smolrun_result` in smolrun.h.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct smolrun_result {
    pub prompt_tokens: u32,
    pub prompt_evaluated: u32,
    pub generated_tokens: u32,
    /// A `smolrun_stop`, as an int32_t in C.
    pub stop: i32,
    pub prompt_tokens_per_second: f64,
    pub generated_tokens_per_second: f64,
}

thread_local! {
    /// The engines this thread is inside a call of (a piece callback that calls back into its
    /// own engine would wait for a lock this thread holds: refused instead).
    static INSIDE: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// This thread is inside a call on an engine until dropped.
struct Inside(usize);

impl Inside {
    fn enter(function: &str, handle: &smolrun_engine) -> Result<Inside, Failure> {
        let key = handle as *const smolrun_engine as usize;
        INSIDE.with(|inside| {
            let mut inside = inside.borrow_mut();
            if inside.contains(&key) {
                return Err(Failure::new(
                    smolrun_status::SMOLRUN_BUSY,
                    format!(
                        "{function}: this thread is already inside a call on this engine (a \
                         piece callback may not call smolrun functions on its own engine, only \
                         smolrun_cancel); return from the callback first"
                    ),
                ));
            }
            inside.push(key);
            Ok(Inside(key))
        })
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|inside| inside.borrow_mut().retain(|&k| k != self.0));
    }
}

/// Runs `f` on the engine `handle` points to, holding its lock.
fn with_engine(
    function: &str,
    handle: *mut smolrun_engine,
    f: impl FnOnce(&smolrun_engine, &mut Engine) -> Result<(), Failure>,
) -> smolrun_status {
    boundary(function, || {
        // SAFETY: the caller passes NULL or an engine from smolrun_open that it has not freed
        // (smolrun.h); only shared references are made to it.
        let handle = unsafe { handle.as_ref() }.ok_or(Failure::null(function, "engine"))?;
        let _inside = Inside::enter(function, handle)?;
        let mut engine = handle.engine.lock().map_err(|_| {
            Failure::new(
                smolrun_status::SMOLRUN_PANIC,
                format!(
                    "{function}: an earlier call on this engine panicked and may have left it \
                     half-way; free it (smolrun_free) and open the model again"
                ),
            )
        })?;
        f(handle, &mut engine)
    })
}

/// A required C string.
///
/// # Safety
/// `text` is NULL or a NUL-terminated string that outlives `'a`.
unsafe fn required<'a>(
    function: &str,
    name: &str,
    text: *const c_char,
) -> Result<&'a CStr, Failure> {
    if text.is_null() {
        return Err(Failure::null(function, name));
    }
    // SAFETY: the caller's promise.
    Ok(unsafe { CStr::from_ptr(text) })
}

/// Opens a model (smolrun.h).
///
/// # Safety
/// `model` is NULL or a NUL-terminated string; `options` is NULL or came from
/// smolrun_options_new; `engine` is NULL or points to writable memory for a pointer.
#[no_mangle]
pub unsafe extern "C" fn smolrun_open(
    model: *const c_char,
    options: *const smolrun_options,
    engine: *mut *mut smolrun_engine,
) -> smolrun_status {
    let function = "smolrun_open";
    boundary(function, || {
        if engine.is_null() {
            return Err(Failure::null(function, "engine"));
        }
        // SAFETY: checked above; the caller's promise.
        unsafe { engine.write(std::ptr::null_mut()) };
        // SAFETY: the caller's promise.
        let model = unsafe { required(function, "model", model) }?;
        let model = model.to_str().map_err(|_| {
            Failure::new(
                smolrun_status::SMOLRUN_MODEL_NOT_FOUND,
                format!(
                    "{function}: the model path {} is not UTF-8: rename the file or open it by a \
                     UTF-8 path",
                    model.to_string_lossy()
                ),
            )
        })?;
        // SAFETY: the caller's promise.
        let options = match unsafe { options.as_ref() } {
            Some(o) => o.engine_options(),
            None => EngineOptions::default(),
        };
        let opened = Engine::open(model, &options)?;
        let handle = Box::new(smolrun_engine {
            engine: Mutex::new(opened),
            cancel: AtomicBool::new(false),
        });
        // SAFETY: checked above.
        unsafe { engine.write(Box::into_raw(handle)) };
        Ok(())
    })
}

/// Frees an engine; NULL is ignored.
///
/// # Safety
/// `engine` is NULL or came from smolrun_open; no call on it is running or starts after this.
#[no_mangle]
pub unsafe extern "C" fn smolrun_free(engine: *mut smolrun_engine) {
    boundary("smolrun_free", || {
        if !engine.is_null() {
            // SAFETY: the caller's promise. Dropping the engine writes the pager's warm list.
            drop(unsafe { Box::from_raw(engine) });
        }
        Ok(())
    });
}

/// Token ids of a text (smolrun.h).
///
/// # Safety
/// `engine` is NULL or came from smolrun_open; `text` is NULL or a NUL-terminated string;
/// `tokens` is NULL or points to `capacity` writable ids; `n_tokens` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn smolrun_tokenize(
    engine: *mut smolrun_engine,
    text: *const c_char,
    add_special: c_int,
    parse_special: c_int,
    tokens: *mut u32,
    capacity: usize,
    n_tokens: *mut usize,
) -> smolrun_status {
    let function = "smolrun_tokenize";
    with_engine(function, engine, |_, engine| {
        if n_tokens.is_null() {
            return Err(Failure::null(function, "n_tokens"));
        }
        if tokens.is_null() && capacity > 0 {
            return Err(Failure::null(function, "tokens (with a capacity above 0)"));
        }
        // SAFETY: the caller's promise.
        let text = unsafe { required(function, "text", text) }?;
        let text = text.to_str().map_err(|e| {
            Failure::new(
                smolrun_status::SMOLRUN_BAD_PROMPT,
                format!("{function}: the text is not UTF-8 ({e})"),
            )
        })?;
        let ids = engine.tokenize(text, add_special != 0, parse_special != 0);
        // SAFETY: checked above; the caller's promise.
        unsafe { n_tokens.write(ids.len()) };
        if ids.len() > capacity {
            return Err(Failure::new(
                smolrun_status::SMOLRUN_BUFFER_TOO_SMALL,
                format!(
                    "{function}: the text is {} tokens but the array holds {capacity}: call again \
                     with room for {} (written to *n_tokens)",
                    ids.len(),
                    ids.len()
                ),
            ));
        }
        if !ids.is_empty() {
            // SAFETY: `tokens` has room for `capacity` >= ids.len() ids (the caller's promise).
            unsafe { std::ptr::copy_nonoverlapping(ids.as_ptr(), tokens, ids.len()) };
        }
        Ok(())
    })
}

/// `smolrun run`'s sampling at `temperature` (its `--temp`, `-s`): greedy at 0 or below.
fn sampling(temperature: f32, seed: u64) -> SamplerParams {
    let greedy = temperature <= 0.0;
    SamplerParams {
        temperature: temperature.max(0.0),
        repeat_penalty: if greedy { 1.0 } else { 1.15 },
        seed,
        ..SamplerParams::default()
    }
}

/// Clears the cancel request when a generation returns, however it returns.
struct ClearCancel<'a>(&'a AtomicBool);

impl Drop for ClearCancel<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// Generates text after a prompt (smolrun.h).
///
/// # Safety
/// `engine` is NULL or came from smolrun_open; `prompt` is NULL or a NUL-terminated string;
/// `on_piece` is NULL or a function that returns normally (never unwinds); `result` is NULL or
/// writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn smolrun_generate(
    engine: *mut smolrun_engine,
    prompt: *const c_char,
    max_tokens: i32,
    temperature: f32,
    seed: u64,
    on_piece: Option<smolrun_piece_fn>,
    user_data: *mut c_void,
    result: *mut smolrun_result,
) -> smolrun_status {
    let function = "smolrun_generate";
    with_engine(function, engine, |handle, engine| {
        let _clear = ClearCancel(&handle.cancel);
        // SAFETY: the caller's promise.
        let prompt = unsafe { required(function, "prompt", prompt) }?;
        let prompt = prompt.to_str().map_err(|e| {
            Failure::new(
                smolrun_status::SMOLRUN_BAD_PROMPT,
                format!("{function}: the prompt is not UTF-8 ({e})"),
            )
        })?;
        if temperature.is_nan() {
            return Err(EngineError::BadOption {
                option: "temperature",
                message: format!("{function}: the temperature is NaN: give 0 (greedy) or more"),
            }
            .into());
        }
        let tokens = engine.tokenize(prompt, true, true);
        if tokens.len() >= engine.n_ctx() {
            // As `smolrun run`: a prompt that fills the context leaves no room to generate.
            return Err(EngineError::BadPrompt {
                tokens: tokens.len(),
                n_ctx: engine.n_ctx(),
                message: format!(
                    "{function}: the prompt is {} tokens but the context holds {}, which leaves \
                     no room to generate: shorten the prompt or raise the context \
                     (smolrun_options_set_context; this model was trained on up to {} tokens)",
                    tokens.len(),
                    engine.n_ctx(),
                    engine.model.hp.n_ctx_train
                ),
            }
            .into());
        }
        let mut sampler = engine.sampler(sampling(temperature, seed))?;
        let options = GenerateOptions {
            max_tokens: usize::try_from(max_tokens).ok(),
            interrupt: Some(&handle.cancel),
            penalize_prompt: true,
            ..GenerateOptions::default()
        };
        // Pieces of text as `Engine::generate` makes them (whole UTF-8 characters), handed to
        // the callback, which may stop the loop.
        let mut decoder = StreamDecoder::new();
        let mut piece = String::with_capacity(64);
        let deliver = |piece: &str| -> ControlFlow<()> {
            match on_piece {
                // SAFETY: the caller's promise: a valid function that returns normally; the
                // piece outlives the call.
                Some(f) if !piece.is_empty() => {
                    match unsafe { f(piece.as_ptr().cast(), piece.len(), user_data) } {
                        0 => ControlFlow::Continue(()),
                        _ => ControlFlow::Break(()),
                    }
                }
                _ => ControlFlow::Continue(()),
            }
        };
        let generation = if handle.cancel.load(Ordering::Relaxed) {
            // Cancelled before it started: not even the prompt runs.
            None
        } else {
            Some(
                engine.generate_with(&tokens, &mut sampler, options, None, &mut |step| {
                    piece.clear();
                    decoder.push(step.tokenizer, step.token(), &mut piece);
                    deliver(&piece)
                })?,
            )
        };
        let stop = generation
            .as_ref()
            .map_or(StopReason::Interrupted, |g| g.stop);
        if stop != StopReason::Stopped {
            // An unfinished character at the end (U+FFFD), as `smolrun run` prints it; not
            // after the callback asked to stop.
            piece.clear();
            decoder.finish(&mut piece);
            let _ = deliver(&piece);
        }
        if !result.is_null() {
            let as_u32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
            let filled = smolrun_result {
                prompt_tokens: as_u32(tokens.len()),
                prompt_evaluated: as_u32(generation.as_ref().map_or(0, |g| g.prompt_evaluated)),
                generated_tokens: as_u32(generation.as_ref().map_or(0, |g| g.tokens.len())),
                stop: smolrun_stop::from(stop) as i32,
                prompt_tokens_per_second: generation.as_ref().map_or(0.0, |g| g.prompt_tok_s()),
                generated_tokens_per_second: generation.as_ref().map_or(0.0, |g| g.gen_tok_s()),
            };
            // SAFETY: the caller's promise.
            unsafe { result.write(filled) };
        }
        let generated = generation.as_ref().map_or(0, |g| g.tokens.len());
        match stop {
            StopReason::Interrupted => Err(Failure::new(
                smolrun_status::SMOLRUN_CANCELLED,
                format!(
                    "{function}: cancelled by smolrun_cancel after {generated} token{}",
                    if generated == 1 { "" } else { "s" }
                ),
            )),
            StopReason::LowMemory => Err(EngineError::LowMemory {
                message: engine
                    .low_memory_message()
                    .unwrap_or("less memory left than the floor")
                    .to_string(),
            }
            .into()),
            _ => Ok(()),
        }
    })
}

/// Stops the running generation, or the next one (smolrun.h). Takes no lock: callable from
/// any thread, and from the piece callback.
///
/// # Safety
/// `engine` is NULL or came from smolrun_open and is not freed before this returns.
#[no_mangle]
pub unsafe extern "C" fn smolrun_cancel(engine: *mut smolrun_engine) -> smolrun_status {
    let function = "smolrun_cancel";
    boundary(function, || {
        // SAFETY: the caller's promise.
        let handle = unsafe { engine.as_ref() }.ok_or(Failure::null(function, "engine"))?;
        handle.cancel.store(true, Ordering::Relaxed);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::smolrun_last_error;
    use crate::status::smolrun_status::*;
    use std::ptr::null_mut;

    fn last_error() -> String {
        unsafe { CStr::from_ptr(smolrun_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_inside_a_call_is_a_status_and_the_engine_refuses_further_calls() {
        let path = smolrun_tests::model_path("gemma3-270m");
        let path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        let mut engine = null_mut();
        unsafe {
            let options = crate::options::smolrun_options_new();
            crate::options::smolrun_options_set_context(options, 128);
            crate::options::smolrun_options_set_threads(options, 1);
            assert_eq!(
                smolrun_open(path.as_ptr(), options, &mut engine),
                SMOLRUN_OK
            );
            crate::options::smolrun_options_free(options);
        }
        // A panic while the engine is locked, as one in the forward pass would be.
        let status = with_engine("smolrun_test", engine, |_, _| panic!("boom in the engine"));
        assert_eq!(status, SMOLRUN_PANIC);
        assert!(
            last_error().starts_with("smolrun_test: smolrun panicked: boom in the engine"),
            "{}",
            last_error()
        );
        // The engine may be half-way through something: every call that needs it says so.
        let status = unsafe {
            smolrun_generate(
                engine,
                c"Hi".as_ptr(),
                2,
                0.0,
                0,
                None,
                null_mut(),
                null_mut(),
            )
        };
        assert_eq!(status, SMOLRUN_PANIC);
        assert!(
            last_error().contains("an earlier call on this engine panicked"),
            "{}",
            last_error()
        );
        let mut n = 0;
        let status =
            unsafe { smolrun_tokenize(engine, c"Hi".as_ptr(), 1, 1, null_mut(), 0, &mut n) };
        assert_eq!(status, SMOLRUN_PANIC);
        // Cancelling and freeing still work.
        assert_eq!(unsafe { smolrun_cancel(engine) }, SMOLRUN_OK);
        unsafe { smolrun_free(engine) };
    }
}
