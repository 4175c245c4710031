//! `smolrun plan MODEL --device NAME`: what a model needs on a device and what it will do there,
//! from the GGUF header alone (read with range requests when MODEL is a URL or a Hugging Face
//! reference: nothing else is downloaded). The decision is the engine's own
//! (`smolrun_engine::plan`): the weights mode `--weights auto` picks there, the resident set,
//! stream zones or expert pools, the KV cache or state for the context, the flash read per token
//! and the speed limit that sets.

use crate::args::WeightsFlag;
use crate::cmd::gguf_out::Input;
use crate::cmd::pull::{self, Reference};
use crate::download;
use smolrun_core::gguf::Gguf;
use smolrun_engine::options::parse_size;
use smolrun_engine::plan::{self, Device, DevicePlan, PRESETS};
use smolrun_engine::{EngineOptions, MoePool};
use std::path::PathBuf;

/// The device a model is planned or fitted for (`plan`, `fit`).
#[derive(clap::Args, Clone, Debug)]
pub struct DeviceArgs {
    /// The device: a preset (tv-box, tv-box-headless, ipad-air, router-512m, pi5-4g, pi5-8g) or a
    /// profile file of `key = value` lines (mem, flash_mbps, address_space, cpu, dotprod,
    /// threads). The options below change what it says.
    #[arg(long)]
    pub device: Option<String>,
    /// RAM one process may use (800M, 1.5G).
    #[arg(long, value_parser = parse_size)]
    pub mem: Option<u64>,
    /// Storage read bandwidth, MB/s.
    #[arg(long = "flash-mbps")]
    pub flash_mbps: Option<f64>,
    /// Address space a process may map (iOS: 1.7G).
    #[arg(long = "address-space", value_parser = parse_size)]
    pub address_space: Option<u64>,
    /// The CPU, in words.
    #[arg(long)]
    pub cpu: Option<String>,
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
}

#[derive(clap::Args)]
pub struct Args {
    /// Model: a .gguf path or model name, an http(s) URL, or a Hugging Face `org/repo:QUANT`.
    model: String,
    #[command(flatten)]
    device: DeviceArgs,
    /// Context length [default: 4096, or the trained context if smaller].
    #[arg(short = 'c', long = "ctx-size")]
    ctx: Option<usize>,
    /// Where the weights live (as `run --weights`).
    #[arg(long, value_enum, default_value_t = WeightsFlag::Auto)]
    weights: WeightsFlag,
    /// With streaming: MB (10^6 bytes) of weights kept in RAM (as `run --resident-mb`).
    #[arg(long = "resident-mb", value_name = "MB")]
    resident_mb: Option<u64>,
    /// Experts per layer kept in RAM, or `all` (as `run --moe-pool`).
    #[arg(long = "moe-pool", value_name = "N|all")]
    moe_pool: Option<String>,
    /// Experts per token instead of the model's count.
    #[arg(long)]
    experts: Option<usize>,
    /// The recurrent state in f16 (Qwen3.5).
    #[arg(long = "state-f16")]
    state_f16: bool,
    /// The KV cache's key type, f16 or q8_0 (as `run --cache-type-k`) [default: f16, or a
    /// fitted file's run profile's type].
    #[arg(long = "cache-type-k", visible_alias = "ctk", value_name = "TYPE",
          value_parser = crate::args::parse_kv_type)]
    cache_type_k: Option<smolrun_engine::options::KvCacheType>,
    /// The KV cache's value type (as `run --cache-type-v`).
    #[arg(long = "cache-type-v", visible_alias = "ctv", value_name = "TYPE",
          value_parser = crate::args::parse_kv_type)]
    cache_type_v: Option<smolrun_engine::options::KvCacheType>,
    /// One JSON line (weights, resident_mb, flash_mb_per_token, flash_limit_tok_s, ...: the
    /// names and units `bench --json` reports).
    #[arg(long)]
    json: bool,
}

/// The first read of a remote header; doubled until the header parses.
const FIRST_HEADER_READ: u64 = 4 << 20;

pub fn device(args: &DeviceArgs) -> Result<Device, String> {
    let mut device = match args.device.as_deref() {
        Some(name) => match Device::preset(name) {
            Some(d) => d,
            None if std::path::Path::new(name).is_file() => {
                let text = std::fs::read_to_string(name)
                    .map_err(|e| format!("cannot read the device profile {name}: {e}"))?;
                Device::parse(name, &text)?
            }
            None => {
                return Err(format!(
                    "--device {name}: neither a preset ({}) nor a profile file",
                    preset_names()
                ))
            }
        },
        None => Device {
            name: "this run's options".into(),
            mem: 0,
            flash_mbps: 0.0,
            address_space: None,
            cpu: String::new(),
            dotprod: false,
            threads: crate::args::default_threads(),
        },
    };
    if let Some(m) = args.mem {
        device.mem = m;
    }
    if let Some(f) = args.flash_mbps {
        device.flash_mbps = f;
    }
    if args.address_space.is_some() {
        device.address_space = args.address_space;
    }
    if let Some(c) = &args.cpu {
        device.cpu = c.clone();
    }
    if let Some(t) = args.threads {
        device.threads = t;
    }
    if device.mem == 0 || device.flash_mbps <= 0.0 {
        return Err(format!(
            "say which device: --device NAME ({}) or a profile file, or --mem SIZE and \
             --flash-mbps MB/S",
            preset_names()
        ));
    }
    Ok(device)
}

fn preset_names() -> String {
    PRESETS
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The header bytes of MODEL and the file's length: read from the local file, or with range
/// requests from a URL or a Hugging Face reference.
pub fn header(model: &str) -> Result<(String, Vec<u8>, u64), String> {
    let (input, bytes, file_len) = open(model)?;
    Ok((input.label(), bytes, file_len))
}

/// MODEL as an input a rewriter reads (the local file, or the file on its server), with its
/// header bytes and length.
pub fn open(model: &str) -> Result<(Input, Vec<u8>, u64), String> {
    let local = crate::args::resolve(model);
    if let Ok(path) = &local {
        if path.is_file() {
            let file_len = std::fs::metadata(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?
                .len();
            let bytes = read_local_prefix(path, file_len)?;
            return Ok((Input::local(path)?, bytes, file_len));
        }
    }
    let agent = download::agent();
    let src = match pull::parse_reference(model)? {
        Reference::Url { url, sha256 } => download::Source {
            url,
            sha256,
            size: None,
            auth: None,
        },
        Reference::HuggingFace { repo, quant } => {
            pull::resolve_hf(&agent, &repo, quant.as_deref())?.0
        }
        Reference::Known { .. } => return Err(local.err().unwrap_or_default()),
    };
    let mut want = FIRST_HEADER_READ;
    loop {
        let (bytes, file_len) = download::read_prefix(&agent, &src, want)?;
        match Gguf::parse_header(&bytes, file_len) {
            Ok(_) => return Ok((Input::Remote { agent, src }, bytes, file_len)),
            Err(e) if e.wants_more_bytes() && (bytes.len() as u64) < file_len.min(want) => {
                return Err(format!(
                    "{}: the server sent {} bytes of the {want} asked for: {e}",
                    src.url,
                    bytes.len()
                ))
            }
            Err(e) if e.wants_more_bytes() && want < file_len => want *= 2,
            Err(e) => {
                return Err(format!(
                    "{} is not a readable GGUF model file: {e}",
                    src.url
                ))
            }
        }
    }
}

/// The first bytes of a local file that hold its header (doubling from 4 MiB).
fn read_local_prefix(path: &std::path::Path, file_len: u64) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::FileExt;
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mut want = FIRST_HEADER_READ;
    loop {
        let mut bytes = vec![0u8; want.min(file_len) as usize];
        file.read_exact_at(&mut bytes, 0)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        match Gguf::parse_header(&bytes, file_len) {
            Ok(_) => return Ok(bytes),
            Err(e) if e.wants_more_bytes() && want < file_len => want *= 2,
            Err(e) => {
                return Err(format!(
                    "{} is not a readable GGUF model file: {e}",
                    path.display()
                ))
            }
        }
    }
}

pub fn run(args: Args, globals: &crate::args::Globals) -> Result<(), String> {
    let device = device(&args.device)?;
    let (label, bytes, file_len) = header(&args.model)?;
    let gguf = Gguf::parse_header(&bytes, file_len).map_err(|e| format!("{label}: {e}"))?;
    let moe_pool = match args.moe_pool.as_deref() {
        None => None,
        Some("all") => Some(MoePool::All),
        Some(n) => Some(MoePool::Slots(
            n.parse()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("--moe-pool {n}: a number of experts per layer, or all"))?,
        )),
    };
    let base = EngineOptions {
        n_ctx: args.ctx,
        weights: args.weights.into(),
        state_f16: args.state_f16,
        cache_type_k: args.cache_type_k,
        cache_type_v: args.cache_type_v,
        memory: smolrun_engine::MemoryOptions {
            resident_bytes: args.resident_mb.map(|mb| mb.saturating_mul(1_000_000)),
            ..Default::default()
        },
        pager: smolrun_engine::PagerOptions {
            pool: moe_pool,
            experts: args.experts,
            ..Default::default()
        },
        ..globals.base_options()
    };
    let path = PathBuf::from(&label);
    let p = plan::plan(&path, &gguf, file_len, &device, &base)?;
    if args.json {
        println!("{}", json(&label, &gguf, file_len, &device, &p));
    } else {
        print_plan(&label, &gguf, file_len, &device, &p);
    }
    Ok(())
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

pub fn json(label: &str, g: &Gguf, file_len: u64, d: &Device, p: &DevicePlan) -> serde_json::Value {
    let mut out = serde_json::json!({
        "model": label,
        "architecture": g.architecture().unwrap_or("?"),
        "file_mb": mb(file_len),
        "device": d.name,
        "mem_mb": mb(d.mem),
        "flash_mb_s": d.flash_mbps,
        "weights": p.weights,
        "n_ctx": p.n_ctx,
        "kv_cache_type": p.kv_type.name(),
        "fits": p.refusal.is_none(),
        "resident_mb": mb(p.resident_bytes),
        "zone_mb": mb(p.zone_bytes),
        "total_mb": mb(p.total_bytes),
        "flash_mb_per_token": p.flash_mb_per_token,
        "flash_limit_tok_s": if p.flash_limit_tok_s.is_finite() {
            serde_json::json!(p.flash_limit_tok_s)
        } else {
            serde_json::Value::Null
        },
    });
    if let Some(pools) = &p.pools {
        out["moe_slots_per_layer"] = pools.slots_per_layer.into();
        out["moe_pool_mb"] = mb(pools.pool_bytes).into();
        out["moe_uniform_miss_rate"] = pools.uniform_miss_rate.into();
    }
    let parts: serde_json::Map<String, serde_json::Value> = p
        .parts
        .iter()
        .map(|(k, v)| (k.to_string(), mb(*v).into()))
        .collect();
    out["parts_mb"] = parts.into();
    out
}

/// The cache bias's measured trade-off (docs/moe.md, "A trained mixture of experts"): `fit`
/// sets no bias, and the plan says what one would cost.
const CACHE_BIAS_NOTE: &str = "cache bias: off (fit sets none; --moe-cache-bias B trades \
     quality for misses); measured on a small trained qwen3moe, 8 of 32 experts in RAM: B 0.05 \
     took misses from 49 % to 13 % for 0.2 % more bits per byte, B 0.3 to 0.4 % for 1.5 % more \
     (docs/moe.md, \"A trained mixture of experts\")";

pub fn print_plan(label: &str, g: &Gguf, file_len: u64, d: &Device, p: &DevicePlan) {
    println!(
        "{label}: {} model, {:.0} MB file",
        g.architecture().unwrap_or("?"),
        mb(file_len)
    );
    println!(
        "on {}: {:.0} MB of RAM, flash {:.0} MB/s{}{}",
        d.name,
        mb(d.mem),
        d.flash_mbps,
        d.address_space.map_or(String::new(), |a| format!(
            ", {:.0} MB of address space",
            mb(a)
        )),
        if d.cpu.is_empty() {
            String::new()
        } else {
            format!(", {}", d.cpu)
        }
    );
    for n in &p.notices {
        println!("  note: {n}");
    }
    println!(
        "weights: {} (what --weights auto picks), context {} tokens, KV cache {}",
        p.weights,
        p.n_ctx,
        p.kv_type.name()
    );
    println!("memory by part:");
    for (part, bytes) in &p.parts {
        if *bytes > 0 {
            println!("  {part:<26} {:>9.1} MB", mb(*bytes));
        }
    }
    println!("  {:<26} {:>9.1} MB", "total", mb(p.total_bytes));
    println!(
        "weights in RAM: {:.1} MB{}",
        mb(p.resident_bytes),
        if p.zone_bytes > 0 {
            format!(" resident + {:.1} MB of stream zones", mb(p.zone_bytes))
        } else {
            String::new()
        }
    );
    if let Some(pools) = &p.pools {
        println!(
            "expert pools: {} of {} experts per layer ({:.1} MB in all); {} used per token; \
             with uniform routing {:.0} % of them miss (an upper bound: real routers repeat)",
            pools.slots_per_layer,
            pools.n_expert,
            mb(pools.pool_bytes),
            pools.n_used,
            100.0 * pools.uniform_miss_rate
        );
        println!("{CACHE_BIAS_NOTE}");
    }
    if p.flash_mb_per_token > 0.0 {
        println!(
            "flash: {:.1} MB read per token; {:.0} MB/s limits generation to {:.2} tok/s",
            p.flash_mb_per_token, d.flash_mbps, p.flash_limit_tok_s
        );
    } else {
        println!("flash: nothing read per token once loaded (every weight stays in RAM)");
    }
    match &p.refusal {
        None => println!("fits: yes"),
        Some(why) => println!("fits: no\n{why}"),
    }
}
