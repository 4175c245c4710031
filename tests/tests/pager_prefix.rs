//! The iPad case: an experts-last file (`smolrun gguf experts-last`) of which only the
//! non-expert prefix is mapped (`MappedFile::open_prefix`, `ResidentStore::over_prefix`), the
//! experts paged from the file by the expert pager: the logits equal the all-resident run of
//! the original file to the bit, on both synthetic mixtures of experts.
//!
//! Run in release mode: `cargo test --release -p smolrun-tests --test pager_prefix`.

use smolrun_core::arena::Region;
use smolrun_core::gguf::EXPERT_DATA_OFFSET_KEY;
use smolrun_core::gguf::{
    expert_data_offset, is_expert_tensor, Gguf, GgufWriter, MetaValue, TensorInfo,
};
use smolrun_core::kernels::KernelSet;
use smolrun_core::model::expert_cache::Eviction;
use smolrun_core::model::pager::{slot_plan, ExpertPool, PagedStore, PagerConfig};
use smolrun_core::model::{Model, ResidentStore};
use smolrun_linux::{start_expert_readers, CondSignal, FileReader, MappedFile};
use smolrun_tests::*;
use std::path::Path;
use std::sync::Arc;

/// The experts-last layout of `g`, written whole (the synthetic files are small; the CLI
/// streams).
fn experts_last_bytes(g: &Gguf) -> Vec<u8> {
    let build = |offset: u64| {
        let mut w = GgufWriter::new();
        for e in g
            .metadata
            .iter()
            .filter(|e| e.key != EXPERT_DATA_OFFSET_KEY)
        {
            w.add(e.key, MetaValue::from(e.value)).unwrap();
        }
        w.add(EXPERT_DATA_OFFSET_KEY, offset).unwrap();
        let (experts, others): (Vec<&TensorInfo>, Vec<&TensorInfo>) =
            g.tensors.iter().partition(|t| is_expert_tensor(t));
        for t in others.iter().chain(&experts) {
            w.add_tensor(t.name, t.ggml_type, t.shape()).unwrap();
        }
        (w, others.len(), [others, experts].concat())
    };
    let (probe, first_expert, _) = build(0);
    let offset = probe.header().len() as u64 + probe.tensor_offset(first_expert);
    let (w, _, order) = build(offset);
    let data: Vec<&[u8]> = order.iter().map(|t| g.tensor_data(t)).collect();
    w.to_bytes(&data).unwrap()
}

#[test]
fn paged_over_the_prefix_equals_resident_to_the_bit() {
    for model in ["synthetic-qwen3moe", "synthetic-bailingmoe2"] {
        let path = model_path(model);
        let kernels = KernelSet::select(&smolrun_linux::detect_features());
        let file = MappedFile::open(&path).unwrap();
        let g = Gguf::parse(file.bytes()).unwrap();
        let resident = ResidentStore::new(&g);
        let m = Model::load_from(&g, &resident, &kernels).unwrap();
        let want = logits_through(&m, &resident, model, 8);

        let last =
            std::env::temp_dir().join(format!("smolrun-prefix-{model}-{}", std::process::id()));
        std::fs::write(&last, experts_last_bytes(&g)).unwrap();
        let file_len = std::fs::metadata(&last).unwrap().len();
        let whole = MappedFile::open(&last).unwrap();
        let offset = expert_data_offset(&Gguf::parse(whole.bytes()).unwrap())
            .unwrap()
            .unwrap();
        drop(whole);
        let prefix = MappedFile::open_prefix(Path::new(&last), offset).unwrap();
        let h = Gguf::parse_header(prefix.bytes(), file_len).unwrap();
        let inner = ResidentStore::over_prefix(prefix.bytes(), &h).unwrap();
        let m = Model::load_from(&h, &inner, &kernels).unwrap();
        let groups = m.expert_groups();
        let config = PagerConfig {
            slots_per_layer: groups[0].n_used + 1,
            eviction: Eviction::DEFAULT,
        };
        let reader = FileReader::open(&last).unwrap();
        let slots = slot_plan(&reader, &h, &groups, config).unwrap();
        let region = Region::heap(slots.total_usize().unwrap()).unwrap();
        let pool = Arc::new(
            ExpertPool::new(
                reader,
                &h,
                &groups,
                config,
                CondSignal::default(),
                CondSignal::default(),
                region,
            )
            .unwrap(),
        );
        let threads: Box<dyn Send + Sync> = Box::new(start_expert_readers(&pool, 2).unwrap());
        let store = PagedStore::new(inner, pool, Some(threads));
        let got = logits_through(&m, &store, model, 8);
        let _ = std::fs::remove_file(&last);
        assert_eq!(want.len(), got.len());
        let differ = want
            .iter()
            .zip(&got)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(differ, 0, "{model}: {differ} logits differ");
        eprintln!("{model}: {offset} of {file_len} bytes mapped, paged logits bit-identical");
    }
}

/// By hand, on a full-size experts-last file (tools/oracle/ling_shaped.py --experts-last, or
/// `smolrun gguf experts-last`), under an address-space cap that the whole file exceeds:
/// `ulimit -v 2000000; SMOLRUN_LING_SHAPED=FILE SMOLRUN_SLOTS=32 cargo test --release -p
/// smolrun-tests --test pager_prefix -- --ignored --nocapture`
#[test]
#[ignore = "needs SMOLRUN_LING_SHAPED=FILE, an experts-last file of several GB"]
fn a_big_experts_last_file_runs_from_its_prefix_and_the_pager() {
    use smolrun_core::model::{State, WeightStore};
    use smolrun_core::platform::SingleThread;
    let path = std::env::var("SMOLRUN_LING_SHAPED").expect("SMOLRUN_LING_SHAPED=FILE");
    let slots: usize = std::env::var("SMOLRUN_SLOTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(32);
    let path = Path::new(&path);
    let file_len = std::fs::metadata(path).unwrap().len();
    let offset = {
        let head = MappedFile::open_prefix(path, file_len.min(64 << 20)).unwrap();
        let g = Gguf::parse_header(head.bytes(), file_len).unwrap();
        expert_data_offset(&g)
            .unwrap()
            .expect("not an experts-last file")
    };
    let prefix = MappedFile::open_prefix(path, offset).unwrap();
    let h = Gguf::parse_header(prefix.bytes(), file_len).unwrap();
    let inner = ResidentStore::over_prefix(prefix.bytes(), &h).unwrap();
    let kernels = KernelSet::select(&smolrun_linux::detect_features());
    let m = Model::load_from(&h, &inner, &kernels).unwrap();
    let config = PagerConfig {
        slots_per_layer: slots,
        eviction: Eviction::DEFAULT,
    };
    let reader = FileReader::open(path).unwrap();
    let groups = m.expert_groups();
    let slots = slot_plan(&reader, &h, &groups, config).unwrap();
    let region = Region::heap(slots.total_usize().unwrap()).unwrap();
    let pool = Arc::new(
        ExpertPool::new(
            reader,
            &h,
            &groups,
            config,
            CondSignal::default(),
            CondSignal::default(),
            region,
        )
        .unwrap(),
    );
    let threads: Box<dyn Send + Sync> = Box::new(start_expert_readers(&pool, 2).unwrap());
    let store = PagedStore::new(inner, pool, Some(threads));
    let n = 32;
    let mut st = State::new(&m, n + 1).unwrap();
    let started = std::time::Instant::now();
    let mut token = 9707u32;
    for pos in 0..n {
        let l = m
            .forward(&mut st, &store, &SingleThread, token, pos)
            .unwrap();
        assert!(
            l.iter().all(|v| v.is_finite()),
            "non-finite logits at {pos}"
        );
        token = (0..l.len()).max_by(|&a, &b| l[a].total_cmp(&l[b])).unwrap() as u32;
    }
    let s = store.moe_stats().unwrap();
    // Only the prefix is mapped; every chosen expert was looked up, a miss read its bytes.
    assert!(offset < file_len, "the mapped prefix is the whole file");
    assert!(
        s.lookups >= n as u64,
        "{} lookups for {n} tokens",
        s.lookups
    );
    assert!(s.misses <= s.lookups);
    assert_eq!(
        s.misses > 0,
        s.missed_bytes > 0,
        "misses {} but {} bytes read",
        s.misses,
        s.missed_bytes
    );
    println!(
        "{}: {:.0} of {:.0} MiB mapped, pools {:.0} MiB ({slots} slots a layer): {n} tokens in \
         {:.1} s, {} of {} chosen experts missed ({:.0} MiB read)",
        path.display(),
        offset as f64 / 1048576.0,
        file_len as f64 / 1048576.0,
        s.pool_bytes as f64 / 1048576.0,
        started.elapsed().as_secs_f64(),
        s.misses,
        s.lookups,
        s.missed_bytes as f64 / 1048576.0
    );
}
