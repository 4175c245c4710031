//! `smolrun_options`: an [`EngineOptions`] behind a pointer, filled in by setters, so that a
//! field added to the engine's options is a new function here and never changes a struct
//! layout a C program was compiled against.

use crate::status::{boundary, smolrun_status, Failure};
use ::smolrun_engine::{CacheDir, DraftChoice, EngineOptions, KernelChoice, MoePool, WeightsMode};
use std::ffi::{c_char, c_int, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// What smolrun_open reads: the engine's options and the repack cache's two settings, which
/// the engine keeps as one value ([`CacheDir`]) and the C ABI sets separately.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Default)]
pub struct smolrun_options {
    engine: EngineOptions,
    cache_dir: Option<PathBuf>,
    cache_off: bool,
}

impl smolrun_options {
    /// The engine's options as set.
    pub fn engine_options(&self) -> EngineOptions {
        let mut options = self.engine.clone();
        options.repack.cache_dir = match (&self.cache_dir, self.cache_off) {
            (_, true) => CacheDir::Off,
            (Some(dir), false) => CacheDir::In(dir.clone()),
            (None, false) => CacheDir::NextToModel,
        };
        options
    }
}

/// `smolrun_weights` in smolrun.h.
const WEIGHTS: [WeightsMode; 4] = [
    WeightsMode::Auto,
    WeightsMode::Resident,
    WeightsMode::Stream,
    WeightsMode::Pread,
];

/// `SMOLRUN_MOE_POOL_AUTO` and `SMOLRUN_MOE_POOL_ALL` in smolrun.h.
const MOE_POOL_AUTO: i32 = 0;
const MOE_POOL_ALL: i32 = -1;

fn bad_option(function: &str, message: impl std::fmt::Display) -> Failure {
    Failure::new(
        smolrun_status::SMOLRUN_BAD_OPTION,
        format!("{function}: {message}"),
    )
}

/// Runs a setter on the options `options` points to.
fn set(
    function: &str,
    options: *mut smolrun_options,
    f: impl FnOnce(&mut smolrun_options) -> Result<(), Failure>,
) -> smolrun_status {
    boundary(function, || {
        // SAFETY: the caller passes NULL or options from smolrun_options_new, not in use by
        // another thread (smolrun.h).
        let options = unsafe { options.as_mut() }.ok_or(Failure::null(function, "options"))?;
        f(options)
    })
}

/// A folder given as a C string: any bytes the OS takes, not only UTF-8. NULL: `None`.
///
/// # Safety
/// `dir` is NULL or a NUL-terminated string.
unsafe fn folder(dir: *const c_char) -> Option<PathBuf> {
    if dir.is_null() {
        return None;
    }
    // SAFETY: the caller's promise.
    let bytes = unsafe { CStr::from_ptr(dir) }.to_bytes();
    Some(PathBuf::from(OsStr::from_bytes(bytes)))
}

/// The defaults (smolrun.h). NULL when out of memory or on a panic.
#[no_mangle]
pub extern "C" fn smolrun_options_new() -> *mut smolrun_options {
    let mut made = std::ptr::null_mut();
    boundary("smolrun_options_new", || {
        made = Box::into_raw(Box::default());
        Ok(())
    });
    made
}

/// Frees options; NULL is ignored.
///
/// # Safety
/// `options` is NULL or came from smolrun_options_new and is not used after this.
#[no_mangle]
pub unsafe extern "C" fn smolrun_options_free(options: *mut smolrun_options) {
    boundary("smolrun_options_free", || {
        if !options.is_null() {
            // SAFETY: the caller's promise.
            drop(unsafe { Box::from_raw(options) });
        }
        Ok(())
    });
}

/// # Safety
/// `options` is NULL or came from smolrun_options_new.
#[no_mangle]
pub unsafe extern "C" fn smolrun_options_set_context(
    options: *mut smolrun_options,
    n_ctx: u32,
) -> smolrun_status {
    set("smolrun_options_set_context", options, |o| {
        o.engine.n_ctx = (n_ctx > 0).then_some(n_ctx as usize);
        Ok(())
    })
}

/// # Safety
/// `options` is NULL or came from smolrun_options_new.
#[no_mangle]
pub unsafe extern "C" fn smolrun_options_set_threads(
    options: *mut smolrun_options,
    threads: u32,
) -> smolrun_status {
    set("smolrun_options_set_threads", options, |o| {
        o.engine.threads = (threads > 0).then_some(threads as usize);
        Ok(())
    })
}

/// # Safety
/// `options` is NULL or came from smolrun_options_new.
#[no_mangle]
pub unsafe extern "C" fn smolrun_options_set_weights(
    options: *mut smolrun_options,
    weights: c_int,
) -> smolrun_status {
    let function = "smolrun_options_set_weights";
    set(function, options, |o| {
        let mode = usize::try_from(weights)
            .ok()
            .and_then(|i| WEIGHTS.get(i))
            .ok_or_else(|| {
                bad_option(
                    function,
                    format!(
                        "weights mode {weights} is none of SMOLRUN_WEIGHTS_AUTO (0), _RESIDENT \
                         (1), _STREAM (2), _PREAD (3)"
                    ),
                )
            })?;
        o.engine.weights = *mode;
        Ok(())
    })
}

/// # Safety
/// `options` is NULL or came from smolrun_options_new.
#[no_mangle]
pub unsafe extern "C" fn smolrun_options_set_memory_budget(
    options: *mut smolrun_options,
    bytes: u64,
) -> smolrun_status {
    set("smolrun_options_set_memory_budget", options, |o| {
        o.engine.memory.budget = (bytes > 0).then_some(bytes);
        Ok(())
    })
}

/// # Safety
/// `options` is NULL or came from smolrun_options_new.
#[no_mangle]
pub unsafe extern "C" fn smolrun_options_set_no_guard(
    options: *mut smolrun_options,
    no_guard: c_int,
) -> smolrun_status {
    set("smolrun_options_set_no_guard", options, |o| {
        o.engine.memory.no_guard = no_guard != 0;
        Ok(())
    })
}

/// # Safety
/// `options` is NULL or came from smolrun_options_new.
#[no_mangle]
pub unsafe extern "C" fn smolrun_options_set_state_f16(
    options: *mut smolrun_options,
    state_f16: c_int,
) -> smolrun_status {
    set("smolrun_options_set_state_f16", options, |o| {
        o.engine.state_f16 = state_f16 != 0;
        Ok(())
    })
}

/// # Safety
/// `options` is NULL or came from smolrun_options_new.
#[no_mangle]
pub unsafe extern "C" fn smolrun_options_set_moe_pool(
    options: *mut smolrun_options,
    slots: i32,
) -> smolrun_status {
    let function = "smolrun_options_set_moe_pool";
    set(function, options, |o| {
        o.engine.pager.pool = match slots {
            MOE_POOL_AUTO => None,
            MOE_POOL_ALL => Some(MoePool::All),
            n if n > 0 => Some(MoePool::Slots(n as usize)),
            n => {
                return Err(bad_option(
                    function,
                    format!(
                        "{n} expert slots: give a number above 0, SMOLRUN_MOE_POOL_AUTO (0) or \
                         SMOLRUN_MOE_POOL_ALL (-1)"
                    ),
                ))
            }
        };
        Ok(())
    })
}

/// # Safety
/// `options` is NULL or came from smolrun_options_new.
#[no_mangle]
pub unsafe extern "C" fn smolrun_options_set_moe_cache_bias(
    options: *mut smolrun_options,
    bias: f32,
) -> smolrun_status {
    let function = "smolrun_options_set_moe_cache_bias";
    set(function, options, |o| {
        if !bias.is_finite() {
            return Err(bad_option(
                function,
                format!("a cache bias of {bias}: give a finite number (0: off)"),
            ));
        }
        o.engine.pager.cache_bias = bias;
        Ok(())
    })
}

/// # Safety
/// `options` is NULL or came from smolrun_options_new; `draft` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn smolrun_options_set_draft(
    options: *mut smolrun_options,
    draft: *const c_char,
    max_tokens: u32,
) -> smolrun_status {
    let function = "smolrun_options_set_draft";
    set(function, options, |o| {
        if draft.is_null() {
            return Err(Failure::null(function, "draft"));
        }
        // SAFETY: the caller's promise.
        let text = unsafe { CStr::from_ptr(draft) }.to_str().map_err(|_| {
            bad_option(
                function,
                "the draft is not UTF-8: give \"off\", \"ngram\", \"mtp\", \"auto\" or a model \
                 path in UTF-8",
            )
        })?;
        o.engine.draft.choice = DraftChoice::parse(text);
        o.engine.draft.max = (max_tokens > 0).then_some(max_tokens as usize);
        Ok(())
    })
}

/// # Safety
/// `options` is NULL or came from smolrun_options_new.
#[no_mangle]
pub unsafe extern "C" fn smolrun_options_set_scalar_kernels(
    options: *mut smolrun_options,
    scalar: c_int,
) -> smolrun_status {
    set("smolrun_options_set_scalar_kernels", options, |o| {
        o.engine.kernels = if scalar != 0 {
            KernelChoice::Scalar
        } else {
            KernelChoice::Best
        };
        Ok(())
    })
}

/// # Safety
/// `options` is NULL or came from smolrun_options_new; `dir` is NULL or a NUL-terminated
/// string.
#[no_mangle]
pub unsafe extern "C" fn smolrun_options_set_repack_cache_dir(
    options: *mut smolrun_options,
    dir: *const c_char,
) -> smolrun_status {
    set("smolrun_options_set_repack_cache_dir", options, |o| {
        // SAFETY: the caller's promise.
        o.cache_dir = unsafe { folder(dir) };
        Ok(())
    })
}

/// # Safety
/// `options` is NULL or came from smolrun_options_new.
#[no_mangle]
pub unsafe extern "C" fn smolrun_options_set_repack_cache_off(
    options: *mut smolrun_options,
    off: c_int,
) -> smolrun_status {
    set("smolrun_options_set_repack_cache_off", options, |o| {
        o.cache_off = off != 0;
        Ok(())
    })
}

/// # Safety
/// `options` is NULL or came from smolrun_options_new; `dir` is NULL or a NUL-terminated
/// string.
#[no_mangle]
pub unsafe extern "C" fn smolrun_options_set_models_dir(
    options: *mut smolrun_options,
    dir: *const c_char,
) -> smolrun_status {
    set("smolrun_options_set_models_dir", options, |o| {
        // SAFETY: the caller's promise.
        o.engine.models_dir = unsafe { folder(dir) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::smolrun_status::*;

    #[test]
    fn setters_reach_the_engine_options() {
        let o = smolrun_options_new();
        unsafe {
            assert_eq!(smolrun_options_set_context(o, 512), SMOLRUN_OK);
            assert_eq!(smolrun_options_set_threads(o, 3), SMOLRUN_OK);
            assert_eq!(smolrun_options_set_weights(o, 2), SMOLRUN_OK);
            assert_eq!(smolrun_options_set_memory_budget(o, 800 << 20), SMOLRUN_OK);
            assert_eq!(smolrun_options_set_no_guard(o, 1), SMOLRUN_OK);
            assert_eq!(smolrun_options_set_state_f16(o, 1), SMOLRUN_OK);
            assert_eq!(smolrun_options_set_moe_pool(o, 6), SMOLRUN_OK);
            assert_eq!(smolrun_options_set_moe_cache_bias(o, 0.5), SMOLRUN_OK);
            assert_eq!(
                smolrun_options_set_draft(o, c"ngram".as_ptr(), 5),
                SMOLRUN_OK
            );
            assert_eq!(smolrun_options_set_scalar_kernels(o, 1), SMOLRUN_OK);
            assert_eq!(
                smolrun_options_set_repack_cache_dir(o, c"/tmp/cache".as_ptr()),
                SMOLRUN_OK
            );
            assert_eq!(
                smolrun_options_set_models_dir(o, c"/tmp/models".as_ptr()),
                SMOLRUN_OK
            );
            let e = (*o).engine_options();
            assert_eq!(e.n_ctx, Some(512));
            assert_eq!(e.threads, Some(3));
            assert_eq!(e.weights, WeightsMode::Stream);
            assert_eq!(e.memory.budget, Some(800 << 20));
            assert!(e.memory.no_guard);
            assert!(e.state_f16);
            assert_eq!(e.pager.pool, Some(MoePool::Slots(6)));
            assert_eq!(e.pager.cache_bias, 0.5);
            assert_eq!(e.draft.choice, DraftChoice::Ngram);
            assert_eq!(e.draft.max, Some(5));
            assert_eq!(e.kernels, KernelChoice::Scalar);
            assert_eq!(e.repack.cache_dir, CacheDir::In("/tmp/cache".into()));
            assert_eq!(e.models_dir, Some("/tmp/models".into()));
            // Off wins over a folder; 0 and NULL go back to the defaults.
            assert_eq!(smolrun_options_set_repack_cache_off(o, 1), SMOLRUN_OK);
            assert_eq!((*o).engine_options().repack.cache_dir, CacheDir::Off);
            assert_eq!(smolrun_options_set_repack_cache_off(o, 0), SMOLRUN_OK);
            assert_eq!(
                smolrun_options_set_repack_cache_dir(o, std::ptr::null()),
                SMOLRUN_OK
            );
            assert_eq!(smolrun_options_set_context(o, 0), SMOLRUN_OK);
            assert_eq!(smolrun_options_set_moe_pool(o, -1), SMOLRUN_OK);
            let e = (*o).engine_options();
            assert_eq!(e.repack.cache_dir, CacheDir::NextToModel);
            assert_eq!(e.n_ctx, None);
            assert_eq!(e.pager.pool, Some(MoePool::All));
            smolrun_options_free(o);
        }
    }

    #[test]
    fn bad_values_are_refused_and_leave_the_options_as_they_were() {
        let o = smolrun_options_new();
        unsafe {
            assert_eq!(smolrun_options_set_weights(o, 4), SMOLRUN_BAD_OPTION);
            assert_eq!(smolrun_options_set_weights(o, -1), SMOLRUN_BAD_OPTION);
            assert_eq!(smolrun_options_set_moe_pool(o, -2), SMOLRUN_BAD_OPTION);
            assert_eq!(
                smolrun_options_set_moe_cache_bias(o, f32::NAN),
                SMOLRUN_BAD_OPTION
            );
            assert_eq!(
                smolrun_options_set_moe_cache_bias(o, f32::INFINITY),
                SMOLRUN_BAD_OPTION
            );
            let not_utf8 = [0xffu8, 0xfe, 0];
            assert_eq!(
                smolrun_options_set_draft(o, not_utf8.as_ptr().cast(), 0),
                SMOLRUN_BAD_OPTION
            );
            let message = CStr::from_ptr(crate::status::smolrun_last_error());
            assert!(
                message.to_str().unwrap().contains("not UTF-8"),
                "{message:?}"
            );
            let e = (*o).engine_options();
            let d = EngineOptions::default();
            assert_eq!(e.weights, d.weights);
            assert_eq!(e.pager, d.pager);
            assert_eq!(e.draft, d.draft);
            smolrun_options_free(o);
        }
    }

    #[test]
    fn null_options_are_refused() {
        unsafe {
            let null = std::ptr::null_mut();
            assert_eq!(smolrun_options_set_context(null, 1), SMOLRUN_NULL_ARGUMENT);
            assert_eq!(smolrun_options_set_weights(null, 0), SMOLRUN_NULL_ARGUMENT);
            assert_eq!(
                smolrun_options_set_models_dir(null, c"x".as_ptr()),
                SMOLRUN_NULL_ARGUMENT
            );
            let o = smolrun_options_new();
            assert_eq!(
                smolrun_options_set_draft(o, std::ptr::null(), 0),
                SMOLRUN_NULL_ARGUMENT
            );
            smolrun_options_free(o);
            smolrun_options_free(null);
        }
    }
}
