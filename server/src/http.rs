//! Routes, the front door (API key, one log line per request), and the streaming body.

use super::error::ApiError;
use super::models::KeepAlive;
use super::ollama;
use super::openai::{self, Endpoint, ResponseHead, Writer};
use super::state::{system_json, CpuMeter};
use super::tools::ToolCallStream;
use super::worker::{
    self, DeleteJob, Dropped, EmbedInput, EmbedJob, Embeddings, Event, Job, JobError, LoadJob,
    SlotAction, SlotDone, SlotJob, Summary, WorkerHandle,
};
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::sync::oneshot;

/// Request bodies above this are refused with 413: a prompt that fills even a large context
/// is far smaller, and a TV box should not buffer arbitrary uploads.
pub const BODY_LIMIT: usize = 1 << 20;

const PAGE: &str = include_str!("page.html");

pub struct App {
    pub worker: WorkerHandle,
    pub api_key: Option<String>,
    pub cpu: CpuMeter,
    /// This server's request counters (each server its own: two share a process).
    pub counters: Arc<super::metrics::Counters>,
    next_id: AtomicU64,
    started: u64,
    /// `--slot-save-path`: where `/slots/0?action=save|restore` files go (None: refused).
    pub slot_save_path: Option<std::path::PathBuf>,
}

impl App {
    pub fn new(worker: WorkerHandle, api_key: Option<String>) -> Self {
        App {
            worker,
            api_key,
            cpu: CpuMeter::new(),
            counters: Arc::new(super::metrics::Counters::new()),
            next_id: AtomicU64::new(1),
            started: unix_time(),
            slot_save_path: None,
        }
    }
}

fn unix_time() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/models", get(models))
        .route("/v1/state", get(state))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/embeddings", post(embeddings))
        .route("/slots", get(slots))
        .route("/slots/{id}", post(slot_action))
        .route("/api/version", get(ollama_version))
        .route("/api/tags", get(ollama_tags))
        .route("/api/ps", get(ollama_ps))
        .route("/api/delete", axum::routing::delete(ollama_delete))
        .route("/api/show", post(ollama_show))
        .route("/api/generate", post(ollama_generate))
        .route("/api/chat", post(ollama_chat))
        .route("/api/embed", post(ollama_embed))
        .route("/api/embeddings", post(ollama_embeddings))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(app.clone(), front_door))
        .with_state(app)
}

/// Marks a response whose log line is written by the handler (when its generation ends).
#[derive(Clone)]
struct LoggedByHandler;

/// Checks the API key for /v1/*, and logs every request the handlers do not log themselves.
async fn front_door(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let declared_length = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let ollama = path.starts_with("/api/");
    let respond = |e: ApiError| {
        if ollama {
            e.into_ollama_response()
        } else {
            e.into_response()
        }
    };
    let response = if (ollama || path.starts_with("/v1/")) && !authorized(&app, request.headers()) {
        respond(ApiError::unauthorized())
    } else if declared_length.is_some_and(|n| n > BODY_LIMIT as u64) {
        // Refuse from the header instead of reading a megabyte first (the body limit
        // below still catches chunked uploads without a length).
        respond(ApiError::body_too_large(BODY_LIMIT))
    } else {
        next.run(request).await
    };
    if response.extensions().get::<LoggedByHandler>().is_none() {
        let log = RequestLog {
            counters: app.counters.clone(),
            method,
            path,
            status: response.status().as_u16(),
            started,
            prompt_tokens: 0,
            completion_tokens: 0,
            summary: None,
            generating: false,
        };
        drop(log); // prints
    }
    response
}

fn authorized(app: &App, headers: &HeaderMap) -> bool {
    let Some(key) = &app.api_key else {
        return true;
    };
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    // Compare in time independent of where the first difference is.
    sent.len() == key.len()
        && sent
            .bytes()
            .zip(key.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// One line on stderr per request, printed when the request is over (on drop, so a client
/// that goes away mid-generation is logged too).
struct RequestLog {
    counters: Arc<super::metrics::Counters>,
    method: Method,
    path: String,
    status: u16,
    started: Instant,
    prompt_tokens: usize,
    /// Tokens delivered to the client so far.
    completion_tokens: usize,
    summary: Option<Summary>,
    /// A generation was under way: without a summary at the end, the client left.
    generating: bool,
}

impl RequestLog {
    fn new(app: &App, method: Method, path: &str) -> Self {
        RequestLog {
            counters: app.counters.clone(),
            method,
            path: path.to_string(),
            status: 200,
            started: Instant::now(),
            prompt_tokens: 0,
            completion_tokens: 0,
            summary: None,
            generating: false,
        }
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        let prompt_tokens = self
            .summary
            .as_ref()
            .map_or(self.prompt_tokens, |s| s.prompt_tokens);
        self.counters.count(self.status, prompt_tokens);
        let seconds = self.started.elapsed().as_secs_f64();
        let detail = match (&self.summary, self.generating) {
            (Some(s), _) => format!(
                " prompt={} tokens={} {} finish={}",
                s.prompt_tokens,
                s.completion_tokens,
                s.tokens_per_second()
                    .map_or("- tok/s".to_string(), |t| format!("{t:.1} tok/s")),
                s.finish_reason.as_str()
            ),
            (None, true) => format!(
                " prompt={} tokens={} cancelled: client went away",
                self.prompt_tokens, self.completion_tokens
            ),
            (None, false) => String::new(),
        };
        eprintln!(
            "smolrun serve: {} {} {}{} {:.2}s",
            self.method, self.path, self.status, detail, seconds
        );
    }
}

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        PAGE,
    )
        .into_response()
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let text = super::metrics::render(
        &app.counters,
        &app.worker.status,
        app.worker.capacity,
        &app.worker.info().name,
    );
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn health() -> Response {
    json_response(StatusCode::OK, &json!({"status": "ok"}))
}

/// GET /slots (llama-server's): the one slot, its context and what its cache holds.
async fn slots(State(app): State<Arc<App>>) -> Response {
    let info = app.worker.info();
    let status = &app.worker.status;
    json_response(
        StatusCode::OK,
        &json!([{
            "id": 0,
            "n_ctx": info.n_ctx,
            "is_processing": status.busy.load(Ordering::Relaxed),
            "model": info.name,
        }]),
    )
}

/// POST /slots/0?action=save|restore|erase (llama-server's API and answers): the cache saved
/// to `{"filename": NAME}` under `--slot-save-path`, read back from it, or forgotten. A file of
/// another model or a damaged one is a 400 and the cache stays usable.
async fn slot_action(
    State(app): State<Arc<App>>,
    axum::extract::Path(id): axum::extract::Path<String>,
    uri: axum::http::Uri,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async {
        if id != "0" {
            return Err(ApiError::invalid_request(format!(
                "no slot {id}: this server has one, slot 0"
            )));
        }
        let action = uri
            .query()
            .unwrap_or("")
            .split('&')
            .find_map(|kv| kv.strip_prefix("action="))
            .unwrap_or("");
        let file = |app: &App| -> Result<(String, std::path::PathBuf), ApiError> {
            let dir = app.slot_save_path.as_ref().ok_or_else(|| {
                ApiError::invalid_request(
                    "slots are not saved: start the server with --slot-save-path DIR",
                )
            })?;
            let body = request_body(body)?;
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let name = v["filename"].as_str().unwrap_or("").to_string();
            // A file name, never a path.
            let plain = !name.is_empty()
                && !name.starts_with('.')
                && !name.contains(['/', '\\'])
                && name.len() <= 255;
            if !plain {
                return Err(ApiError::invalid_request(format!(
                    "'filename' must be a plain file name under --slot-save-path, got {name:?}"
                ))
                .with_param("filename"));
            }
            Ok((name.clone(), dir.join(name)))
        };
        let (filename, slot_action) = match action {
            "save" => {
                let (name, path) = file(&app)?;
                (Some(name), SlotAction::Save(path))
            }
            "restore" => {
                let (name, path) = file(&app)?;
                (Some(name), SlotAction::Restore(path))
            }
            "erase" => (None, SlotAction::Erase),
            other => {
                return Err(ApiError::invalid_request(format!(
                    "action={other:?}: give action=save, restore or erase"
                )))
            }
        };
        let (reply, answer) = oneshot::channel();
        app.worker
            .submit_slot(SlotJob {
                action: slot_action,
                reply,
            })
            .map_err(|_| ApiError::queue_full(app.worker.capacity))?;
        let done: SlotDone = match answer.await {
            Ok(r) => r.map_err(job_error)?,
            Err(_) => return Err(ApiError::internal("the generation thread stopped")),
        };
        Ok(match action {
            "save" => json!({"id_slot": 0, "filename": filename, "n_saved": done.tokens,
                             "n_written": done.bytes, "timings": {"save_ms": done.ms}}),
            "restore" => json!({"id_slot": 0, "filename": filename, "n_restored": done.tokens,
                                "n_read": done.bytes, "timings": {"restore_ms": done.ms}}),
            _ => json!({"id_slot": 0, "n_erased": done.tokens}),
        })
    }
    .await;
    match result {
        Ok(v) => json_response(StatusCode::OK, &v),
        Err(e) => e.into_response(),
    }
}

/// GET /v1/models: the loaded model, or with `--models-dir` every model of the folder (those
/// not loaded without their context length, which their header holds).
async fn models(State(app): State<Arc<App>>) -> Response {
    let info = &app.worker.info();
    let loaded = json!({
        "id": info.name,
        "object": "model",
        "created": app.started,
        "owned_by": "smolrun",
        "meta": {"n_ctx": info.n_ctx},
    });
    let data = match &app.worker.models_dir {
        None => vec![loaded],
        Some(dir) => dir
            .list()
            .into_iter()
            .map(|m| {
                if m.name == info.name {
                    return loaded.clone();
                }
                let created = m
                    .modified
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                json!({"id": m.name, "object": "model", "created": created, "owned_by": "smolrun"})
            })
            .collect(),
    };
    json_response(StatusCode::OK, &json!({"object": "list", "data": data}))
}

async fn state(State(app): State<Arc<App>>) -> Response {
    let info = &app.worker.info();
    let status = &app.worker.status;
    let mut v = system_json(&app.cpu);
    v["model"] = json!({
        "name": info.name,
        "n_ctx": info.n_ctx,
        "threads": info.n_threads,
    });
    v["generation"] = json!({
        "busy": status.busy.load(Ordering::Relaxed),
        "queued": status.queued.load(Ordering::Relaxed),
        "queue_capacity": app.worker.capacity,
        "ctx_used": status.ctx_used.load(Ordering::Relaxed),
        "last_tokens_per_second": Some(status.last_tokens_per_second()).filter(|t| *t > 0.0),
        "requests_done": status.jobs_done.load(Ordering::Relaxed),
        "tokens_generated": status.tokens_generated.load(Ordering::Relaxed),
    });
    json_response(StatusCode::OK, &v)
}

async fn not_found(request: Request) -> ApiError {
    ApiError::not_found(request.uri().path())
}

async fn method_not_allowed() -> ApiError {
    ApiError::method_not_allowed()
}

fn json_response(status: StatusCode, value: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

async fn chat_completions(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    generate(app, Endpoint::Chat, "/v1/chat/completions", body).await
}

async fn completions(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    generate(app, Endpoint::Completion, "/v1/completions", body).await
}

fn job_error(e: JobError) -> ApiError {
    match e {
        JobError::BadPrompt(m) => ApiError::invalid_request(m),
        JobError::PromptTooLong {
            prompt_tokens,
            n_ctx,
        } => ApiError::context_length_exceeded(prompt_tokens, n_ctx),
        JobError::InputTooLong {
            index,
            tokens,
            n_ctx,
        } => ApiError::input_too_long(index, tokens, n_ctx),
        JobError::Engine(m) => ApiError::internal(format!("generation failed: {m}")),
        JobError::ModelNotFound(m) => ApiError::model_not_found(m),
        JobError::Load(m) => ApiError::internal(m),
        JobError::Slot(m) => ApiError::invalid_request(m),
    }
}

/// The request's `model` and ollama's `keep_alive`, read beside each API's own parse of the
/// body (which has checked it is a JSON object by then).
fn model_choice(body: &[u8]) -> Result<(Option<String>, Option<KeepAlive>), ApiError> {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let model = match v.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(
                ApiError::invalid_request(format!("'model' must be a string, got {other}"))
                    .with_param("model"),
            )
        }
    };
    let keep_alive = match v.get("keep_alive") {
        None | Some(Value::Null) => None,
        Some(k) => Some(
            KeepAlive::parse(k)
                .map_err(|m| ApiError::invalid_request(m).with_param("keep_alive"))?,
        ),
    };
    Ok((model, keep_alive))
}

/// The body, or a 400/413 that says why it could not be read.
fn request_body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::body_too_large(BODY_LIMIT)
        } else {
            ApiError::invalid_request(format!("cannot read the request body: {rejection}"))
        }
    })
}

/// Run `inputs` through the worker's queue and wait for their vectors.
async fn run_embeddings(
    app: &App,
    inputs: Vec<EmbedInput>,
    truncate: bool,
    (model, keep_alive): (Option<String>, Option<KeepAlive>),
) -> Result<Embeddings, ApiError> {
    let (reply, answer) = oneshot::channel();
    app.worker
        .submit_embed(EmbedJob {
            inputs,
            truncate,
            model,
            keep_alive,
            reply,
        })
        .map_err(|_| ApiError::queue_full(app.worker.capacity))?;
    match answer.await {
        Ok(result) => result.map_err(job_error),
        Err(_) => Err(ApiError::internal(
            "the generation thread stopped without finishing the embeddings",
        )),
    }
}

async fn embeddings(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    let mut log = RequestLog::new(&app, Method::POST, "/v1/embeddings");
    let result = async {
        let body = request_body(body)?;
        let request = openai::parse_embeddings(&body)?;
        let e = run_embeddings(&app, request.inputs, false, model_choice(&body)?).await?;
        log.prompt_tokens = e.prompt_tokens;
        let model = &app.worker.info().name;
        Ok::<_, ApiError>(openai::embeddings_response(model, &e, request.encoding))
    }
    .await;
    let mut response = match result {
        Ok(v) => json_response(StatusCode::OK, &v),
        Err(e) => {
            log.status = e.status;
            e.into_response()
        }
    };
    response.extensions_mut().insert(LoggedByHandler);
    response
}

async fn generate(
    app: Arc<App>,
    endpoint: Endpoint,
    path: &str,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    // Taken by the stream when the answer is streamed; printed when this function returns
    // (or is dropped because the client left) otherwise.
    let mut log = Some(RequestLog::new(&app, Method::POST, path));
    let started = start_generation(&app, endpoint, body, &mut log).await;
    generation_response(started, &mut log, ApiError::into_response)
}

/// A generation's response, or its error in the API's shape; either way marked as logged here
/// (the log goes with the stream, or records the error status).
fn generation_response(
    started: Result<Response, ApiError>,
    log: &mut Option<RequestLog>,
    error_response: fn(ApiError) -> Response,
) -> Response {
    let mut response = match started {
        Ok(r) => r,
        Err(e) => {
            if let Some(log) = log {
                log.status = e.status;
                log.generating = false;
            }
            error_response(e)
        }
    };
    response.extensions_mut().insert(LoggedByHandler);
    response
}

async fn start_generation(
    app: &App,
    endpoint: Endpoint,
    body: Result<Bytes, BytesRejection>,
    log_slot: &mut Option<RequestLog>,
) -> Result<Response, ApiError> {
    let Some(log) = log_slot.as_mut() else {
        return Err(ApiError::internal("request log missing"));
    };
    let body = request_body(body)?;
    let request = openai::parse_request(endpoint, &body)?;
    let (model, keep_alive) = model_choice(&body)?;
    let tool_calls = request.structured.tool_calls;
    let job = Job {
        model,
        keep_alive,
        prompt: request.prompt,
        params: request.params,
        max_tokens: request.max_tokens,
        stop: request.stop,
        constraint: request.structured.constraint,
        n_keep: request.n_keep,
        events: mpsc::unbounded_channel().0,
    };
    let (mut events, dropped) = start_job(app, job, log).await?;

    let id_number = app.next_id.fetch_add(1, Ordering::Relaxed);
    let head = ResponseHead {
        endpoint,
        id: match endpoint {
            Endpoint::Chat => format!("chatcmpl-{id_number}"),
            Endpoint::Completion => format!("cmpl-{id_number}"),
        },
        created: unix_time(),
        model: app.worker.info().name.clone(),
    };
    let mut writer = Writer::new(head, request.logprobs);
    if let Some(tools) = tool_calls {
        writer = writer.with_tool_calls(tools);
    }

    if !request.stream {
        let collected = worker::collect(&mut events).await.map_err(job_error)?;
        log.completion_tokens = collected.summary.completion_tokens;
        let value = writer.complete(&collected.text, &collected.tokens, &collected.summary);
        log.summary = Some(collected.summary);
        let response = json_response(StatusCode::OK, &value);
        return Ok(with_dropped_headers(response, dropped));
    }

    let first = writer
        .first_chunk(request.include_usage)
        .map(|v| sse_data(&v));
    let stream = SseStream {
        events,
        writer,
        include_usage: request.include_usage,
        log: log_slot.take(),
        first,
        done: false,
    };
    let response = (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        Body::from_stream(stream),
    )
        .into_response();
    Ok(with_dropped_headers(response, dropped))
}

/// Queue `job` (its `events` sender is replaced) and wait until it leaves the queue, so that a
/// prompt that does not fit is still a clean 400 before any header is sent.
async fn start_job(
    app: &App,
    mut job: Job,
    log: &mut RequestLog,
) -> Result<(UnboundedReceiver<Event>, Dropped), ApiError> {
    let (events_tx, mut events) = mpsc::unbounded_channel();
    job.events = events_tx;
    app.worker
        .submit(job)
        .map_err(|_| ApiError::queue_full(app.worker.capacity))?;
    log.generating = true;
    let dropped = match events.recv().await {
        Some(Event::Started {
            prompt_tokens,
            dropped,
        }) => {
            log.prompt_tokens = prompt_tokens;
            dropped
        }
        Some(Event::Failed(e)) => return Err(job_error(e)),
        Some(_) | None => {
            return Err(ApiError::internal(
                "the generation thread ended the job before starting it",
            ))
        }
    };
    Ok((events, dropped))
}

/// Says in the headers which old turns a chat lost so that its prompt fits (known before the
/// answer starts; what a context shift drops later is in the answer's `dropped` field).
fn with_dropped_headers(mut response: Response, dropped: Dropped) -> Response {
    if dropped.messages > 0 {
        let headers = response.headers_mut();
        for (name, n) in [
            ("x-context-dropped-messages", dropped.messages),
            ("x-context-dropped-tokens", dropped.prompt_tokens),
        ] {
            headers.insert(
                header::HeaderName::from_static(name),
                header::HeaderValue::from(n as u64),
            );
        }
    }
    response
}

fn sse_data(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// The body of a streamed answer: one SSE event per piece of text, then the final chunk(s)
/// and `data: [DONE]`. Dropping it (the client went away) drops the event receiver, which
/// stops the worker at its next token.
struct SseStream {
    events: UnboundedReceiver<Event>,
    writer: Writer,
    include_usage: bool,
    log: Option<RequestLog>,
    first: Option<Bytes>,
    done: bool,
}

impl SseStream {
    fn finish(&mut self, summary: Summary) -> Bytes {
        let mut out = Vec::new();
        for chunk in self.writer.final_chunks(&summary, self.include_usage) {
            out.extend_from_slice(&sse_data(&chunk));
        }
        if self.include_usage {
            out.extend_from_slice(&sse_data(&self.writer.usage_chunk(&summary)));
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
        if let Some(log) = &mut self.log {
            log.summary = Some(summary);
        }
        self.done = true;
        self.log.take(); // the request is over: print its line now, not when hyper drops us
        Bytes::from(out)
    }
}

impl futures_core::Stream for SseStream {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(first)));
        }
        if self.done {
            return Poll::Ready(None);
        }
        let event = match self.events.poll_recv(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(e) => e,
        };
        let bytes = match event {
            Some(Event::Piece { text, tokens }) => {
                if let Some(log) = &mut self.log {
                    log.completion_tokens += tokens.len();
                }
                let include_usage = self.include_usage;
                let chunk = self.writer.piece_chunk(&text, &tokens, include_usage);
                sse_data(&chunk)
            }
            Some(Event::Done(summary)) => self.finish(summary),
            Some(Event::Failed(e)) => {
                // Headers are sent; the error travels as an event, which the OpenAI clients
                // raise as an exception.
                let error = job_error(e);
                if let Some(log) = &mut self.log {
                    log.status = error.status;
                    log.generating = false;
                }
                self.done = true;
                self.log.take();
                sse_data(&error.to_json())
            }
            Some(Event::Started { .. }) | None => {
                self.done = true;
                return Poll::Ready(None);
            }
        };
        Poll::Ready(Some(Ok(bytes)))
    }
}

// ---- The Ollama API ----------------------------------------------------------------------

fn ollama_json(value: &Value) -> Response {
    json_response(StatusCode::OK, value)
}

async fn ollama_version() -> Response {
    ollama_json(&json!({
        "version": ollama::API_VERSION,
        "server": concat!("smolrun-", env!("CARGO_PKG_VERSION")),
    }))
}

async fn ollama_tags(State(app): State<Arc<App>>) -> Response {
    let folder = app.worker.models_dir.as_ref().map(|d| d.list());
    ollama_json(&ollama::tags(&app.worker.info(), folder.as_deref()))
}

async fn ollama_ps(State(app): State<Arc<App>>) -> Response {
    ollama_json(&ollama::ps(&app.worker.resident()))
}

/// DELETE /api/delete `{"model": NAME}`: removes a model of `--models-dir` (unloaded first
/// when it is the loaded one), through the worker's queue so that no load races it.
async fn ollama_delete(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async {
        let body = request_body(body)?;
        let (model, _) = model_choice(&body)?;
        let model = model.ok_or_else(|| {
            ApiError::invalid_request("'model' names the model to delete").with_param("model")
        })?;
        let (reply, answer) = oneshot::channel();
        app.worker
            .submit_delete(DeleteJob { model, reply })
            .map_err(|_| ApiError::queue_full(app.worker.capacity))?;
        match answer.await {
            Ok(result) => result.map_err(job_error),
            Err(_) => Err(ApiError::internal("the generation thread stopped")),
        }
    }
    .await;
    match result {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => e.into_ollama_response(),
    }
}

/// POST /api/show: any model name gets the one loaded model; the body must still be JSON.
async fn ollama_show(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    let checked = request_body(body).and_then(|b| {
        serde_json::from_slice::<Value>(&b)
            .ok()
            .filter(Value::is_object)
            .map(|_| ())
            .ok_or_else(|| ApiError::invalid_request("the request body must be a JSON object"))
    });
    match checked {
        Ok(()) => ollama_json(&ollama::show(&app.worker.info())),
        Err(e) => e.into_ollama_response(),
    }
}

async fn ollama_generate(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    ollama_generation(app, ollama::Endpoint::Generate, "/api/generate", body).await
}

async fn ollama_chat(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    ollama_generation(app, ollama::Endpoint::Chat, "/api/chat", body).await
}

async fn ollama_generation(
    app: Arc<App>,
    endpoint: ollama::Endpoint,
    path: &str,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let mut log = Some(RequestLog::new(&app, Method::POST, path));
    let started = start_ollama_generation(&app, endpoint, body, &mut log).await;
    generation_response(started, &mut log, ApiError::into_ollama_response)
}

fn ndjson_response(body: Body) -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        body,
    )
        .into_response()
}

fn ndjson_line(value: &Value) -> Bytes {
    Bytes::from(format!("{value}\n"))
}

async fn start_ollama_generation(
    app: &App,
    endpoint: ollama::Endpoint,
    body: Result<Bytes, BytesRejection>,
    log_slot: &mut Option<RequestLog>,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let Some(log) = log_slot.as_mut() else {
        return Err(ApiError::internal("request log missing"));
    };
    let body = request_body(body)?;
    let parsed = ollama::parse_request(endpoint, &body)?;
    let (model, keep_alive) = model_choice(&body)?;
    let mut writer = ollama::Writer {
        endpoint,
        model: ollama::model_name(&app.worker.info()),
        tool_calls: None,
    };
    let request = match parsed {
        ollama::Parsed::Generate(r) => r,
        ollama::Parsed::LoadOnly { stream } => {
            // Ollama's load (`ollama run` before the first message) or, with keep_alive 0,
            // unload (`ollama stop`).
            let (reply, answer) = oneshot::channel();
            app.worker
                .submit_load(LoadJob {
                    model,
                    keep_alive,
                    reply,
                })
                .map_err(|_| ApiError::queue_full(app.worker.capacity))?;
            let loaded = match answer.await {
                Ok(result) => result.map_err(job_error)?,
                Err(_) => return Err(ApiError::internal("the generation thread stopped")),
            };
            writer.model = ollama::model_name(&app.worker.info());
            let value = writer.load_only(loaded);
            return Ok(if stream {
                ndjson_response(Body::from(ndjson_line(&value)))
            } else {
                ollama_json(&value)
            });
        }
    };
    if let Some(tools) = request.tool_calls {
        writer.tool_calls = Some(ToolCallStream::new(tools));
    }
    let job = Job {
        model,
        keep_alive,
        prompt: request.prompt,
        params: request.params,
        max_tokens: request.max_tokens,
        stop: request.stop,
        constraint: request.constraint,
        n_keep: request.num_keep,
        events: mpsc::unbounded_channel().0,
    };
    let (mut events, dropped) = start_job(app, job, log).await?;
    // The model that answers (a request may have switched it).
    writer.model = ollama::model_name(&app.worker.info());
    if !request.stream {
        let collected = worker::collect(&mut events).await.map_err(job_error)?;
        log.completion_tokens = collected.summary.completion_tokens;
        let value = writer.done(&collected.text, &collected.summary, started.elapsed());
        log.summary = Some(collected.summary);
        return Ok(with_dropped_headers(ollama_json(&value), dropped));
    }
    let stream = NdjsonStream {
        events,
        writer,
        started,
        log: log_slot.take(),
        done: false,
    };
    Ok(with_dropped_headers(
        ndjson_response(Body::from_stream(stream)),
        dropped,
    ))
}

/// The body of a streamed Ollama answer: one JSON object per line, per piece of text, then
/// the `done: true` object. Dropping it (the client went away) stops the worker, as for SSE.
struct NdjsonStream {
    events: UnboundedReceiver<Event>,
    writer: ollama::Writer,
    started: Instant,
    log: Option<RequestLog>,
    done: bool,
}

impl futures_core::Stream for NdjsonStream {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        let event = match self.events.poll_recv(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(e) => e,
        };
        let line = match event {
            Some(Event::Piece { text, tokens }) => {
                if let Some(log) = &mut self.log {
                    log.completion_tokens += tokens.len();
                }
                ndjson_line(&Value::Object(self.writer.piece(&text)))
            }
            Some(Event::Done(summary)) => {
                let elapsed = self.started.elapsed();
                let value = self.writer.done("", &summary, elapsed);
                if let Some(log) = &mut self.log {
                    log.summary = Some(summary);
                }
                self.done = true;
                self.log.take(); // the request is over: print its line now
                ndjson_line(&value)
            }
            Some(Event::Failed(e)) => {
                // Headers are sent; Ollama's clients raise an `error` line as an exception.
                let error = job_error(e);
                if let Some(log) = &mut self.log {
                    log.status = error.status;
                    log.generating = false;
                }
                self.done = true;
                self.log.take();
                ndjson_line(&json!({"error": error.message}))
            }
            Some(Event::Started { .. }) | None => {
                self.done = true;
                return Poll::Ready(None);
            }
        };
        Poll::Ready(Some(Ok(line)))
    }
}

/// POST /api/embed: `input` a string or a list; `{"model", "embeddings": [[...]]}`.
async fn ollama_embed(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    ollama_embedding(app, "/api/embed", "input", body).await
}

/// POST /api/embeddings, Ollama's older endpoint: `prompt` one string; `{"embedding": [...]}`
/// (at unit length here, where Ollama's is raw: cosine similarity, what it is used for, is the
/// same either way).
async fn ollama_embeddings(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    ollama_embedding(app, "/api/embeddings", "prompt", body).await
}

async fn ollama_embedding(
    app: Arc<App>,
    path: &str,
    key: &str,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let started = Instant::now();
    let mut log = RequestLog::new(&app, Method::POST, path);
    let result = async {
        let body = request_body(body)?;
        let request = ollama::parse_embed(&body, key)?;
        let e =
            run_embeddings(&app, request.inputs, request.truncate, model_choice(&body)?).await?;
        log.prompt_tokens = e.prompt_tokens;
        let model = ollama::model_name(&app.worker.info());
        Ok::<_, ApiError>(if key == "prompt" {
            json!({"embedding": e.vectors.first()})
        } else {
            ollama::embed_response(&model, &e, started.elapsed())
        })
    }
    .await;
    let mut response = match result {
        Ok(v) => ollama_json(&v),
        Err(e) => {
            log.status = e.status;
            e.into_ollama_response()
        }
    };
    response.extensions_mut().insert(LoggedByHandler);
    response
}
