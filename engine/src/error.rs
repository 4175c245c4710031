//! What can go wrong for a caller of the engine, by kind, so that a program can tell a model
//! that does not fit from a bad prompt. Every variant carries the whole message a user should
//! read (the file, the tensor or the parameter, the expected and the found value, and what to
//! do next); `Display` prints it as it is.

use std::fmt;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum EngineError {
    /// No such model: not a file, not in the model folder, not a known short name.
    ModelNotFound { model: String, message: String },
    /// The file is not a GGUF model this engine runs: a damaged or hostile header, an unknown
    /// architecture or tensor type, a weight with a non-finite scale.
    BadFile { path: PathBuf, message: String },
    /// The model does not fit in the memory (or address space) this run may use: `needed` and
    /// `allowed` bytes, and the plan by part in the message.
    DoesNotFit {
        path: PathBuf,
        needed: u64,
        allowed: u64,
        message: String,
    },
    /// An option has a value it cannot take (a context of 0 tokens, a context longer than the
    /// model was trained on, 40 draft tokens per pass, 0 threads...).
    BadOption {
        option: &'static str,
        message: String,
    },
    /// The prompt cannot run: empty, or longer than the context.
    BadPrompt {
        tokens: usize,
        n_ctx: usize,
        message: String,
    },
    /// Reading the model file failed; `tensor` names the weight being read, if one was.
    Read {
        path: PathBuf,
        tensor: Option<String>,
        message: String,
    },
    /// The forward pass failed or gave non-finite logits (a damaged file).
    Model { path: PathBuf, message: String },
    /// Generation stopped: less memory left than the floor (or more held than the budget).
    LowMemory { message: String },
    /// The caller cancelled the generation.
    Cancelled,
    /// The operating system refused something the engine needs (threads, a folder).
    System { message: String },
}

impl EngineError {
    /// The message a user should read.
    pub fn message(&self) -> &str {
        match self {
            EngineError::ModelNotFound { message, .. }
            | EngineError::BadFile { message, .. }
            | EngineError::DoesNotFit { message, .. }
            | EngineError::BadOption { message, .. }
            | EngineError::BadPrompt { message, .. }
            | EngineError::Read { message, .. }
            | EngineError::Model { message, .. }
            | EngineError::LowMemory { message }
            | EngineError::System { message } => message,
            EngineError::Cancelled => "cancelled",
        }
    }

    /// A stable short name of the kind, for logs, JSON and the C ABI.
    pub fn kind(&self) -> &'static str {
        match self {
            EngineError::ModelNotFound { .. } => "model-not-found",
            EngineError::BadFile { .. } => "bad-file",
            EngineError::DoesNotFit { .. } => "does-not-fit",
            EngineError::BadOption { .. } => "bad-option",
            EngineError::BadPrompt { .. } => "bad-prompt",
            EngineError::Read { .. } => "read",
            EngineError::Model { .. } => "model",
            EngineError::LowMemory { .. } => "low-memory",
            EngineError::Cancelled => "cancelled",
            EngineError::System { .. } => "system",
        }
    }

    pub(crate) fn bad_file(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        EngineError::BadFile {
            path: path.into(),
            message: message.into(),
        }
    }

    pub(crate) fn model(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        EngineError::Model {
            path: path.into(),
            message: message.into(),
        }
    }

    pub(crate) fn system(message: impl Into<String>) -> Self {
        EngineError::System {
            message: message.into(),
        }
    }

    pub(crate) fn option(option: &'static str, message: impl Into<String>) -> Self {
        EngineError::BadOption {
            option,
            message: message.into(),
        }
    }

    pub(crate) fn read(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        EngineError::Read {
            path: path.into(),
            tensor: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for EngineError {}

/// The CLI's commands and the server's errors are text; this keeps `?` working there.
impl From<EngineError> for String {
    fn from(e: EngineError) -> String {
        e.message().to_string()
    }
}
