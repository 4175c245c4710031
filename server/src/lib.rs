//! `smolrun serve`: an OpenAI- and Ollama-compatible HTTP server and a live chat page.
//!
//! ```text
//! clients ──HTTP──> http.rs (axum on one current-thread tokio runtime)
//!                     │ parse (openai.rs, ollama.rs), check key, queue or 503
//!                     ▼
//!                   worker.rs: bounded queue ──> one thread that owns the Backend
//!                     │ tokens -> text.rs (UTF-8 and stop-string hold-back) -> events
//!                     ▼
//!                   JSON answer, SSE (OpenAI) or NDJSON (Ollama) stream back to the client
//! ```
//! The engine sits behind `backend::Backend`; `fake::FakeBackend` stands in for it in tests.

pub mod backend;
pub mod engine_backend;
mod error;
pub mod fake;
mod http;
mod metrics;
pub mod models;
mod ollama;
mod openai;
mod state;
mod text;
mod tools;
mod worker;
pub use worker::Loader;

use backend::Backend;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::{poll_fn, Future};
use std::net::{SocketAddr, ToSocketAddrs};
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::signal::unix::{signal, Signal, SignalKind};

pub struct ServeConfig {
    pub host: String,
    pub port: u16,
    pub api_key: Option<String>,
    /// Requests that may wait while one generates; more are refused with 503.
    pub queue: usize,
    /// A context that fills while an answer is generated drops half of what follows the kept
    /// tokens (the system prompt, or the request's `n_keep`) and goes on, as ollama does and
    /// llama-server with `--context-shift`; off: the answer ends with finish_reason "length".
    pub context_shift: bool,
    /// `--slot-save-path`: the folder `/slots/0?action=save|restore` read and write.
    pub slot_save_path: Option<std::path::PathBuf>,
}

/// A slow or idle client gets this long to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// Load the model on the generation thread (with `load`), then serve until SIGTERM and drain.
pub fn run<F>(config: ServeConfig, load: F) -> Result<(), String>
where
    F: FnOnce() -> Result<Box<dyn Backend>, String> + Send + 'static,
{
    let mut once = Some(load);
    let loader = Loader {
        load: Box::new(move |_: &str| match once.take() {
            Some(load) => load(),
            None => Err("the one model of this server was already loaded".into()),
        }),
        default: String::new(),
        models_dir: None,
    };
    run_with(config, loader)
}

/// Serve the models `loader` loads (a folder's, switched by name, with `--models-dir`).
pub fn run_with(config: ServeConfig, loader: Loader) -> Result<(), String> {
    let worker = worker::start(loader, config.queue, config.context_shift)?;
    let info = worker.info();

    let address: SocketAddr = (config.host.as_str(), config.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve --host {}: {e}", config.host))?
        .next()
        .ok_or_else(|| format!("--host {} resolves to no address", config.host))?;
    let listener = std::net::TcpListener::bind(address).map_err(|e| {
        format!("cannot listen on {address}: {e} (is another server using the port? try --port)")
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("cannot make the socket non-blocking: {e}"))?;
    let bound = listener.local_addr().unwrap_or(address);

    eprintln!(
        "smolrun serve: {} (context {} tokens, {} threads, queue {}) listening on http://{bound}/",
        info.name, info.n_ctx, info.n_threads, config.queue
    );
    if !bound.ip().is_loopback() && config.api_key.is_none() {
        eprintln!(
            "smolrun serve: reachable from the network without a key; add --api-key KEY to require one"
        );
    }

    let mut app = http::App::new(worker, config.api_key);
    app.slot_save_path = config.slot_save_path;
    let app = Arc::new(app);
    let router = http::router(app);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| format!("cannot start the network runtime: {e}"))?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| format!("cannot register the socket: {e}"))?;
        let terminate = signal(SignalKind::terminate())
            .map_err(|e| format!("cannot watch for SIGTERM: {e}"))?;
        serve_until_terminated(listener, router, terminate).await;
        Ok(())
    })
}

enum Next {
    Connection(std::io::Result<tokio::net::TcpStream>),
    Terminate,
}

/// Accept connections until SIGTERM, then drain: close the listening socket (new connections
/// are refused, so a load balancer in front sends them to another box at once), let every
/// request already accepted finish, the queued ones included, close idle keep-alive
/// connections, and return. A second SIGTERM returns at once; SIGINT (Ctrl-C) still stops the
/// process at once.
async fn serve_until_terminated(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    mut terminate: Signal,
) {
    let graceful = GracefulShutdown::new();
    loop {
        let next = poll_fn(|cx| {
            if terminate.poll_recv(cx).is_ready() {
                return Poll::Ready(Next::Terminate);
            }
            listener
                .poll_accept(cx)
                .map(|r| Next::Connection(r.map(|(stream, _peer)| stream)))
        })
        .await;
        let stream = match next {
            Next::Terminate => break,
            Next::Connection(Ok(stream)) => stream,
            Next::Connection(Err(e)) => {
                // Out of file descriptors and the like: wait instead of spinning.
                eprintln!("smolrun serve: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true); // one small write per token: send it now
        let service = TowerToHyperService::new(router.clone());
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        // A connection error only concerns that client (it went away, sent garbage).
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
    drop(listener);
    eprintln!(
        "smolrun serve: SIGTERM: not listening any more; finishing the requests of {} open \
         connection(s) (SIGTERM again to stop now)",
        graceful.count()
    );
    let mut drained = pin!(graceful.shutdown());
    let drained = poll_fn(|cx| {
        if drained.as_mut().poll(cx).is_ready() {
            return Poll::Ready(true);
        }
        terminate.poll_recv(cx).map(|_| false)
    })
    .await;
    if drained {
        eprintln!("smolrun serve: every request answered; exiting");
    } else {
        eprintln!("smolrun serve: second SIGTERM: exiting with requests unfinished");
    }
}
