//! The box's state for the page: memory, CPU load, and what the model is doing. Read from
//! /proc on Linux and Android; fields that cannot be read are null.

use serde_json::{json, Value};
use std::sync::Mutex;
use std::time::Instant;

/// /proc/meminfo values in bytes: (MemTotal, MemAvailable).
pub fn memory() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb = |key: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(key))?;
        line[key.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .ok()
            .map(|k| k * 1024)
    };
    Some((kb("MemTotal:")?, kb("MemAvailable:")?))
}

/// Resident memory of this process in bytes.
pub fn process_rss() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line["VmRSS:".len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// (busy, total) jiffies over all CPUs since boot, from the first line of /proc/stat.
fn cpu_jiffies() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?.strip_prefix("cpu ")?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    if fields.len() < 4 {
        return None;
    }
    let total: u64 = fields.iter().sum();
    // idle + iowait
    let idle = fields[3] + fields.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// CPU use between two calls of the status endpoint (the page polls it every few seconds).
pub struct CpuMeter {
    last: Mutex<Option<(Instant, u64, u64)>>,
}

impl CpuMeter {
    pub fn new() -> Self {
        let meter = CpuMeter {
            last: Mutex::new(None),
        };
        meter.percent();
        meter
    }

    /// Percent of all cores busy since the previous call (None on the first call or off Linux).
    pub fn percent(&self) -> Option<f64> {
        let (busy, total) = cpu_jiffies()?;
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let previous = last.replace((Instant::now(), busy, total));
        let (_, busy0, total0) = previous?;
        let dt = total.checked_sub(total0)?;
        (dt > 0).then(|| 100.0 * busy.saturating_sub(busy0) as f64 / dt as f64)
    }
}

pub fn system_json(cpu: &CpuMeter) -> Value {
    let (total, available) = memory().map_or((None, None), |(t, a)| (Some(t), Some(a)));
    json!({
        "ram": {
            "total_bytes": total,
            "available_bytes": available,
            "used_bytes": total.zip(available).map(|(t, a)| t.saturating_sub(a)),
            "process_rss_bytes": process_rss(),
        },
        "cpu": {
            "cores": std::thread::available_parallelism().map(|n| n.get()).ok(),
            "load_1m": load_average(),
            "busy_percent": cpu.percent(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn reads_proc_on_linux() {
        let (total, available) = memory().expect("MemTotal and MemAvailable in /proc/meminfo");
        assert!(total > 0 && available <= total);
        assert!(process_rss().expect("VmRSS in /proc/self/status") > 0);
        let (busy, all) = cpu_jiffies().expect("cpu line in /proc/stat");
        assert!(busy <= all);
    }
}
