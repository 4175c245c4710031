//! A run's state is carved from one region by its plan: for every model family (and the
//! options that change the state: batch, verify rows, MTP drafting), the arena hands out
//! exactly what the plan counted, part by part, and its high-water mark is the plan's total;
//! the memory guard's plan (`MemoryPlan`) counts the same parts; a state in an anonymous
//! mapping gives the same logits as one on the heap, through the resident and the pread
//! store; a region too small or misaligned is refused with the plan before anything is written.
//! The weight stores' read targets are carved the same way: the streaming store's zones and
//! direct-read scratch, and the expert pools' slots, each from a region of exactly their plan,
//! whose high-water mark is the plan's total; the stream and paged stores with their buffers
//! in mappings give the resident store's logits.

use smolrun_core::arena::{ArenaError, Part, Region};
use smolrun_core::gguf::Gguf;
use smolrun_core::kernels::KernelSet;
use smolrun_core::model::expert_cache::Eviction;
use smolrun_core::model::pager::{slot_plan, ExpertPool, PagerConfig};
use smolrun_core::model::stream::{StreamBudget, StreamPlan, StreamStore};
use smolrun_core::model::{
    HParams, MemoryPlan, Model, ModelError, ResidentStore, State, StateOptions, WeightStore,
};
use smolrun_core::platform::SingleThread;
use smolrun_linux::{anonymous_region_for, CondSignal, FileReader, MappedFile};
use smolrun_tests::{model_path, paged_store, pread_store, streaming_store, StreamSetup};
use std::ptr::NonNull;

/// One model of each family smolrun runs (llama, qwen2, qwen3, qwen3moe, qwen2moe,
/// bailingmoe2, gemma3, qwen35, smollm3, phi3, olmoe, qwen35moe, lfm2, lfm2moe, smallthinker,
/// granitehybrid), and a lookup-table model (Q2_0: aarch64 kernels carve their activation
/// tables).
const FAMILIES: [&str; 17] = [
    "synthetic-llama",
    "qwen2.5-coder-0.5b",
    "synthetic-qwen3",
    "synthetic-qwen3moe",
    "synthetic-qwen2moe",
    "synthetic-bailingmoe2",
    "gemma3-270m",
    "synthetic-qwen35",
    "synthetic-qwen3-q2_0",
    "synthetic-smollm3",
    "synthetic-phi3",
    "synthetic-olmoe",
    "synthetic-qwen35moe",
    "synthetic-lfm2",
    "synthetic-lfm2moe",
    "synthetic-smallthinker",
    "synthetic-granitehybrid",
];

fn options(mtp: bool) -> Vec<(StateOptions, &'static str)> {
    let mut all = vec![
        (StateOptions::new(256), "-c 256"),
        (
            StateOptions {
                n_ctx: 100,
                n_batch: 1,
                n_logits: 1,
                mtp: false,
            },
            "-c 100, token by token",
        ),
        (
            StateOptions {
                n_ctx: 512,
                n_batch: 16,
                n_logits: 6,
                mtp: false,
            },
            "-c 512, verify passes of 6",
        ),
    ];
    if mtp {
        all.push((
            StateOptions {
                n_ctx: 256,
                n_batch: 32,
                n_logits: 4,
                mtp: true,
            },
            "-c 256, MTP drafting",
        ));
    }
    all
}

#[test]
fn the_arena_hands_out_exactly_the_plan_for_every_family() {
    let kernels = KernelSet::select(&smolrun_linux::detect_features());
    for name in FAMILIES {
        let path = model_path(name);
        let file = MappedFile::open(&path).unwrap();
        let gguf = Gguf::parse(file.bytes()).unwrap();
        let mut model = Model::load_with_kernels(&gguf, &kernels).unwrap();
        let mtp = model.hp.mtp_layer().is_some() && model.hp.n_nextn == 1;
        if mtp {
            let store = ResidentStore::new(&gguf);
            model.load_mtp(&gguf, &store, &kernels).unwrap();
        }
        for (opts, what) in options(mtp) {
            let plan = State::plan(&model, &opts).unwrap();
            let state =
                State::in_region(&model, &opts, anonymous_region_for(&plan).unwrap()).unwrap();
            let usage = state.arena();
            for part in Part::ALL {
                assert_eq!(
                    usage.used(part) as u64,
                    plan.bytes(part),
                    "{name}, {what}: part '{}'",
                    part.name()
                );
            }
            assert_eq!(usage.high_water() as u64, plan.total(), "{name}, {what}");
            assert_eq!(state.memory_bytes() as u64, plan.total(), "{name}, {what}");
            assert_eq!(usage.region, "anonymous mmap");
            assert_eq!(usage.region_bytes as u64, plan.total(), "{name}, {what}");
            // Every family has a KV cache or a recurrent state, activations and logits.
            for part in [Part::Activations, Part::Logits, Part::LayerTable] {
                assert!(
                    plan.bytes(part) > 0,
                    "{name}, {what}: empty '{}'",
                    part.name()
                );
            }
            assert_eq!(plan.bytes(Part::Mtp) > 0, opts.mtp, "{name}, {what}");
            let recurrent = matches!(
                model.hp.arch.as_str(),
                "qwen35" | "qwen35moe" | "lfm2" | "lfm2moe" | "granitehybrid"
            );
            assert_eq!(plan.bytes(Part::RecurrentState) > 0, recurrent, "{name}");
        }
        // The memory guard's plan counts the state's parts from the same plan (its lookup
        // tables are counted whatever the kernels, so the Q2_0 model's may differ on x86).
        let hp = HParams::from_gguf(&gguf).unwrap();
        let guard = MemoryPlan::new(&hp, &gguf.tensors, gguf.data_offset, 256);
        let state_plan = State::plan(&model, &StateOptions::new(256)).unwrap();
        if model.act_table_bytes() > 0 || !name.ends_with("q2_0") {
            assert_eq!(guard.arena, state_plan, "{name}: MemoryPlan's arena");
        } else {
            assert!(guard.arena.bytes(Part::Scratch) > state_plan.bytes(Part::Scratch));
        }
        let sampler = 20 * hp.n_vocab as u64;
        assert_eq!(
            guard.kv_cache + guard.recurrent_state + guard.activations + guard.logits - sampler,
            guard.arena.total(),
            "{name}"
        );
    }
}

/// A state in an anonymous mapping and one on the heap run the same bits, through the resident
/// and the pread store (a streamed and a paged run are checked allocation-free on the heap
/// state in decode_no_alloc.rs: the store does not see where the state lives).
#[test]
fn a_state_in_a_mapping_runs_as_one_on_the_heap() {
    for name in ["synthetic-qwen3", "synthetic-qwen35", "synthetic-qwen3moe"] {
        let path = model_path(name);
        let file = MappedFile::open(&path).unwrap();
        let gguf = Gguf::parse(file.bytes()).unwrap();
        let model = Model::load(&gguf).unwrap();
        let resident = ResidentStore::new(&gguf);
        let pread = pread_store(&path, &gguf);
        let stores: [(&dyn WeightStore, &str); 2] = [(&resident, "resident"), (&pread, "pread")];
        let prompt = [1u32, 5, 9, 33, 2, 7];
        let opts = StateOptions::new(64);
        let mut heap = State::new(&model, 64).unwrap();
        let want: Vec<u32> = run(&model, &mut heap, &resident, &prompt);
        assert_eq!(heap.arena().region, "heap");
        for (store, what) in stores {
            let plan = State::plan(&model, &opts).unwrap();
            let region = anonymous_region_for(&plan).unwrap();
            let mut mapped = State::in_region(&model, &opts, region).unwrap();
            assert_eq!(
                run(&model, &mut mapped, store, &prompt),
                want,
                "{name}, {what}"
            );
        }
    }
}

#[test]
fn the_stream_zones_are_carved_exactly_by_their_plan() {
    let kernels = KernelSet::select(&smolrun_linux::detect_features());
    for name in ["synthetic-qwen3", "synthetic-qwen3moe", "synthetic-qwen35"] {
        let path = model_path(name);
        let file = MappedFile::open(&path).unwrap();
        let gguf = Gguf::parse(file.bytes()).unwrap();
        // Nothing resident, then half the weights: the rest streams through the ring; the
        // experts are read into the direct scratch.
        for resident_half in [0u64, 1] {
            let reader = FileReader::open(&path).unwrap();
            let mut store =
                StreamStore::new(reader, &gguf, CondSignal::default(), CondSignal::default())
                    .unwrap();
            let model = Model::load_from(&gguf, &store, &kernels).unwrap();
            let plan_for = |budget| {
                StreamPlan::new(
                    store.table(),
                    &model.weight_order(),
                    StreamBudget::Resident(budget),
                    store.alignment(),
                )
                .unwrap()
            };
            let budget = plan_for(0).streamed_bytes / 2 * resident_half;
            let plan = plan_for(budget);
            let keys = model.expert_keys();
            let zones = store.zone_plan(&plan, &keys).unwrap();
            let what = format!("{name}, resident budget {budget}");
            assert!(plan.zone_bytes > 0, "{what}: nothing streamed");
            assert_eq!(zones.total(), zones.bytes(Part::StreamZones), "{what}");
            assert!(zones.bytes(Part::StreamZones) >= plan.zone_bytes, "{what}");
            // A region one direct-read block short is refused before the store takes it.
            let short = zones.total_usize().unwrap() - zones.align(Part::StreamZones);
            let err = store
                .plan(&plan, &keys, false, Region::heap(short).unwrap())
                .unwrap_err();
            assert!(
                matches!(err, ModelError::Arena(ArenaError::RegionTooSmall { .. })),
                "{what}: {err}"
            );
            store
                .plan(&plan, &keys, false, anonymous_region_for(&zones).unwrap())
                .unwrap();
            let usage = store.zone_usage().expect("planned");
            assert_eq!(usage.region, "anonymous mmap", "{what}");
            assert_eq!(usage.plan, zones, "{what}");
            assert_eq!(usage.high_water() as u64, zones.total(), "{what}");
            assert_eq!(
                usage.used(Part::StreamZones) as u64,
                zones.bytes(Part::StreamZones),
                "{what}"
            );
        }
    }
}

#[test]
fn the_expert_slots_are_carved_exactly_by_their_plan() {
    for name in [
        "synthetic-qwen3moe",
        "synthetic-qwen2moe",
        "synthetic-bailingmoe2",
        "synthetic-olmoe",
        "synthetic-qwen35moe",
        "synthetic-lfm2moe",
        "synthetic-smallthinker",
    ] {
        let path = model_path(name);
        let file = MappedFile::open(&path).unwrap();
        let gguf = Gguf::parse(file.bytes()).unwrap();
        let model = Model::load(&gguf).unwrap();
        let groups = model.expert_groups();
        let n_used = groups.iter().map(|g| g.n_used).max().unwrap();
        let n_expert = groups.iter().map(|g| g.n_expert).max().unwrap();
        for slots in [n_used, n_used + 1, n_expert, 2 * n_expert] {
            let what = format!("{name}, {slots} slots per layer");
            let config = PagerConfig {
                slots_per_layer: slots,
                eviction: Eviction::DEFAULT,
            };
            let reader = FileReader::open(&path).unwrap();
            let plan = slot_plan(&reader, &gguf, &groups, config).unwrap();
            assert_eq!(plan.total(), plan.bytes(Part::ExpertSlots), "{what}");
            let pool = ExpertPool::new(
                reader,
                &gguf,
                &groups,
                config,
                CondSignal::default(),
                CondSignal::default(),
                anonymous_region_for(&plan).unwrap(),
            )
            .unwrap();
            let usage = pool.slot_usage();
            assert_eq!(usage.plan, plan, "{what}");
            assert_eq!(usage.high_water() as u64, plan.total(), "{what}");
            // Every slot's bytes are the pools' (each layer's buffer a multiple of the
            // alignment already: the plan rounds nothing up).
            assert_eq!(pool.pool_bytes(), plan.total(), "{what}");
        }
        // A region smaller than the plan is refused before the pool is built.
        let config = PagerConfig {
            slots_per_layer: n_used,
            eviction: Eviction::DEFAULT,
        };
        let reader = FileReader::open(&path).unwrap();
        let plan = slot_plan(&reader, &gguf, &groups, config).unwrap();
        let short = Region::heap(plan.total_usize().unwrap() - 64).unwrap();
        let err = ExpertPool::new(
            reader,
            &gguf,
            &groups,
            config,
            CondSignal::default(),
            CondSignal::default(),
            short,
        )
        .err()
        .expect("refused");
        assert!(
            matches!(err, ModelError::Arena(ArenaError::RegionTooSmall { .. })),
            "{name}: {err}"
        );
    }
}

#[test]
fn the_stream_and_paged_stores_with_their_buffers_in_mappings_run_as_resident() {
    let kernels = KernelSet::select(&smolrun_linux::detect_features());
    for name in ["synthetic-qwen3", "synthetic-qwen3moe", "synthetic-qwen35"] {
        let path = model_path(name);
        let file = MappedFile::open(&path).unwrap();
        let gguf = Gguf::parse(file.bytes()).unwrap();
        let model = Model::load_from(&gguf, &ResidentStore::new(&gguf), &kernels).unwrap();
        let prompt = [1u32, 5, 9, 33, 2, 7];
        let mut state = State::new(&model, 64).unwrap();
        let want = run(&model, &mut state, &ResidentStore::new(&gguf), &prompt);
        let reader = FileReader::open(&path).unwrap();
        let setup = StreamSetup {
            budget: StreamBudget::Resident(0),
            zone: None,
            readers: 2,
            verify: false,
        };
        let (ms, stream, _) = streaming_store(reader, &gguf, &kernels, setup);
        let mut state = State::new(&ms, 64).unwrap();
        assert_eq!(
            run(&ms, &mut state, &stream, &prompt),
            want,
            "{name}, stream"
        );
        if !model.expert_groups().is_empty() {
            let reader = FileReader::open(&path).unwrap();
            let n_used = model.expert_groups()[0].n_used;
            let paged = paged_store(&gguf, &model, reader, n_used + 1, 2).unwrap();
            let mut state = State::new(&model, 64).unwrap();
            assert_eq!(
                run(&model, &mut state, &paged, &prompt),
                want,
                "{name}, paged"
            );
        }
    }
}

/// The prompt, then 8 greedy tokens; the logits' bits of each step.
fn run(model: &Model, state: &mut State, store: &dyn WeightStore, prompt: &[u32]) -> Vec<u32> {
    let par = SingleThread;
    let mut bits = Vec::new();
    let mut logits = model.forward_batch(state, store, &par, prompt, 0).unwrap();
    for i in 0..8 {
        bits.extend(logits.iter().map(|v| v.to_bits()));
        let next = smolrun_tests::argmax(logits);
        logits = model
            .forward(state, store, &par, next, prompt.len() + i)
            .unwrap();
    }
    bits
}

/// A region over a buffer the test keeps (released by nobody), to see what was written.
fn region_over(buf: &mut [u8], offset: usize, len: usize) -> Region {
    let base = NonNull::new(buf[offset..].as_mut_ptr()).unwrap();
    // SAFETY: `buf` outlives the region's use in these tests (the state made from it, if
    // any, is dropped before `buf` is read), and is not zero (so it is not claimed to be).
    unsafe { Region::from_raw_parts(base, len, false, None, "test buffer") }
}

#[test]
fn a_region_too_small_or_misaligned_is_refused_before_anything_is_written() {
    let path = model_path("synthetic-qwen3");
    let file = MappedFile::open(&path).unwrap();
    let gguf = Gguf::parse(file.bytes()).unwrap();
    let model = Model::load(&gguf).unwrap();
    let opts = StateOptions::new(128);
    let plan = State::plan(&model, &opts).unwrap();
    let total = plan.total() as usize;
    // A page-aligned buffer with room to spare: 4096 extra bytes to slide the start.
    let mut backing = vec![0xA5u8; total + 2 * 4096];
    let start = backing.as_ptr().align_offset(4096);

    let err = match State::in_region(&model, &opts, region_over(&mut backing, start, total - 1)) {
        Err(e) => e,
        Ok(_) => panic!("a region one byte short was accepted"),
    };
    let msg = err.to_string();
    assert!(
        matches!(err, ModelError::Arena(ArenaError::RegionTooSmall { .. })),
        "{msg}"
    );
    assert!(
        msg.contains(&format!(
            "is {} bytes but its plan needs {total} (1 more)",
            total - 1
        )),
        "{msg}"
    );
    for (part, bytes) in plan.parts().filter(|p| p.1 > 0) {
        assert!(msg.contains(part.name()), "{} missing: {msg}", part.name());
        assert!(msg.contains(&bytes.to_string()), "{bytes} missing: {msg}");
    }
    assert!(
        backing.iter().all(|&b| b == 0xA5),
        "a refused region was written"
    );

    let err = match State::in_region(&model, &opts, region_over(&mut backing, start + 8, total)) {
        Err(e) => e,
        Ok(_) => panic!("a region 8 bytes off a cache line was accepted"),
    };
    assert!(
        matches!(
            err,
            ModelError::Arena(ArenaError::Misaligned { needed: 64, .. })
        ),
        "{err}"
    );
    assert!(
        backing.iter().all(|&b| b == 0xA5),
        "a refused region was written"
    );

    // The exact size, aligned: carved, and every buffer handed out zeroed.
    let state = State::in_region(&model, &opts, region_over(&mut backing, start, total)).unwrap();
    assert_eq!(state.memory_bytes(), total);
    assert!(state.logits().iter().all(|&v| v == 0.0));
    drop(state);
    assert!(backing[..start].iter().all(|&b| b == 0xA5));
    assert!(
        backing[start + total..].iter().all(|&b| b == 0xA5),
        "wrote past the region"
    );
}
