//! What every function of the C ABI returns, the last error as text, and the boundary that
//! turns a Rust panic into a status instead of letting it unwind into C.

use ::smolrun_engine::EngineError;
use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// `smolrun_status` in smolrun.h. The error kinds mirror [`EngineError::kind`].
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum smolrun_status {
    SMOLRUN_OK = 0,
    SMOLRUN_MODEL_NOT_FOUND = 1,
    SMOLRUN_BAD_FILE = 2,
    SMOLRUN_DOES_NOT_FIT = 3,
    SMOLRUN_BAD_OPTION = 4,
    SMOLRUN_BAD_PROMPT = 5,
    SMOLRUN_READ = 6,
    SMOLRUN_MODEL = 7,
    SMOLRUN_LOW_MEMORY = 8,
    SMOLRUN_CANCELLED = 9,
    SMOLRUN_SYSTEM = 10,
    SMOLRUN_NULL_ARGUMENT = 11,
    SMOLRUN_PANIC = 12,
    SMOLRUN_BUFFER_TOO_SMALL = 13,
    SMOLRUN_BUSY = 14,
}

use smolrun_status::*;

/// Every status, in the order of its value (the test of smolrun.h compares them with the
/// header's).
pub const ALL_STATUSES: [smolrun_status; 15] = [
    SMOLRUN_OK,
    SMOLRUN_MODEL_NOT_FOUND,
    SMOLRUN_BAD_FILE,
    SMOLRUN_DOES_NOT_FIT,
    SMOLRUN_BAD_OPTION,
    SMOLRUN_BAD_PROMPT,
    SMOLRUN_READ,
    SMOLRUN_MODEL,
    SMOLRUN_LOW_MEMORY,
    SMOLRUN_CANCELLED,
    SMOLRUN_SYSTEM,
    SMOLRUN_NULL_ARGUMENT,
    SMOLRUN_PANIC,
    SMOLRUN_BUFFER_TOO_SMALL,
    SMOLRUN_BUSY,
];

impl smolrun_status {
    /// The short name: the engine's `EngineError::kind()` for its kinds.
    pub fn name(self) -> &'static CStr {
        match self {
            SMOLRUN_OK => c"ok",
            SMOLRUN_MODEL_NOT_FOUND => c"model-not-found",
            SMOLRUN_BAD_FILE => c"bad-file",
            SMOLRUN_DOES_NOT_FIT => c"does-not-fit",
            SMOLRUN_BAD_OPTION => c"bad-option",
            SMOLRUN_BAD_PROMPT => c"bad-prompt",
            SMOLRUN_READ => c"read",
            SMOLRUN_MODEL => c"model",
            SMOLRUN_LOW_MEMORY => c"low-memory",
            SMOLRUN_CANCELLED => c"cancelled",
            SMOLRUN_SYSTEM => c"system",
            SMOLRUN_NULL_ARGUMENT => c"null-argument",
            SMOLRUN_PANIC => c"panic",
            SMOLRUN_BUFFER_TOO_SMALL => c"buffer-too-small",
            SMOLRUN_BUSY => c"busy",
        }
    }

    fn of_kind(e: &EngineError) -> smolrun_status {
        // By kind name rather than by variant: EngineError is #[non_exhaustive], and a kind
        // added to the engine must show up here as a test failure, not as a silent default.
        match e.kind() {
            "model-not-found" => SMOLRUN_MODEL_NOT_FOUND,
            "bad-file" => SMOLRUN_BAD_FILE,
            "does-not-fit" => SMOLRUN_DOES_NOT_FIT,
            "bad-option" => SMOLRUN_BAD_OPTION,
            "bad-prompt" => SMOLRUN_BAD_PROMPT,
            "read" => SMOLRUN_READ,
            "model" => SMOLRUN_MODEL,
            "low-memory" => SMOLRUN_LOW_MEMORY,
            "cancelled" => SMOLRUN_CANCELLED,
            "system" => SMOLRUN_SYSTEM,
            // A kind this crate does not know yet: still an error, never SMOLRUN_OK.
            _ => SMOLRUN_SYSTEM,
        }
    }
}

/// A failed call: its status and the message smolrun_last_error() returns.
#[derive(Debug)]
pub struct Failure {
    pub status: smolrun_status,
    pub message: String,
}

impl Failure {
    pub fn new(status: smolrun_status, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
        }
    }

    /// A required pointer that was NULL: names the function and the argument.
    pub fn null(function: &str, argument: &str) -> Failure {
        Failure::new(
            SMOLRUN_NULL_ARGUMENT,
            format!("{function}: `{argument}` is NULL; pass a valid pointer"),
        )
    }
}

impl From<EngineError> for Failure {
    fn from(e: EngineError) -> Failure {
        Failure::new(smolrun_status::of_kind(&e), e.message())
    }
}

thread_local! {
    /// The message of the last failed call on this thread (smolrun_last_error).
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // A NUL inside a message would cut it short in C: show it instead.
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|last| *last.borrow_mut() = text);
}

/// The panic's message, as `panic!` wrote it.
fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

/// Runs the body of an exported function: its error becomes the status and the last error,
/// and a panic is caught here, never unwinding into the C caller (unwinding out of an
/// `extern "C"` function would abort the host process).
pub fn boundary(function: &str, body: impl FnOnce() -> Result<(), Failure>) -> smolrun_status {
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return SMOLRUN_OK,
        Ok(Err(failure)) => failure,
        Err(payload) => Failure::new(
            SMOLRUN_PANIC,
            format!(
                "{function}: smolrun panicked: {} (a bug in smolrun: please report it with this \
                 message; free this engine and open the model again)",
                panic_message(payload.as_ref())
            ),
        ),
    };
    set_last_error(&failure.message);
    failure.status
}

/// The short name of a status (smolrun.h).
#[no_mangle]
pub extern "C" fn smolrun_status_name(status: c_int) -> *const c_char {
    let name = usize::try_from(status)
        .ok()
        .and_then(|i| ALL_STATUSES.get(i))
        .map_or(c"unknown", |s| s.name());
    name.as_ptr()
}

/// The message of the last failed call on this thread (smolrun.h).
#[no_mangle]
pub extern "C" fn smolrun_last_error() -> *const c_char {
    // The CString lives in this thread's slot until the next failed call replaces it; the
    // header says so. A thread being torn down has no slot: "" then.
    LAST_ERROR
        .try_with(|last| last.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_numbered_in_order_and_named_like_engine_kinds() {
        for (i, s) in ALL_STATUSES.iter().enumerate() {
            assert_eq!(*s as usize, i);
            let name = unsafe { CStr::from_ptr(smolrun_status_name(i as c_int)) };
            assert_eq!(name, s.name());
        }
        let unknown = unsafe { CStr::from_ptr(smolrun_status_name(-1)) };
        assert_eq!(unknown, c"unknown");
        let unknown = unsafe { CStr::from_ptr(smolrun_status_name(ALL_STATUSES.len() as c_int)) };
        assert_eq!(unknown, c"unknown");
    }

    #[test]
    fn every_engine_error_kind_has_its_own_status() {
        let errors = [
            EngineError::ModelNotFound {
                model: "m".into(),
                message: "m".into(),
            },
            EngineError::BadFile {
                path: "p".into(),
                message: "m".into(),
            },
            EngineError::DoesNotFit {
                path: "p".into(),
                needed: 2,
                allowed: 1,
                message: "m".into(),
            },
            EngineError::BadOption {
                option: "o",
                message: "m".into(),
            },
            EngineError::BadPrompt {
                tokens: 0,
                n_ctx: 1,
                message: "m".into(),
            },
            EngineError::Read {
                path: "p".into(),
                tensor: None,
                message: "m".into(),
            },
            EngineError::Model {
                path: "p".into(),
                message: "m".into(),
            },
            EngineError::LowMemory {
                message: "m".into(),
            },
            EngineError::Cancelled,
            EngineError::System {
                message: "m".into(),
            },
        ];
        for e in &errors {
            let status = smolrun_status::of_kind(e);
            assert_eq!(status.name().to_str().unwrap(), e.kind(), "{e:?}");
        }
    }

    #[test]
    fn a_panic_becomes_a_status_and_a_message() {
        let status = boundary("smolrun_test", || panic!("the {} went wrong", "thing"));
        assert_eq!(status, SMOLRUN_PANIC);
        let message = unsafe { CStr::from_ptr(smolrun_last_error()) };
        let message = message.to_str().unwrap();
        assert!(message.starts_with("smolrun_test: smolrun panicked: the thing went wrong"));
        // A later success leaves the message; a later failure replaces it.
        assert_eq!(boundary("smolrun_test", || Ok(())), SMOLRUN_OK);
        assert_eq!(
            boundary("smolrun_test", || Err(Failure::null("smolrun_test", "x"))),
            SMOLRUN_NULL_ARGUMENT
        );
        let message = unsafe { CStr::from_ptr(smolrun_last_error()) };
        assert_eq!(message, c"smolrun_test: `x` is NULL; pass a valid pointer");
    }

    #[test]
    fn the_last_error_is_per_thread() {
        boundary("smolrun_test", || Err(Failure::new(SMOLRUN_SYSTEM, "here")));
        std::thread::spawn(|| {
            let message = unsafe { CStr::from_ptr(smolrun_last_error()) };
            assert_eq!(message, c"");
        })
        .join()
        .unwrap();
        let message = unsafe { CStr::from_ptr(smolrun_last_error()) };
        assert_eq!(message, c"here");
    }
}
