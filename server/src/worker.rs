//! The one generation worker: a thread that owns the backend and runs one job at a time.
//!
//! HTTP handlers put jobs into a bounded queue and read the job's events from a channel. The
//! worker turns tokens into sendable text (UTF-8 and stop-string hold-back, `text.rs`) right
//! where they are sampled, so a stop string or a spent token budget ends generation at that
//! token. A client that went away has dropped its receiver: the next send fails and the
//! worker stops at that token; a job whose client left while it was queued is skipped.

use super::backend::{
    Backend, ChatMessage, Constraint, Control, Finish, ModelDetails, SamplingParams, TokenEvent,
};
use super::models::{KeepAlive, ModelsDir, DEFAULT_KEEP_ALIVE};
use super::text::TextStream;
use smolrun_engine::conversation;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self as std_mpsc, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;

pub enum Prompt {
    /// Rendered through the chat template, ending with the assistant's turn; `tools` (OpenAI's
    /// list) go to the template as Hugging Face passes them.
    Chat {
        messages: Vec<ChatMessage>,
        tools: Option<serde_json::Value>,
    },
    Text(String),
    Tokens(Vec<u32>),
}

pub struct Job {
    pub prompt: Prompt,
    pub params: SamplingParams,
    /// None: until end-of-generation or a full context.
    pub max_tokens: Option<usize>,
    pub stop: Vec<String>,
    /// A grammar the answer must follow (response_format, tool calls).
    pub constraint: Option<Constraint>,
    /// Tokens at the start of the prompt that a context shift keeps (llama-server's `n_keep`,
    /// ollama's `num_keep`; -1: the whole prompt). None: a chat's system prompt, else none.
    pub n_keep: Option<i64>,
    /// Which model, by the request's name (a folder's model with `--models-dir`; ignored
    /// without one), and how long it stays loaded after (ollama's `keep_alive`).
    pub model: Option<String>,
    pub keep_alive: Option<KeepAlive>,
    pub events: UnboundedSender<Event>,
}

/// One input of an embedding request.
pub enum EmbedInput {
    Text(String),
    Tokens(Vec<u32>),
}

/// Embed each input in turn, each on a fresh cache.
pub struct EmbedJob {
    pub inputs: Vec<EmbedInput>,
    /// Cut an input longer than the context to the context's length instead of refusing it.
    pub truncate: bool,
    pub model: Option<String>,
    pub keep_alive: Option<KeepAlive>,
    pub reply: oneshot::Sender<Result<Embeddings, JobError>>,
}

/// Load a model without generating (ollama's request with no prompt), or with a `keep_alive`
/// of 0 unload it.
pub struct LoadJob {
    pub model: Option<String>,
    pub keep_alive: Option<KeepAlive>,
    /// Whether the model is loaded once the job is done.
    pub reply: oneshot::Sender<Result<bool, JobError>>,
}

/// llama-server's `/slots/0?action=...`: save the cache to a file, restore it, or erase it.
pub struct SlotJob {
    pub action: SlotAction,
    pub reply: oneshot::Sender<Result<SlotDone, JobError>>,
}

pub enum SlotAction {
    Save(std::path::PathBuf),
    Restore(std::path::PathBuf),
    Erase,
}

/// Tokens and bytes a slot action moved, and how long it took.
pub struct SlotDone {
    pub tokens: usize,
    pub bytes: u64,
    pub ms: f64,
}

/// Delete a folder's model file (unloading it first when it is the one loaded).
pub struct DeleteJob {
    pub model: String,
    pub reply: oneshot::Sender<Result<(), JobError>>,
}

pub struct Embeddings {
    /// One unit-length vector per input, in order.
    pub vectors: Vec<Vec<f32>>,
    /// Tokens over all inputs.
    pub prompt_tokens: usize,
}

/// What the queue carries: a generation, a batch of embeddings, a load or unload, a delete.
pub enum Work {
    Generate(Box<Job>),
    Embed(EmbedJob),
    Load(LoadJob),
    Delete(DeleteJob),
    Slot(SlotJob),
}

impl Work {
    /// The model the work names, and how long it should stay loaded after.
    fn model(&self) -> (Option<&str>, Option<KeepAlive>) {
        match self {
            Work::Generate(j) => (j.model.as_deref(), j.keep_alive),
            Work::Embed(j) => (j.model.as_deref(), j.keep_alive),
            Work::Load(j) => (j.model.as_deref(), j.keep_alive),
            Work::Delete(j) => (Some(&j.model), None),
            // The loaded model's cache, whichever it is.
            Work::Slot(_) => (None, None),
        }
    }

    /// The client left while the work waited.
    fn abandoned(&self) -> bool {
        match self {
            Work::Generate(j) => j.events.is_closed(),
            Work::Embed(j) => j.reply.is_closed(),
            Work::Load(j) => j.reply.is_closed(),
            Work::Delete(_) | Work::Slot(_) => false,
        }
    }

    /// Answers the work with an error instead of running it.
    fn fail(self, e: JobError) {
        match self {
            Work::Generate(j) => {
                let _ = j.events.send(Event::Failed(e));
            }
            Work::Embed(j) => {
                let _ = j.reply.send(Err(e));
            }
            Work::Load(j) => {
                let _ = j.reply.send(Err(e));
            }
            Work::Delete(j) => {
                let _ = j.reply.send(Err(e));
            }
            Work::Slot(j) => {
                let _ = j.reply.send(Err(e));
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// End-of-generation token or a stop string.
    Stop,
    /// max_tokens reached or the context is full.
    Length,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Summary {
    pub finish_reason: FinishReason,
    /// What left the context: old turns before the prompt ran, tokens shifted out after.
    pub dropped: Dropped,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// From the start of the job to the first generated token (prompt evaluation).
    pub prompt_ms: f64,
    /// From the first to the last generated token.
    pub generation_ms: f64,
}

impl Summary {
    /// Decoding speed: tokens after the first over the time they took.
    pub fn tokens_per_second(&self) -> Option<f64> {
        (self.completion_tokens > 1 && self.generation_ms > 0.0)
            .then(|| (self.completion_tokens - 1) as f64 * 1000.0 / self.generation_ms)
    }
}

/// What a conversation longer than the context lost (reported in the answer's `dropped`
/// field and the `X-Context-Dropped-*` headers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// The oldest messages left out of the prompt (whole turns; system messages stay).
    pub messages: usize,
    /// How many tokens shorter that made the prompt.
    pub prompt_tokens: usize,
    /// Tokens the context shift dropped while the answer was generated.
    pub shifted_tokens: usize,
}

impl Dropped {
    pub fn any(&self) -> bool {
        *self != Dropped::default()
    }

    /// The answer's `dropped` field.
    pub fn to_json(self) -> serde_json::Value {
        serde_json::json!({
            "messages": self.messages,
            "prompt_tokens": self.prompt_tokens,
            "shifted_tokens": self.shifted_tokens,
        })
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum JobError {
    /// The chat template or tokenizer rejected the prompt (the client's fault: 400).
    BadPrompt(String),
    PromptTooLong {
        prompt_tokens: usize,
        n_ctx: usize,
    },
    /// An embedding input longer than the context (400).
    InputTooLong {
        index: usize,
        tokens: usize,
        n_ctx: usize,
    },
    /// The engine failed (500).
    Engine(String),
    /// No model of that name in `--models-dir` (404).
    ModelNotFound(String),
    /// The model could not be loaded (500), or deleted.
    Load(String),
    /// A slot save or restore failed (400: a file of another model, a damaged one).
    Slot(String),
}

pub enum Event {
    /// The job left the queue and its prompt is tokenized; nothing was generated yet.
    Started {
        prompt_tokens: usize,
        /// Old turns left out so that the prompt fits (`shifted_tokens` is 0 here).
        dropped: Dropped,
    },
    /// Text that became final, with the tokens it completes (see `text::Released`).
    Piece {
        text: String,
        tokens: Vec<TokenEvent>,
    },
    Done(Summary),
    Failed(JobError),
}

/// What the backend said about itself once loaded.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    pub name: String,
    pub n_ctx: usize,
    pub n_threads: usize,
    pub details: ModelDetails,
}

/// Live counters for the status endpoint, written by the worker and the queue.
#[derive(Default)]
pub struct Status {
    pub busy: AtomicBool,
    pub queued: AtomicUsize,
    /// Tokens in the context of the current (or last) job: prompt plus generated.
    pub ctx_used: AtomicUsize,
    /// f32 bits of the decoding speed of the last finished job.
    last_tokens_per_second: AtomicU32,
    pub jobs_done: AtomicU64,
    pub tokens_generated: AtomicU64,
}

impl Status {
    pub fn last_tokens_per_second(&self) -> f32 {
        f32::from_bits(self.last_tokens_per_second.load(Ordering::Relaxed))
    }
}

pub struct QueueFull;

/// The model the worker holds, as the handlers see it.
#[derive(Clone, Debug)]
pub struct Resident {
    /// The loaded model, or the last one when none is (keep_alive ran out).
    pub info: ModelInfo,
    pub loaded: bool,
    /// When it will be unloaded for being idle; None: never.
    pub expires: Option<SystemTime>,
}

/// Loads a model by name.
pub type LoadFn = Box<dyn FnMut(&str) -> Result<Box<dyn Backend>, String> + Send>;

/// Where the worker's models come from.
pub struct Loader {
    /// Loads a model by name: a folder's model, or with no folder the one model.
    pub load: LoadFn,
    /// The model loaded at start, and the one a request that names none gets.
    pub default: String,
    /// `--models-dir`: the folder requests name other models from, each loaded in turn and
    /// unloaded after its keep_alive. None: one model, whatever a request names, for good.
    pub models_dir: Option<ModelsDir>,
}

/// The handlers' side of the worker: submit jobs, read the model's info and the live status.
pub struct WorkerHandle {
    queue: SyncSender<Work>,
    pub capacity: usize,
    resident: Arc<Mutex<Resident>>,
    pub models_dir: Option<ModelsDir>,
    pub status: Arc<Status>,
}

impl WorkerHandle {
    /// The loaded model's info (or the last one's).
    pub fn info(&self) -> ModelInfo {
        self.resident().info
    }

    pub fn resident(&self) -> Resident {
        self.resident
            .lock()
            .map_or_else(|e| e.into_inner().clone(), |r| r.clone())
    }

    /// Queue a load or unload (refused like `submit` when the queue is full).
    pub fn submit_load(&self, job: LoadJob) -> Result<(), QueueFull> {
        self.submit_work(Work::Load(job))
    }

    /// Queue a slot save, restore or erase (refused like `submit` when the queue is full).
    pub fn submit_slot(&self, job: SlotJob) -> Result<(), QueueFull> {
        self.submit_work(Work::Slot(job))
    }

    /// Queue a delete (refused like `submit` when the queue is full).
    pub fn submit_delete(&self, job: DeleteJob) -> Result<(), QueueFull> {
        self.submit_work(Work::Delete(job))
    }

    /// Queue a job, or refuse it at once when `capacity` jobs are already waiting.
    pub fn submit(&self, job: Job) -> Result<(), QueueFull> {
        self.submit_work(Work::Generate(Box::new(job)))
    }

    /// Queue an embedding job, refused like `submit` when the queue is full.
    pub fn submit_embed(&self, job: EmbedJob) -> Result<(), QueueFull> {
        self.submit_work(Work::Embed(job))
    }

    fn submit_work(&self, work: Work) -> Result<(), QueueFull> {
        self.status.queued.fetch_add(1, Ordering::SeqCst);
        match self.queue.try_send(work) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.status.queued.fetch_sub(1, Ordering::SeqCst);
                Err(QueueFull)
            }
        }
    }
}

/// Start the worker thread, load the default model on it, and return once it is loaded (or
/// with the loading error). `queue_capacity` jobs may wait while one runs; `context_shift`:
/// see `run_job`.
pub fn start(
    loader: Loader,
    queue_capacity: usize,
    context_shift: bool,
) -> Result<WorkerHandle, String> {
    let (queue, jobs) = std_mpsc::sync_channel::<Work>(queue_capacity);
    let (loaded_tx, loaded_rx) = std_mpsc::channel::<Result<Arc<Mutex<Resident>>, String>>();
    let status = Arc::new(Status::default());
    let worker_status = status.clone();
    let models_dir = loader.models_dir.clone();
    std::thread::Builder::new()
        .name("smolrun-generate".into())
        .spawn(move || {
            let mut models = Models::new(loader);
            let first = models.default.clone();
            let resident = match models.switch_to(&first) {
                Ok(()) => models.resident.clone(),
                Err(e) => {
                    let _ = loaded_tx.send(Err(e));
                    return;
                }
            };
            let _ = loaded_tx.send(Ok(resident));
            models.serve(jobs, &worker_status, context_shift);
        })
        .map_err(|e| format!("cannot start the generation thread: {e}"))?;
    let resident = loaded_rx
        .recv()
        .map_err(|_| "the generation thread died while loading the model".to_string())??;
    Ok(WorkerHandle {
        queue,
        capacity: queue_capacity,
        resident,
        models_dir,
        status,
    })
}

/// The worker's side of the models: the one loaded, the loader, when to unload.
struct Models {
    load: LoadFn,
    default: String,
    models_dir: Option<ModelsDir>,
    /// The loaded model's name and backend.
    current: Option<(String, Box<dyn Backend>)>,
    /// When the loaded model is unloaded for being idle.
    deadline: Option<Instant>,
    resident: Arc<Mutex<Resident>>,
}

impl Models {
    fn new(loader: Loader) -> Models {
        let info = ModelInfo {
            name: loader.default.clone(),
            n_ctx: 0,
            n_threads: 0,
            details: ModelDetails::default(),
        };
        Models {
            load: loader.load,
            default: loader.default,
            models_dir: loader.models_dir,
            current: None,
            deadline: None,
            resident: Arc::new(Mutex::new(Resident {
                info,
                loaded: false,
                expires: None,
            })),
        }
    }

    fn set_resident(&self, f: impl FnOnce(&mut Resident)) {
        let mut r = self.resident.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut r);
    }

    /// Unloads the model (its memory is given back before another loads).
    fn unload(&mut self) {
        self.current = None;
        self.deadline = None;
        self.set_resident(|r| {
            r.loaded = false;
            r.expires = None;
        });
    }

    /// Makes `name` the loaded model: the current one is unloaded first, so that one model at
    /// a time is in memory and the new one's load sees the whole budget.
    fn switch_to(&mut self, name: &str) -> Result<(), String> {
        if self.current.as_ref().is_some_and(|(n, _)| n == name) {
            return Ok(());
        }
        self.unload();
        let backend = (self.load)(name)?;
        let info = ModelInfo {
            name: backend.model_name().to_string(),
            n_ctx: backend.n_ctx(),
            n_threads: backend.n_threads(),
            details: backend.details(),
        };
        self.current = Some((name.to_string(), backend));
        self.set_resident(|r| {
            r.info = info;
            r.loaded = true;
        });
        Ok(())
    }

    /// The model a request's name stands for: a folder's model by name (an unknown one is
    /// an error), else the loaded model, else the default.
    fn resolve(&self, named: Option<&str>) -> Result<String, JobError> {
        match (&self.models_dir, named.filter(|n| !n.is_empty())) {
            (Some(dir), Some(name)) => dir.find(name).map(|m| m.name).ok_or_else(|| {
                JobError::ModelNotFound(format!(
                    "model '{name}' not found in {}: the models are {}",
                    dir.dir.display(),
                    dir.list()
                        .iter()
                        .map(|m| m.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            }),
            _ => Ok(self
                .current
                .as_ref()
                .map_or_else(|| self.default.clone(), |(n, _)| n.clone())),
        }
    }

    /// After a request: a folder's model stays loaded for its keep_alive (five minutes by
    /// default, 0 unloads at once, -1 for good); the one model of a server without a folder
    /// stays for good.
    fn keep(&mut self, keep_alive: Option<KeepAlive>) {
        if self.models_dir.is_none() || self.current.is_none() {
            return;
        }
        match keep_alive.unwrap_or(DEFAULT_KEEP_ALIVE) {
            KeepAlive::For(d) if d.is_zero() => self.unload(),
            KeepAlive::For(d) => {
                self.deadline = Some(Instant::now() + d);
                self.set_resident(|r| r.expires = Some(SystemTime::now() + d));
            }
            KeepAlive::Forever => {
                self.deadline = None;
                self.set_resident(|r| r.expires = None);
            }
        }
    }

    /// Sets the expiry /api/ps reports for a keep_alive that does not unload at once.
    fn announce(&self, keep_alive: Option<KeepAlive>) {
        if self.models_dir.is_none() {
            return;
        }
        match keep_alive.unwrap_or(DEFAULT_KEEP_ALIVE) {
            KeepAlive::For(d) if d.is_zero() => {}
            KeepAlive::For(d) => self.set_resident(|r| r.expires = Some(SystemTime::now() + d)),
            KeepAlive::Forever => self.set_resident(|r| r.expires = None),
        }
    }

    /// Runs the queue's work until every sender is gone.
    fn serve(&mut self, jobs: std_mpsc::Receiver<Work>, status: &Status, context_shift: bool) {
        loop {
            let work = match self.deadline {
                Some(t) => match jobs.recv_timeout(t.saturating_duration_since(Instant::now())) {
                    Ok(w) => w,
                    Err(RecvTimeoutError::Timeout) => {
                        self.unload();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => return,
                },
                None => match jobs.recv() {
                    Ok(w) => w,
                    Err(_) => return,
                },
            };
            status.queued.fetch_sub(1, Ordering::SeqCst);
            // Skip a job whose client left while it was waiting.
            if work.abandoned() {
                continue;
            }
            status.busy.store(true, Ordering::SeqCst);
            self.run(work, status, context_shift);
            status.busy.store(false, Ordering::SeqCst);
        }
    }

    fn is_loaded(&self, name: &str) -> bool {
        self.current.as_ref().is_some_and(|(n, _)| n == name)
    }

    fn run(&mut self, work: Work, status: &Status, context_shift: bool) {
        let (named, keep_alive) = work.model();
        let name = match self.resolve(named) {
            Ok(n) => n,
            Err(e) => return work.fail(e),
        };
        let unload = keep_alive == Some(KeepAlive::For(std::time::Duration::ZERO));
        let work = match work {
            Work::Delete(job) => return self.delete(&name, job),
            // Unloading a model that is not loaded: nothing to load first.
            Work::Load(job) if unload && !self.is_loaded(&name) => {
                let _ = job.reply.send(Ok(false));
                return;
            }
            w => w,
        };
        if let Err(e) = self.switch_to(&name) {
            return work.fail(JobError::Load(e));
        }
        // /api/ps shows the expiry this request asked for while it runs (the timer itself
        // starts when it ends).
        self.announce(keep_alive);
        let Some((_, backend)) = self.current.as_mut() else {
            return work.fail(JobError::Load("no model is loaded".into()));
        };
        match work {
            Work::Generate(job) => run_job(backend.as_mut(), *job, status, context_shift),
            Work::Embed(job) => {
                let result = run_embed(backend.as_mut(), job.inputs, job.truncate, status);
                let _ = job.reply.send(result);
            }
            Work::Load(job) => {
                self.keep(keep_alive);
                let _ = job.reply.send(Ok(self.current.is_some()));
                return;
            }
            Work::Slot(job) => {
                let t0 = Instant::now();
                let done = match &job.action {
                    SlotAction::Save(path) => backend.save_cache(path),
                    SlotAction::Restore(path) => backend.restore_cache(path),
                    SlotAction::Erase => Ok((backend.erase_cache(), 0)),
                };
                let done = done.map(|(tokens, bytes)| SlotDone {
                    tokens,
                    bytes,
                    ms: t0.elapsed().as_secs_f64() * 1000.0,
                });
                let _ = job.reply.send(done.map_err(JobError::Slot));
                return;
            }
            Work::Delete(_) => {}
        }
        self.keep(keep_alive);
    }

    /// Deletes a folder's model file, unloading it first if it is the loaded one.
    fn delete(&mut self, name: &str, job: DeleteJob) {
        let Some(found) = self.models_dir.as_ref().and_then(|d| d.find(name)) else {
            let _ = job.reply.send(Err(JobError::ModelNotFound(format!(
                "model '{name}' not found: only a model of --models-dir can be deleted"
            ))));
            return;
        };
        if self.current.as_ref().is_some_and(|(n, _)| *n == found.name) {
            self.unload();
        }
        let result = std::fs::remove_file(&found.path)
            .map_err(|e| JobError::Load(format!("cannot delete {}: {e}", found.path.display())));
        let _ = job.reply.send(result);
    }
}

/// A prompt ready to run: its tokens, what a context shift keeps, what was left out.
struct PromptPlan {
    tokens: Vec<u32>,
    /// The system prompt's tokens for a chat (a context shift keeps them), else 0.
    n_system: usize,
    dropped: Dropped,
}

/// Tokenizes the prompt. A chat that does not fit loses its oldest turns (ollama's way; the
/// system messages and the newest turn stay, see `conversation::fit`); a text or token prompt
/// that does not fit, or a chat whose newest turn alone does not, is refused.
fn prompt_tokens(backend: &dyn Backend, prompt: Prompt) -> Result<PromptPlan, JobError> {
    let n_ctx = backend.n_ctx();
    let (tokens, n_system, dropped) = match prompt {
        Prompt::Chat { messages, tools } => {
            let roles: Vec<&str> = messages.iter().map(|m| m.role.as_str()).collect();
            let (n_sys, _) = conversation::turn_starts(roles.iter().copied());
            let render = |range: std::ops::Range<usize>| {
                let mut kept = messages[..n_sys].to_vec();
                kept.extend_from_slice(&messages[range]);
                let text = backend
                    .render_chat(&kept, tools.as_ref(), true)
                    .map_err(JobError::BadPrompt)?;
                backend.tokenize(&text).map_err(JobError::BadPrompt)
            };
            let fitted = conversation::fit(&roles, n_ctx, render)?.map_err(|too_long| {
                JobError::PromptTooLong {
                    prompt_tokens: too_long.tokens,
                    n_ctx,
                }
            })?;
            let n_system = match n_sys {
                0 => 0,
                _ => {
                    let text = backend
                        .render_chat(&messages[..n_sys], tools.as_ref(), false)
                        .map_err(JobError::BadPrompt)?;
                    let system = backend.tokenize(&text).map_err(JobError::BadPrompt)?;
                    conversation::system_prefix(&system, &fitted.tokens)
                }
            };
            let dropped = Dropped {
                messages: fitted.dropped_messages,
                prompt_tokens: fitted.dropped_tokens,
                shifted_tokens: 0,
            };
            (fitted.tokens, n_system, dropped)
        }
        Prompt::Text(text) => (
            backend.tokenize(&text).map_err(JobError::BadPrompt)?,
            0,
            Dropped::default(),
        ),
        Prompt::Tokens(tokens) => (tokens, 0, Dropped::default()),
    };
    if tokens.is_empty() {
        return Err(JobError::BadPrompt("the prompt is empty".into()));
    }
    // At least one position must stay free for the first generated token.
    if tokens.len() >= n_ctx {
        return Err(JobError::PromptTooLong {
            prompt_tokens: tokens.len(),
            n_ctx,
        });
    }
    Ok(PromptPlan {
        tokens,
        n_system,
        dropped,
    })
}

/// Tokenize and embed every input, one after another, each on a fresh cache. An input longer
/// than the context is refused before anything runs (embeddings need no room for an answer,
/// so a context-long input fits).
fn run_embed(
    backend: &mut dyn Backend,
    inputs: Vec<EmbedInput>,
    truncate: bool,
    status: &Status,
) -> Result<Embeddings, JobError> {
    let mut token_lists = Vec::with_capacity(inputs.len());
    for (i, input) in inputs.into_iter().enumerate() {
        let mut tokens = match input {
            EmbedInput::Text(text) => backend.tokenize(&text).map_err(JobError::BadPrompt)?,
            EmbedInput::Tokens(tokens) => tokens,
        };
        if tokens.is_empty() {
            return Err(JobError::BadPrompt(format!("input {i} is empty")));
        }
        if truncate {
            tokens.truncate(backend.n_ctx());
        }
        if tokens.len() > backend.n_ctx() {
            return Err(JobError::InputTooLong {
                index: i,
                tokens: tokens.len(),
                n_ctx: backend.n_ctx(),
            });
        }
        token_lists.push(tokens);
    }
    let mut vectors = Vec::with_capacity(token_lists.len());
    for tokens in &token_lists {
        status.ctx_used.store(tokens.len(), Ordering::Relaxed);
        vectors.push(backend.embed(tokens).map_err(JobError::Engine)?);
    }
    status.jobs_done.fetch_add(1, Ordering::Relaxed);
    Ok(Embeddings {
        vectors,
        prompt_tokens: token_lists.iter().map(Vec::len).sum(),
    })
}

/// Why the callback told the backend to stop.
#[derive(Clone, Copy, PartialEq)]
enum StopCause {
    None,
    StopString,
    Budget,
    ClientGone,
}

/// Contexts' worth of tokens an answer without `max_tokens` may run to when it shifts.
const UNBUDGETED_CONTEXTS: usize = 4;

/// Runs one job. `context_shift`: a context that fills while the answer is generated drops
/// half of what follows the kept tokens and goes on (llama.cpp's context shift) instead of
/// ending the answer.
fn run_job(backend: &mut dyn Backend, job: Job, status: &Status, context_shift: bool) {
    let started = Instant::now();
    let events = job.events;
    let plan = match prompt_tokens(backend, job.prompt) {
        Ok(p) => p,
        Err(e) => {
            let _ = events.send(Event::Failed(e));
            return;
        }
    };
    let prompt = plan.tokens;
    let n_prompt = prompt.len();
    let n_ctx = backend.n_ctx();
    let n_keep = match job.n_keep {
        Some(n) if n < 0 => n_prompt,
        Some(n) => n as usize,
        None => plan.n_system,
    };
    let shift_keep = context_shift.then_some(n_keep);
    // An answer with no budget that shifts could go on for ever (a model that never says its
    // end-of-turn): as Ollama does, it stops at a few contexts' worth.
    let max_tokens = match (job.max_tokens, shift_keep) {
        (None, Some(_)) => Some(UNBUDGETED_CONTEXTS * n_ctx),
        (max, _) => max,
    };
    status.ctx_used.store(n_prompt, Ordering::Relaxed);
    if events
        .send(Event::Started {
            prompt_tokens: n_prompt,
            dropped: plan.dropped,
        })
        .is_err()
    {
        return;
    }

    let mut text = TextStream::new(&job.stop);
    let mut n_generated = 0usize;
    let mut first_token_at = None;
    let mut last_token_at = started;
    let mut cause = StopCause::None;
    let constraint = job.constraint.as_ref();
    let result = backend.generate(
        &prompt,
        &job.params,
        constraint,
        shift_keep,
        plan.n_system,
        &mut |token: TokenEvent| {
            let now = Instant::now();
            first_token_at.get_or_insert(now);
            last_token_at = now;
            n_generated += 1;
            status
                .ctx_used
                .store((n_prompt + n_generated).min(n_ctx), Ordering::Relaxed);
            let bytes = token.bytes.clone();
            let released = text.push(token, &bytes);
            let stopped = released.stopped;
            if !released.is_empty() {
                let piece = Event::Piece {
                    text: released.text,
                    tokens: released.tokens,
                };
                if events.send(piece).is_err() {
                    cause = StopCause::ClientGone;
                    return Control::Stop;
                }
            }
            if stopped {
                cause = StopCause::StopString;
                return Control::Stop;
            }
            if max_tokens.is_some_and(|max| n_generated >= max) {
                cause = StopCause::Budget;
                return Control::Stop;
            }
            // A client that left between tokens is noticed here even when this token released
            // no text (held back), so it never costs more than one token.
            if events.is_closed() {
                cause = StopCause::ClientGone;
                return Control::Stop;
            }
            Control::Continue
        },
    );
    status
        .tokens_generated
        .fetch_add(n_generated as u64, Ordering::Relaxed);
    status.jobs_done.fetch_add(1, Ordering::Relaxed);

    let generated = match result {
        Err(e) => {
            let _ = events.send(Event::Failed(JobError::Engine(e)));
            return;
        }
        Ok(g) => g,
    };
    let finish_reason = match generated.finish {
        Finish::EndOfGeneration => FinishReason::Stop,
        Finish::ContextFull => FinishReason::Length,
        Finish::Stopped => match cause {
            StopCause::ClientGone => return,
            StopCause::StopString => FinishReason::Stop,
            // A backend that stops on its own after Stop was never asked for is treated as
            // having run out of room.
            StopCause::Budget | StopCause::None => FinishReason::Length,
        },
    };
    let rest = text.finish();
    if !rest.is_empty() {
        let _ = events.send(Event::Piece {
            text: rest.text,
            tokens: rest.tokens,
        });
    }
    let first = first_token_at.unwrap_or(last_token_at);
    let summary = Summary {
        finish_reason,
        dropped: Dropped {
            shifted_tokens: generated.shifted_out,
            ..plan.dropped
        },
        prompt_tokens: n_prompt,
        completion_tokens: n_generated,
        prompt_ms: (first - started).as_secs_f64() * 1000.0,
        generation_ms: (last_token_at - first).as_secs_f64() * 1000.0,
    };
    if let Some(tps) = summary.tokens_per_second() {
        status
            .last_tokens_per_second
            .store((tps as f32).to_bits(), Ordering::Relaxed);
    }
    let _ = events.send(Event::Done(summary));
}

/// Collect a whole job (non-streaming answers): the text, the tokens and how it ended.
pub struct Collected {
    pub text: String,
    pub tokens: Vec<TokenEvent>,
    pub summary: Summary,
}

/// Read events after `Started` until the job is done.
pub async fn collect(events: &mut UnboundedReceiver<Event>) -> Result<Collected, JobError> {
    let mut text = String::new();
    let mut tokens = Vec::new();
    while let Some(event) = events.recv().await {
        match event {
            Event::Started { .. } => {}
            Event::Piece { text: t, tokens: k } => {
                text.push_str(&t);
                tokens.extend(k);
            }
            Event::Done(summary) => {
                return Ok(Collected {
                    text,
                    tokens,
                    summary,
                })
            }
            Event::Failed(e) => return Err(e),
        }
    }
    Err(JobError::Engine(
        "the generation thread stopped without finishing the job".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeBackend;
    use std::time::Duration;
    use tokio::sync::mpsc::unbounded_channel;

    /// Run one job on the fake model; return the text it sent and how it ended.
    fn run(
        text: &str,
        max_tokens: Option<usize>,
        stop: &[&str],
        n_ctx: usize,
    ) -> (String, Result<Summary, JobError>) {
        run_prompt(Prompt::Text(text.into()), max_tokens, stop, n_ctx, false)
    }

    fn run_prompt(
        prompt: Prompt,
        max_tokens: Option<usize>,
        stop: &[&str],
        n_ctx: usize,
        context_shift: bool,
    ) -> (String, Result<Summary, JobError>) {
        let mut fake = FakeBackend::new(n_ctx, Duration::ZERO);
        let status = Status::default();
        let (tx, mut rx) = unbounded_channel();
        let job = Job {
            prompt,
            params: SamplingParams::default(),
            max_tokens,
            stop: stop.iter().map(|s| s.to_string()).collect(),
            constraint: None,
            n_keep: None,
            model: None,
            keep_alive: None,
            events: tx,
        };
        run_job(&mut fake, job, &status, context_shift);
        let mut out = String::new();
        let mut started_with = None;
        while let Ok(event) = rx.try_recv() {
            match event {
                Event::Started { dropped, .. } => started_with = Some(dropped),
                Event::Piece { text, .. } => out.push_str(&text),
                Event::Done(s) => {
                    // What the headers said is what the answer says.
                    let started = started_with.expect("Started came first");
                    assert_eq!(started.messages, s.dropped.messages);
                    assert_eq!(started.prompt_tokens, s.dropped.prompt_tokens);
                    return (out, Ok(s));
                }
                Event::Failed(e) => return (out, Err(e)),
            }
        }
        panic!("the job ended without Done or Failed; text so far {out:?}")
    }

    /// A system prompt, then `turns` questions with their answers, then a last question.
    fn long_chat(turns: usize) -> Prompt {
        let mut messages = vec![ChatMessage::text("system", "be brief")];
        for i in 0..turns {
            messages.push(ChatMessage::text("user", &format!("question {i}")));
            messages.push(ChatMessage::text("assistant", &format!("answer {i}")));
        }
        messages.push(ChatMessage::text("user", "last question"));
        Prompt::Chat {
            messages,
            tools: None,
        }
    }

    #[test]
    fn a_chat_longer_than_the_context_loses_its_oldest_turns_and_says_so() {
        // 40 turns of ~11 tokens each do not fit 128 tokens.
        let (text, s) = run_prompt(long_chat(40), None, &[], 128, false);
        let s = s.unwrap();
        // The newest question is what is answered (until the context fills: ollama too keeps
        // only the prompt's room in mind).
        assert!(
            text.len() > 6 && "echo: last question".starts_with(&text),
            "{text}"
        );
        assert!(
            s.dropped.messages >= 2 && s.dropped.messages % 2 == 0,
            "{s:?}"
        );
        assert!(s.dropped.prompt_tokens > 0 && s.prompt_tokens < 128);
        // One turn fewer dropped would not have fitted: the cut is as late as it can be.
        assert!(s.prompt_tokens + 11 >= 128, "{s:?}");
        // The same chat with room for it loses nothing.
        let (_, s) = run_prompt(long_chat(40), None, &[], 4096, false);
        assert!(!s.unwrap().dropped.any());
    }

    #[test]
    fn a_newest_turn_longer_than_the_context_is_still_refused() {
        let messages = vec![
            ChatMessage::text("system", "be brief"),
            ChatMessage::text("user", &"x".repeat(300)),
        ];
        let prompt = Prompt::Chat {
            messages,
            tools: None,
        };
        let (_, s) = run_prompt(prompt, None, &[], 64, true);
        assert!(matches!(s, Err(JobError::PromptTooLong { n_ctx: 64, .. })));
    }

    #[test]
    fn an_unbudgeted_answer_that_shifts_stops_at_four_contexts() {
        let (_, s) = run_prompt(Prompt::Text("[loop]".into()), None, &[], 40, true);
        let s = s.unwrap();
        assert_eq!(s.completion_tokens, 160);
        assert_eq!(s.finish_reason, FinishReason::Length);
    }

    #[test]
    fn a_full_context_shifts_and_the_answer_goes_on() {
        // Off: the answer ends when the context is full (finish_reason length).
        let (_, s) = run_prompt(Prompt::Text("[loop]".into()), Some(60), &[], 40, false);
        let s = s.unwrap();
        assert_eq!(s.prompt_tokens + s.completion_tokens, 40);
        assert_eq!(s.dropped.shifted_tokens, 0);
        // On: it runs to its budget, and the answer says how much was shifted out.
        let prompt = Prompt::Text("[loop]".into());
        let (_, s) = run_prompt(prompt, Some(60), &[], 40, true);
        let s = s.unwrap();
        assert_eq!(s.completion_tokens, 60);
        assert!(
            s.dropped.shifted_tokens > 0 && s.dropped.messages == 0,
            "{s:?}"
        );
    }

    #[test]
    fn end_of_generation_is_stop() {
        let (text, s) = run("hello", None, &[], 64);
        let s = s.unwrap();
        assert_eq!(text, "echo: hello");
        assert_eq!(s.finish_reason, FinishReason::Stop);
        assert_eq!((s.prompt_tokens, s.completion_tokens), (2, 4));
    }

    #[test]
    fn token_budget_is_length() {
        let (text, s) = run("hello", Some(2), &[], 64);
        assert_eq!(text, "echo: ");
        assert_eq!(s.unwrap().finish_reason, FinishReason::Length);
    }

    #[test]
    fn stop_string_ends_the_job_as_stop() {
        let (text, s) = run("one two three [loop]", None, &["three"], 512);
        let s = s.unwrap();
        assert_eq!(text, "echo: one two ");
        assert_eq!(s.finish_reason, FinishReason::Stop);
        // Generation stopped at the token that completed the stop string, not later.
        assert_eq!(s.completion_tokens, "echo: one two three".len().div_ceil(3));
    }

    #[test]
    fn full_context_is_length() {
        let (_, s) = run("[loop]", None, &[], 20);
        let s = s.unwrap();
        assert_eq!(s.finish_reason, FinishReason::Length);
        assert_eq!(s.prompt_tokens + s.completion_tokens, 20);
    }

    #[test]
    fn prompt_that_fills_the_context_is_refused() {
        let (_, s) = run(&"x".repeat(60), None, &[], 20);
        assert_eq!(
            s.err(),
            Some(JobError::PromptTooLong {
                prompt_tokens: 20,
                n_ctx: 20
            })
        );
    }

    #[test]
    fn embeddings_run_each_input_and_refuse_one_longer_than_the_context() {
        let mut fake = FakeBackend::new(4, Duration::ZERO);
        let status = Status::default();
        let inputs = vec![
            EmbedInput::Text("abcdef".into()),
            EmbedInput::Tokens(vec![1, 2, 3, 4]), // exactly the context: fits
        ];
        let e = run_embed(&mut fake, inputs, false, &status).ok().unwrap();
        assert_eq!((e.vectors.len(), e.prompt_tokens), (2, 6));
        let long = vec![
            EmbedInput::Text("a".into()),
            EmbedInput::Text("x".repeat(13)),
        ];
        assert_eq!(
            run_embed(&mut fake, long, false, &status).err(),
            Some(JobError::InputTooLong {
                index: 1,
                tokens: 5,
                n_ctx: 4
            })
        );
        let long = vec![EmbedInput::Text("x".repeat(13))];
        let e = run_embed(&mut fake, long, true, &status).ok().unwrap();
        assert_eq!(e.prompt_tokens, 4);
    }

    #[test]
    fn a_receiver_gone_stops_generation_at_the_next_token() {
        let status = Arc::new(Status::default());
        let (tx, mut rx) = unbounded_channel();
        let job = Job {
            prompt: Prompt::Text("[loop]".into()),
            params: SamplingParams::default(),
            max_tokens: None,
            stop: Vec::new(),
            constraint: None,
            n_keep: None,
            model: None,
            keep_alive: None,
            events: tx,
        };
        let worker_status = status.clone();
        let worker = std::thread::spawn(move || {
            // Left alone this would run for 100 000 tokens.
            let mut fake = FakeBackend::new(100_000, Duration::from_millis(1));
            run_job(&mut fake, job, &worker_status, false);
        });
        let mut pieces = 0;
        while pieces < 3 {
            if let Some(Event::Piece { .. }) = rx.blocking_recv() {
                pieces += 1;
            }
        }
        drop(rx);
        worker.join().unwrap();
        let generated = status.tokens_generated.load(Ordering::Relaxed);
        // It stops at the first token after the drop; a busy machine may delay the drop itself
        // by a few tokens, never by the 100 000 an ignored drop would cost.
        assert!(
            (3..200).contains(&generated),
            "{generated} tokens generated"
        );
    }
}
