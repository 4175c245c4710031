//! `GET /metrics`: the server's counters and gauges in the Prometheus text format (version
//! 0.0.4), for a Prometheus or Home Assistant scraping a box: requests by status, prompt and
//! generated tokens, the last decoding speed, the queue, the context in use and the memory.

use super::state::{memory, process_rss};
use super::worker::Status;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Requests answered, by the first digit of their status (index 1 to 5), and the prompt tokens
/// of the generations: counted when a request's log line is written.
pub struct Counters {
    by_class: [AtomicU64; 6],
    prompt_tokens: AtomicU64,
}

impl Default for Counters {
    fn default() -> Self {
        Counters::new()
    }
}

impl Counters {
    pub const fn new() -> Counters {
        Counters {
            by_class: [const { AtomicU64::new(0) }; 6],
            prompt_tokens: AtomicU64::new(0),
        }
    }

    /// One request answered with `status`, whose generation read `prompt_tokens`.
    pub fn count(&self, status: u16, prompt_tokens: usize) {
        let class = (status / 100).min(5) as usize;
        self.by_class[class].fetch_add(1, Ordering::Relaxed);
        self.prompt_tokens
            .fetch_add(prompt_tokens as u64, Ordering::Relaxed);
    }
}

/// What the model worker and the device say, with `queue_capacity`, as the exposition text.
pub fn render(counters: &Counters, status: &Status, queue_capacity: usize, model: &str) -> String {
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, samples: &[(String, f64)]| {
        let _ = writeln!(out, "# HELP smolrun_{name} {help}");
        let _ = writeln!(out, "# TYPE smolrun_{name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(out, "smolrun_{name}{labels} {value}");
        }
    };
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
    let requests: Vec<(String, f64)> = (1..=5)
        .map(|c| (format!("{{code=\"{c}xx\"}}"), load(&counters.by_class[c])))
        .collect();
    metric(
        "requests_total",
        "counter",
        "HTTP requests answered, by status class.",
        &requests,
    );
    let one = |v: f64| vec![(String::new(), v)];
    metric(
        "generations_total",
        "counter",
        "Generations finished.",
        &one(load(&status.jobs_done)),
    );
    metric(
        "prompt_tokens_total",
        "counter",
        "Prompt tokens of the generations.",
        &one(load(&counters.prompt_tokens)),
    );
    metric(
        "generated_tokens_total",
        "counter",
        "Tokens generated.",
        &one(load(&status.tokens_generated)),
    );
    metric(
        "tokens_per_second",
        "gauge",
        "Decoding speed of the last finished generation.",
        &one(status.last_tokens_per_second() as f64),
    );
    metric(
        "busy",
        "gauge",
        "1 while a generation runs.",
        &one(status.busy.load(Ordering::Relaxed) as u8 as f64),
    );
    metric(
        "queue_depth",
        "gauge",
        "Requests waiting for the model.",
        &one(status.queued.load(Ordering::Relaxed) as f64),
    );
    metric(
        "queue_capacity",
        "gauge",
        "Requests that may wait before the server answers 503.",
        &one(queue_capacity as f64),
    );
    metric(
        "context_tokens",
        "gauge",
        "Tokens in the context of the current or last generation.",
        &one(status.ctx_used.load(Ordering::Relaxed) as f64),
    );
    let mut memory_samples = Vec::new();
    if let Some((total, available)) = memory() {
        memory_samples.push(("{kind=\"total\"}".to_string(), total as f64));
        memory_samples.push(("{kind=\"available\"}".to_string(), available as f64));
    }
    if let Some(rss) = process_rss() {
        memory_samples.push(("{kind=\"process_rss\"}".to_string(), rss as f64));
    }
    metric(
        "memory_bytes",
        "gauge",
        "Device RAM (total, available) and this process's resident set.",
        &memory_samples,
    );
    let model = model
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    metric(
        "model_info",
        "gauge",
        "The model being served.",
        &[(format!("{{model=\"{model}\"}}"), 1.0)],
    );
    out
}
