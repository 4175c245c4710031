//! What a model needs on a device and what it will do there, from the GGUF header alone: the
//! answer `smolrun plan` gives before a multi-GB download. The decision is the one the engine
//! takes when it opens the file on that device ([`crate::file::place`] with the device's memory
//! and address space as the budget), so the plan and a real run agree by construction; the
//! figures are the memory plan's, the stream plan's and the pager's own.
//!
//! A device is a small profile: RAM for one process, flash bandwidth, address space, CPU and
//! threads. Presets cover the devices smolrun is built for; a user writes a file of the same
//! `key = value` lines for their own.

use crate::file::{self, weight_keys_from_header, Placement};
use crate::memory_guard;
use crate::moe::ExpertLayout;
use crate::options::{EngineOptions, KvCacheType, MemoryOptions};
use crate::EngineError;
use smolrun_core::gguf::Gguf;
use smolrun_core::model::{FfnShape, HParams, MemoryPlan, StreamPlan, TensorTable};
use std::path::Path;

/// A device as the plan sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    pub name: String,
    /// RAM one process may use, bytes.
    pub mem: u64,
    /// Sequential read bandwidth of its storage, MB/s (10^6 bytes).
    pub flash_mbps: f64,
    /// Address space a process may map for a model file (`None`: no tighter than the file).
    pub address_space: Option<u64>,
    /// The CPU, in words ("4x Cortex-A55, dotprod").
    pub cpu: String,
    /// ARMv8.2 dot-product instructions (the fast low-bit kernels).
    pub dotprod: bool,
    pub threads: usize,
}

/// The built-in profiles, as (name, profile text): the same format a user's own file has.
pub const PRESETS: &[(&str, &str)] = &[
    (
        "tv-box",
        "mem = 1G\nflash_mbps = 278\ncpu = 4x Cortex-A55 (Amlogic S7D)\ndotprod = yes\nthreads = 4\n",
    ),
    (
        "tv-box-headless",
        "mem = 1.15G\nflash_mbps = 278\ncpu = 4x Cortex-A55 (Amlogic S7D), launcher stopped\ndotprod = yes\nthreads = 4\n",
    ),
    (
        "ipad-air",
        "mem = 700M\naddress_space = 1.7G\nflash_mbps = 260\ncpu = 2x Apple A7 (ARMv8.0)\ndotprod = no\nthreads = 2\n",
    ),
    (
        "router-512m",
        "mem = 512M\nflash_mbps = 40\ncpu = 4x Cortex-A53\ndotprod = no\nthreads = 4\n",
    ),
    (
        "pi5-4g",
        "mem = 4G\nflash_mbps = 90\ncpu = 4x Cortex-A76 (SD card)\ndotprod = yes\nthreads = 4\n",
    ),
    (
        "pi5-8g",
        "mem = 8G\nflash_mbps = 90\ncpu = 4x Cortex-A76 (SD card)\ndotprod = yes\nthreads = 4\n",
    ),
];

impl Device {
    /// A built-in profile by name.
    pub fn preset(name: &str) -> Option<Device> {
        PRESETS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(n, text)| Device::parse(n, text).expect("built-in profiles parse"))
    }

    /// A profile from its text: `key = value` lines (`#` starts a comment): `mem` (a size:
    /// 800M, 1.5G), `flash_mbps`, `address_space` (a size), `cpu`, `dotprod` (yes/no),
    /// `threads`. `mem` and `flash_mbps` are required.
    pub fn parse(name: &str, text: &str) -> Result<Device, String> {
        let mut device = Device {
            name: name.to_string(),
            mem: 0,
            flash_mbps: 0.0,
            address_space: None,
            cpu: String::new(),
            dotprod: false,
            threads: 1,
        };
        let size = crate::options::parse_size;
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let at = |why: String| format!("{name}:{}: {why}", i + 1);
            let (key, value) = line
                .split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| at(format!("'{line}' is not a 'key = value' line")))?;
            match key {
                "mem" => device.mem = size(value).map_err(at)?,
                "address_space" => device.address_space = Some(size(value).map_err(at)?),
                "flash_mbps" => {
                    device.flash_mbps = value
                        .parse::<f64>()
                        .ok()
                        .filter(|v| v.is_finite() && *v > 0.0)
                        .ok_or_else(|| at(format!("flash_mbps '{value}': give MB/s, e.g. 278")))?
                }
                "cpu" => device.cpu = value.to_string(),
                "dotprod" => {
                    device.dotprod = match value {
                        "yes" | "true" => true,
                        "no" | "false" => false,
                        _ => return Err(at(format!("dotprod '{value}': yes or no"))),
                    }
                }
                "threads" => {
                    device.threads = value
                        .parse::<usize>()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| at(format!("threads '{value}': a count, 1 or more")))?
                }
                other => {
                    return Err(at(format!(
                        "unknown key '{other}' (mem, flash_mbps, address_space, cpu, dotprod, \
                         threads)"
                    )))
                }
            }
        }
        if device.mem == 0 || device.flash_mbps == 0.0 {
            return Err(format!(
                "{name}: a device profile needs at least 'mem = SIZE' and 'flash_mbps = MB/S'"
            ));
        }
        Ok(device)
    }

    /// The engine options a run on this device starts from: its memory as the budget, its
    /// address space, its flash and its threads.
    pub fn options(&self, base: &EngineOptions) -> EngineOptions {
        EngineOptions {
            threads: Some(self.threads),
            memory: MemoryOptions {
                budget: Some(self.mem),
                address_space: self.address_space.or(base.memory.address_space),
                flash_mbps: Some(self.flash_mbps),
                ..base.memory.clone()
            },
            ..base.clone()
        }
    }
}

/// The expert pools of a paged plan.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolPlan {
    pub slots_per_layer: usize,
    pub n_expert: usize,
    pub n_used: usize,
    pub moe_layers: usize,
    pub pool_bytes: u64,
    /// Share of a token's experts not in the pools if the router chose uniformly: an upper
    /// bound of the miss rate (real routers repeat themselves, and the pager keeps the
    /// frequent experts).
    pub uniform_miss_rate: f64,
}

/// What a model needs on a device and what it will do there.
#[derive(Debug, Clone, PartialEq)]
pub struct DevicePlan {
    /// The weights mode `--weights auto` picks: resident, stream, paged or pread.
    pub weights: &'static str,
    pub n_ctx: usize,
    /// The KV cache's type (the options', or the fitted file's run profile's).
    pub kv_type: KvCacheType,
    /// Bytes of weights held in RAM while running (mapped and read every token, the resident
    /// set of a streamed run, or the mapped non-experts and the pools).
    pub resident_bytes: u64,
    /// Stream zones (the ring of a streamed run), bytes.
    pub zone_bytes: u64,
    pub pools: Option<PoolPlan>,
    /// The run's memory by part (the memory guard's plan), bytes.
    pub parts: Vec<(&'static str, u64)>,
    pub total_bytes: u64,
    pub allowed_bytes: u64,
    /// The memory guard's refusal when it does not fit (with the numbers and what to try).
    pub refusal: Option<String>,
    /// MB (10^6 bytes) read from flash per generated token (paged: with uniform routing).
    pub flash_mb_per_token: f64,
    /// flash MB/s over flash MB per token: what no run can beat (infinite when nothing streams).
    pub flash_limit_tok_s: f64,
    pub notices: Vec<String>,
}

/// Plans `gguf` (a file of `file_len` bytes at `path`, which may be a URL: only its header was
/// read) on `device`, with `base` for what the device does not set (context, weights mode,
/// pager and state options).
pub fn plan(
    path: &Path,
    gguf: &Gguf,
    file_len: u64,
    device: &Device,
    base: &EngineOptions,
) -> Result<DevicePlan, EngineError> {
    let options = device.options(base);
    // Direct reads on eMMC and SD cards are 4 KiB aligned.
    let align = 4096;
    let placement = file::place(path, gguf, file_len, align, &options)?;
    // The KV cache's type the file was placed with (a fitted file's profile may set it).
    let options = options.with_kv_type(placement.kv_type);
    let hp = HParams::from_gguf(gguf)
        .map_err(|e| EngineError::bad_file(path, format!("{}: {e}", path.display())))?
        .with_state_f16(options.state_f16)
        .with_kv_type(options.kv_type()?);
    let n_ctx = placement.n_ctx;
    let mut memory = MemoryPlan::new(&hp, &gguf.tensors, gguf.data_offset, n_ctx);
    if options.pin_mtp() {
        memory = memory.with_mtp_drafting(&hp, n_ctx, crate::options::DEFAULT_MTP_DRAFT);
    }
    let table = TensorTable::new(gguf);
    let (mut resident, mut zones, mut pools, mut flash_bytes) = (memory.weights, 0, None, 0f64);
    let Placement {
        ref stream,
        ref pager,
        map,
        ..
    } = placement;
    if let Some(config) = stream {
        let (whole, _) = weight_keys_from_header(gguf);
        let plan = StreamPlan::new(&table, &whole, config.budget, align)
            .map_err(|e| EngineError::bad_file(path, format!("{}: {e}", path.display())))?;
        resident = plan.resident_bytes;
        zones = plan.zone_bytes;
        // A ring that holds every streamed weight at once keeps them from one token to the
        // next (a weight asked for again is still in its zone): nothing is read again.
        flash_bytes = match plan.zone_bytes >= plan.streamed_bytes {
            true => 0.0,
            false => plan.streamed_bytes as f64,
        };
        // A mixture of experts streamed (its pools could not hold a token's experts) reads
        // each chosen expert into a scratch slot when it is needed: every token, n_used
        // experts of every MoE layer from flash.
        let mut scratch = 0;
        if let Some(layout) = ExpertLayout::of(gguf, options.pager.experts) {
            flash_bytes += layout.n_used as f64 * layout.slot_bytes_all_layers as f64;
            scratch = layout.largest_slice;
        }
        memory = memory.with_weights_held(plan.resident_bytes + plan.zone_bytes + scratch);
    } else if let Some(settings) = pager {
        let layout = ExpertLayout::of(gguf, options.pager.experts).ok_or_else(|| {
            EngineError::bad_file(path, format!("{}: no expert tensors", path.display()))
        })?;
        let slots = settings.slots_per_layer.min(layout.n_expert);
        let moe_layers = hp
            .layers
            .iter()
            .filter(|l| matches!(l.ffn, FfnShape::Moe { .. }))
            .count()
            .max(1);
        let pool_bytes = slots as u64 * layout.slot_bytes_all_layers;
        let uniform_miss_rate = 1.0 - slots as f64 / layout.n_expert.max(1) as f64;
        // A token reads n_used experts per MoE layer; one expert of every layer is one slot's
        // bytes across the layers.
        flash_bytes =
            uniform_miss_rate * layout.n_used as f64 * layout.slot_bytes_all_layers as f64;
        resident = layout.held_bytes(slots);
        memory = memory.with_weights_held(resident);
        pools = Some(PoolPlan {
            slots_per_layer: slots,
            n_expert: layout.n_expert,
            n_used: layout.n_used,
            moe_layers,
            pool_bytes,
            uniform_miss_rate,
        });
    } else if !map {
        // pread: every weight read from flash every token, into one scratch buffer.
        let scratch = table.largest_weight();
        flash_bytes = memory.weights as f64;
        resident = 0;
        memory = memory.with_weights_held(scratch);
    }
    let refusal = match memory_guard::check_memory(
        path,
        gguf,
        n_ctx,
        &options,
        (stream.is_some() || pager.is_some() || !map).then_some(resident + zones),
    ) {
        Ok(_) => None,
        Err(EngineError::DoesNotFit { message, .. }) => Some(message),
        Err(e) => return Err(e),
    };
    let flash_mb_per_token = flash_bytes / 1e6;
    Ok(DevicePlan {
        weights: placement.mode(),
        n_ctx,
        kv_type: placement.kv_type,
        resident_bytes: resident,
        zone_bytes: zones,
        pools,
        parts: memory.parts().to_vec(),
        total_bytes: memory.total(),
        allowed_bytes: device.mem,
        refusal,
        flash_mb_per_token,
        flash_limit_tok_s: if flash_mb_per_token > 0.0 {
            device.flash_mbps / flash_mb_per_token
        } else {
            f64::INFINITY
        },
        notices: placement.notices,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse_and_bad_profiles_say_why() {
        for (name, _) in PRESETS {
            let d = Device::preset(name).unwrap();
            assert!(d.mem > 0 && d.flash_mbps > 0.0 && d.threads > 0, "{name}");
        }
        let ipad = Device::preset("ipad-air").unwrap();
        assert_eq!(ipad.address_space, Some((17 << 30) / 10));
        assert!(!ipad.dotprod);
        assert!(Device::preset("tv-box").unwrap().dotprod);
        let e = Device::parse("mine", "mem = 1G").unwrap_err();
        assert!(e.contains("flash_mbps"), "{e}");
        let e = Device::parse("mine", "mem = 1G\nflash_mbps = fast\n").unwrap_err();
        assert!(e.contains("mine:2") && e.contains("give MB/s"), "{e}");
        let e = Device::parse("mine", "mem = 1G\nflash_mbps = 9\nram = 2G").unwrap_err();
        assert!(e.contains("unknown key 'ram'"), "{e}");
        let d = Device::parse("mine", "# my box\nmem = 2G  # free\nflash_mbps = 120\n").unwrap();
        assert_eq!((d.mem, d.flash_mbps), (2 << 30, 120.0));
    }
}
