//! A language model with no operating system: smolrun-core on bare aarch64 (qemu -M virt).
//!
//! ```text
//! boot.rs   reset -> EL1, FP/SIMD on, .bss zeroed, stack, exception vectors, MMU on
//! cpu.rs    ID_AA64PFR0/ISAR0/ISAR1 -> CpuFeatures -> KernelSet::select (NEON, sdot only
//!           when ID_AA64ISAR0_EL1.DP says so)
//! heap.rs   bump allocator over the bottom of the static region: what loading needs
//! main.rs   the GGUF in the image (include_bytes!) -> tokenizer, model, repacked weights
//!           -> State carved from the top of the static region by core's arena
//!           -> prompt, greedy tokens, text on the PL011 UART -> semihosting exit
//! ```
//!
//! The generation is `smolrun run -m MODEL -p PROMPT -n N --temp 0`'s: the prompt tokenized
//! with BOS and special tokens parsed, run in batches of 32, penalised (with a repeat penalty
//! of 1: no-op), then greedy tokens until N, an end-of-generation token or a full context.
#![no_std]
#![no_main]

extern crate alloc;

mod boot;
mod cpu;
mod heap;
mod semihosting;
mod uart;

use alloc::string::String;
use alloc::vec::Vec;
use core::mem::MaybeUninit;
use smolrun_core::arena::Region;
use smolrun_core::gguf::Gguf;
use smolrun_core::kernels::KernelSet;
use smolrun_core::model::repack::RepackPlan;
use smolrun_core::model::{Model, ResidentStore, State, StateOptions};
use smolrun_core::platform::SingleThread;
use smolrun_core::sampler::{Sampler, SamplerParams};
use smolrun_core::tokenizer::{StreamDecoder, Tokenizer};

/// Page-aligns what it holds: the model's bytes, whose tensors the kernels read in place.
#[repr(C, align(4096))]
pub struct Aligned<T: ?Sized>(T);

include!(concat!(env!("OUT_DIR"), "/config.rs"));

#[global_allocator]
static HEAP: heap::Bump = heap::Bump::new();

extern "C" {
    static mut __memory_start: u8;
    static mut __memory_end: u8;
}

/// Lines the script reads the generated text between.
const TEXT_BEGIN: &str = "--- text ---";
const TEXT_END: &str = "--- end ---";

/// MiB, as the boot log prints them.
fn mb(bytes: usize) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

pub fn main() -> ! {
    match run() {
        Ok(()) => semihosting::exit(0),
        Err(e) => {
            println!("\nERROR: {e}");
            semihosting::exit(1)
        }
    }
}

fn run() -> Result<(), String> {
    let t0 = cpu::seconds();
    // The linker script reserves __memory_start..__memory_end for this region; only the
    // addresses are taken here.
    let (start, end) = (
        core::ptr::addr_of_mut!(__memory_start) as usize,
        core::ptr::addr_of_mut!(__memory_end) as usize,
    );
    HEAP.init(start, end);
    let regs = cpu::id_registers();
    let features = regs.features();
    let kernels = match SCALAR_KERNELS {
        true => KernelSet::scalar(),
        false => KernelSet::select(&features),
    };
    println!(
        "smolrun bare-metal: MIDR_EL1 {:#x}, ID_AA64ISAR0_EL1 {:#x} (DP {}), ID_AA64PFR0_EL1 {:#x} -> kernels {}",
        regs.midr,
        regs.isar0,
        (regs.isar0 >> 44) & 0xf,
        regs.pfr0,
        kernels.name()
    );
    println!(
        "model {MODEL_NAME}: {:.1} MiB in the image at {:#x}; static region {:.1} MiB at {start:#x}",
        mb(MODEL.0.len()),
        MODEL.0.as_ptr() as usize,
        mb(end - start)
    );

    let err = |what: &str, e: &dyn core::fmt::Display| alloc::format!("{MODEL_NAME}: {what}: {e}");
    let gguf = Gguf::parse(&MODEL.0).map_err(|e| err("parse", &e))?;
    let tokenizer = Tokenizer::from_gguf(&gguf).map_err(|e| err("tokenizer", &e))?;
    let heap_tokenizer = HEAP.in_use();
    let store = ResidentStore::new(&gguf);
    let model = Model::load_from(&gguf, &store, &kernels).map_err(|e| err("load", &e))?;
    // Weights repacked for this CPU's interleaved kernels, in memory (no cache file here).
    let plan = RepackPlan::new(&model).map_err(|e| err("repack plan", &e))?;
    let store = if plan.is_empty() {
        store
    } else {
        let mut copy = alloc::vec![0u8; plan.file_len];
        for i in 0..plan.entries.len() {
            plan.repack_entry(&store, i, &mut copy)
                .map_err(|e| err("repack", &e))?;
        }
        let weights = plan
            .weights(alloc::boxed::Box::new(copy), gguf.tensors.len())
            .map_err(|e| err("repack", &e))?;
        ResidentStore::new(&gguf).with_repacked(weights)
    };
    println!(
        "loaded in {:.1} s: heap {:.1} MiB in {} allocations (tokenizer {:.1} MiB, repacked weights {:.1} MiB)",
        cpu::seconds() - t0,
        mb(HEAP.in_use()),
        HEAP.allocations(),
        mb(heap_tokenizer),
        mb(plan.repacked_bytes())
    );

    let mut prompt = Vec::new();
    tokenizer.encode(PROMPT, true, true, &mut prompt);
    if prompt.is_empty() {
        return Err("the prompt has no tokens".into());
    }
    let n_ctx = (prompt.len() + N_PREDICT + 1).min(model.hp.n_ctx_train);
    let opts = StateOptions::new(n_ctx);
    let arena_plan = State::plan(&model, &opts).map_err(|e| err("state plan", &e))?;
    let arena_bytes = arena_plan
        .total_usize()
        .map_err(|e| err("state plan", &e))?;
    // The arena: the top of the static region, aligned as the plan asks; the heap stops
    // below it.
    let arena_start = end
        .checked_sub(arena_bytes)
        .map(|a| a & !(arena_plan.region_alignment() - 1))
        .filter(|&a| a >= HEAP.next() && HEAP.shrink_to(a))
        .ok_or_else(|| {
            alloc::format!(
                "the static region ({:.1} MiB) cannot hold the heap ({:.1} MiB) and the run's state \
                 ({:.1} MiB): build with a larger SMOLRUN_BM_MEMORY_MB. The state's plan:\n{arena_plan}",
                mb(end - start),
                mb(HEAP.in_use()),
                mb(arena_bytes)
            )
        })?;
    // SAFETY: arena_start..end lies in the static region, above everything the heap handed
    // out and beyond its new limit: nothing else will ever reach it.
    let region_bytes: &'static mut [MaybeUninit<u8>] = unsafe {
        core::slice::from_raw_parts_mut(arena_start as *mut MaybeUninit<u8>, end - arena_start)
    };
    let heap_before_state = HEAP.allocations();
    let mut state = State::in_region(&model, &opts, Region::from_static(region_bytes))
        .map_err(|e| err("state", &e))?;
    let usage = *state.arena();
    println!("{usage}");
    println!(
        "state carved with {} heap allocations",
        HEAP.allocations() - heap_before_state
    );

    let params = SamplerParams {
        temperature: 0.0,
        repeat_penalty: 1.0,
        seed: 0,
        ..SamplerParams::default()
    };
    let mut sampler = Sampler::new(model.n_vocab(), params).map_err(|e| err("sampler", &e))?;
    for id in tokenizer.n_vocab()..model.n_vocab() {
        sampler.ban(id as u32);
    }
    let par = SingleThread;
    println!("prompt: {} tokens, n_ctx {n_ctx}", prompt.len());
    let t_prompt = cpu::seconds();
    model
        .forward_batch(&mut state, &store, &par, &prompt, 0)
        .map_err(|e| err("prompt", &e))?;
    let prompt_s = cpu::seconds() - t_prompt;
    for &t in &prompt {
        sampler.accept(t);
    }
    println!("{TEXT_BEGIN}");
    let t_gen = cpu::seconds();
    let (mut decoder, mut piece) = (StreamDecoder::new(), String::new());
    let mut pos = prompt.len();
    let mut generated = 0;
    let mut stop = "length";
    while generated < N_PREDICT {
        let token = sampler
            .sample(state.logits())
            .map_err(|e| err("sampling", &e))?
            .token;
        if tokenizer.is_eog(token) {
            stop = "end of text";
            break;
        }
        piece.clear();
        decoder.push(&tokenizer, token, &mut piece);
        print!("{piece}");
        sampler.accept(token);
        generated += 1;
        if generated >= N_PREDICT {
            break;
        }
        if pos >= n_ctx {
            stop = "context full";
            break;
        }
        model
            .forward(&mut state, &store, &par, token, pos)
            .map_err(|e| err("decode", &e))?;
        pos += 1;
    }
    piece.clear();
    decoder.finish(&mut piece);
    print!("{piece}");
    println!("\n{TEXT_END}");
    let gen_s = cpu::seconds() - t_gen;
    println!(
        "prompt: {} tokens in {prompt_s:.2} s | generated: {generated} tokens in {gen_s:.2} s ({:.2} tok/s) | stop: {stop}",
        prompt.len(),
        generated as f64 / gen_s.max(1e-9)
    );
    println!(
        "static region peak: {:.2} MiB of {:.1} MiB = heap peak {:.2} MiB (loading) + arena {:.2} MiB (run state, plan {:.2} MiB)",
        mb(HEAP.peak() + (end - arena_start)),
        mb(end - start),
        mb(HEAP.peak()),
        mb(usage.high_water()),
        mb(usage.plan.total() as usize)
    );
    Ok(())
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    println!("\nPANIC: {info}");
    semihosting::exit(2)
}
