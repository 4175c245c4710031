//! The expert pager: a mixture of experts bigger than RAM. Everything but the experts stays
//! where another store keeps it (the mapped file, or only its non-expert prefix); each MoE
//! layer gets a pool of slots, each slot one expert's three slices (gate, up, down). When a
//! token's router has chosen, the layer's missing experts are read from flash straight into
//! their slots by direct reads on the reader threads, three reads per expert, all at once.
//!
//! ```text
//! route(token) -> E                       moe_ffn.rs: prefetch(E's keys)  = want(Demand)
//!   for e in E not in the pool:           victim = ExpertCache::victim (expert_cache.rs),
//!                                         never a slot in use, loading, or in E
//!     slot <- e; 3 jobs on the demand queue -> reader threads: read_direct into the slot
//! get(expert e, matrix m)                 waits (or reads a queued job itself) until e's
//!                                         slot is Ready; pins it until the guard drops
//! predict(keys)                           the next layer's router on this hidden state
//!                                         (pre-gated): loads on the predicted queue, read
//!                                         after every demand job
//! ```
//!
//! A slot is only evicted when it is Ready or Empty and nobody holds it, so a reader writes a
//! slot nobody reads, and a guard reads a slot nobody writes. The slot table of a layer is a
//! `spin::Mutex` held for a few hundred nanoseconds; readers and the compute thread sleep on
//! the platform's [`Signal`]s. With no reader threads (tests, a platform without threads) the
//! compute thread does the reads itself while it waits, so the store works either way.
//!
//! The bytes handed out are the file's bytes of that expert, as the resident store hands them
//! out: paged logits are bit-identical to the all-resident run (tests/tests/pager.rs).

use super::error::ModelError;
use super::expert_cache::{Eviction, ExpertCache};
use super::moe_ffn::MAX_EXPERTS_USED;
use super::store::{
    StoreError, StoreErrorKind, TensorId, TensorTable, Weight, WeightKey, WeightStore,
};
use super::stream::{aligned_span, largest_span, AlignedBytes};
use crate::arena::{ArenaPlan, ArenaUsage, Part, Region};
use crate::gguf::Gguf;
use crate::platform::{IoError, ReadAt, Signal};
use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One MoE layer's expert tensors, in the order a slot holds them: gate, up, down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpertGroup {
    /// The model's layer number (for errors and traces).
    pub layer: usize,
    pub tensors: [TensorId; 3],
    pub n_expert: usize,
    /// Experts a token uses (the pool must hold at least these).
    pub n_used: usize,
}

/// How the pools are sized and run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PagerConfig {
    /// Slots in each layer's pool (capped at the layer's expert count).
    pub slots_per_layer: usize,
    pub eviction: Eviction,
}

/// The expert traffic, counted since the pool was built.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MoeStats {
    /// Experts the routers chose (one per chosen expert per token per layer).
    pub lookups: u64,
    /// Chosen experts that were neither in their pool nor on their way: read while the
    /// token waited.
    pub misses: u64,
    /// Chosen experts already on their way (a prediction made them load): waited for less.
    pub in_flight: u64,
    /// Bytes read for misses.
    pub missed_bytes: u64,
    /// Experts loaded because a prediction named them, and the bytes read for them.
    pub predicted_loads: u64,
    pub predicted_bytes: u64,
    /// Experts predicted, and of those the ones the router then chose (prefetch accuracy).
    pub predicted: u64,
    pub predicted_right: u64,
    /// Bytes of all pools together, and slots per layer.
    pub pool_bytes: u64,
    pub slots_per_layer: usize,
}

impl MoeStats {
    /// The counts of `self` since `earlier` (a snapshot of the same pool).
    pub fn since(&self, earlier: &MoeStats) -> MoeStats {
        MoeStats {
            lookups: self.lookups - earlier.lookups,
            misses: self.misses - earlier.misses,
            in_flight: self.in_flight - earlier.in_flight,
            missed_bytes: self.missed_bytes - earlier.missed_bytes,
            predicted_loads: self.predicted_loads - earlier.predicted_loads,
            predicted_bytes: self.predicted_bytes - earlier.predicted_bytes,
            predicted: self.predicted - earlier.predicted,
            predicted_right: self.predicted_right - earlier.predicted_right,
            ..*self
        }
    }

    /// The counts of two stretches together (pool figures from `self`).
    pub fn plus(&self, other: &MoeStats) -> MoeStats {
        MoeStats {
            lookups: self.lookups + other.lookups,
            misses: self.misses + other.misses,
            in_flight: self.in_flight + other.in_flight,
            missed_bytes: self.missed_bytes + other.missed_bytes,
            predicted_loads: self.predicted_loads + other.predicted_loads,
            predicted_bytes: self.predicted_bytes + other.predicted_bytes,
            predicted: self.predicted + other.predicted,
            predicted_right: self.predicted_right + other.predicted_right,
            ..*self
        }
    }

    pub fn miss_rate(&self) -> f64 {
        ratio(self.misses, self.lookups)
    }

    pub fn prefetch_accuracy(&self) -> f64 {
        ratio(self.predicted_right, self.predicted)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum SlotState {
    Empty,
    /// Reads of `parts_left` of the three slices are still queued or running.
    Loading {
        parts_left: u8,
    },
    Ready,
    /// A read failed; the next get of this expert reports it and frees the slot.
    Failed(IoError),
}

struct SlotTable {
    cache: ExpertCache,
    state: Vec<SlotState>,
    /// Guards alive on each slot.
    pins: Vec<u32>,
    /// Demand uses of each expert since load (for the warm-start list).
    uses: Vec<u32>,
    /// The last prediction for this layer, compared with the next routing.
    predicted: heapless::Vec<u16, MAX_EXPERTS_USED>,
}

/// One layer's pool: the slots' memory and their table.
struct LayerPool {
    group: ExpertGroup,
    /// Where each slice sits in a slot, and how much room it has (an aligned span of the
    /// largest slice: a slice's start is not aligned in the file).
    part_at: [usize; 3],
    slot_bytes: usize,
    memory: AlignedBytes,
    table: spin::Mutex<SlotTable>,
}

#[derive(Debug, Clone, Copy)]
struct Job {
    pool: u32,
    slot: u32,
    part: u8,
    expert: u16,
}

struct Jobs {
    demand: VecDeque<Job>,
    predicted: VecDeque<Job>,
}

/// The pools, their reads and their counters: shared by the compute thread (through
/// [`PagedStore`]) and the reader threads (`reader_loop`).
pub struct ExpertPool<R: ReadAt, G: Signal> {
    reader: R,
    table: TensorTable,
    align: usize,
    pools: Vec<LayerPool>,
    /// The memory every pool's slots are carved from, and what its arena planned and used.
    _region: Region,
    usage: ArenaUsage,
    /// The most slots a layer's pool has (the configured size, capped by its experts).
    slots_per_layer: usize,
    /// Tensor id -> (pool, slice) for the expert tensors.
    by_tensor: Vec<Option<(u32, u8)>>,
    jobs: spin::Mutex<Jobs>,
    /// Bumped when a slot finished loading (or failed).
    data_ready: G,
    /// Bumped when jobs were queued, and at shut-down.
    work_ready: G,
    shut: AtomicBool,
    lookups: AtomicU64,
    misses: AtomicU64,
    in_flight: AtomicU64,
    missed_bytes: AtomicU64,
    predicted_loads: AtomicU64,
    predicted_bytes: AtomicU64,
    predicted: AtomicU64,
    predicted_right: AtomicU64,
}

// SAFETY: the slot memory is written only by the one job that loads a slice of a Loading slot
// (a slot is never evicted while Loading) and read only through guards of Ready slots, which
// pin it against eviction; the slot tables and the job queues are behind spin mutexes.
unsafe impl<R: ReadAt + Sync, G: Signal> Sync for ExpertPool<R, G> {}
// SAFETY: as above; the slots are in a region owned by the pool.
unsafe impl<R: ReadAt + Send, G: Signal> Send for ExpertPool<R, G> {}

/// Whether a load is for a token waiting on it or for a prediction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    Demand,
    Predict,
    /// A demand that found no free slot the first time: no new routing, no new lookup.
    Retry,
}

impl<R: ReadAt, G: Signal> ExpertPool<R, G> {
    /// Pools for `groups` (from `Model::expert_groups`) over `reader`, the file `gguf` was
    /// parsed from, their slots carved from `region` (of at least [`slot_plan`]'s
    /// total; the pool keeps it). Refuses a pool smaller than a token's experts, and an expert
    /// tensor the header does not describe as one.
    pub fn new(
        reader: R,
        gguf: &Gguf,
        groups: &[ExpertGroup],
        config: PagerConfig,
        data_ready: G,
        work_ready: G,
        mut region: Region,
    ) -> Result<Self, ModelError> {
        if reader.len() != gguf.file_len() {
            return Err(store_error(
                "(all)",
                format!(
                    "the file has {} bytes, its header was parsed from a file of {}",
                    reader.len(),
                    gguf.file_len()
                ),
            ));
        }
        let table = TensorTable::new(gguf);
        let align = reader.direct_alignment().max(64);
        let layouts = pool_layouts(&table, gguf, groups, config, align)?;
        let mut plan = slot_arena_plan(align)?;
        for layout in &layouts {
            plan.add_bytes(Part::ExpertSlots, layout.bytes as u64);
        }
        let (kind, region_bytes) = (region.kind(), region.len());
        let mut arena = region.arena(&plan).map_err(ModelError::Arena)?;
        let mut by_tensor = alloc::vec![None; gguf.tensors.len()];
        let mut pools = Vec::with_capacity(groups.len());
        let mut total_slots = 0usize;
        for (p, (g, layout)) in groups.iter().zip(&layouts).enumerate() {
            for (i, &id) in g.tensors.iter().enumerate() {
                by_tensor[id] = Some((p as u32, i as u8));
            }
            // SAFETY: the region is kept in the pool (`_region`), beside the pools, for their life.
            let memory =
                unsafe { AlignedBytes::in_arena(&mut arena, Part::ExpertSlots, layout.bytes)? };
            let slots = layout.slots;
            total_slots += slots;
            pools.push(LayerPool {
                group: *g,
                part_at: layout.part_at,
                slot_bytes: layout.slot_bytes,
                memory,
                table: spin::Mutex::new(SlotTable {
                    cache: ExpertCache::new(g.n_expert, slots, config.eviction),
                    state: alloc::vec![SlotState::Empty; slots],
                    pins: alloc::vec![0; slots],
                    uses: alloc::vec![0; g.n_expert],
                    predicted: heapless::Vec::new(),
                }),
            });
        }
        let usage = arena.usage(kind, region_bytes);
        // A slot has at most one load in flight: three jobs.
        let jobs = Jobs {
            demand: VecDeque::with_capacity(3 * total_slots),
            predicted: VecDeque::with_capacity(3 * total_slots),
        };
        Ok(ExpertPool {
            reader,
            table,
            align,
            _region: region,
            usage,
            slots_per_layer: groups
                .iter()
                .map(|g| config.slots_per_layer.min(g.n_expert))
                .max()
                .unwrap_or(0),
            pools,
            by_tensor,
            jobs: spin::Mutex::new(jobs),
            data_ready,
            work_ready,
            shut: AtomicBool::new(false),
            lookups: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            missed_bytes: AtomicU64::new(0),
            predicted_loads: AtomicU64::new(0),
            predicted_bytes: AtomicU64::new(0),
            predicted: AtomicU64::new(0),
            predicted_right: AtomicU64::new(0),
        })
    }

    /// What the slots' arena planned and handed out.
    pub fn slot_usage(&self) -> ArenaUsage {
        self.usage
    }

    /// Bytes of all the pools.
    pub fn pool_bytes(&self) -> u64 {
        self.pools.iter().map(|p| p.memory.len as u64).sum()
    }

    /// Bytes one expert of pool `p` reads from flash (its three slices, as read).
    fn expert_read_bytes(&self, p: &LayerPool, e: u16) -> u64 {
        p.group
            .tensors
            .iter()
            .filter_map(|&id| self.table.extent(WeightKey::expert(id, e)).ok())
            .map(|r| {
                let span = aligned_span(&r, self.align as u64);
                span.end - span.start
            })
            .sum()
    }

    pub fn stats(&self) -> MoeStats {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MoeStats {
            lookups: n(&self.lookups),
            misses: n(&self.misses),
            in_flight: n(&self.in_flight),
            missed_bytes: n(&self.missed_bytes),
            predicted_loads: n(&self.predicted_loads),
            predicted_bytes: n(&self.predicted_bytes),
            predicted: n(&self.predicted),
            predicted_right: n(&self.predicted_right),
            pool_bytes: self.pool_bytes(),
            slots_per_layer: self.slots_per_layer,
        }
    }

    /// Each MoE layer's experts, most used since load first (the warm-start list to save):
    /// (layer, experts).
    pub fn most_used(&self) -> Vec<(usize, Vec<u16>)> {
        self.pools
            .iter()
            .map(|p| {
                let t = p.table.lock();
                let mut ranked: Vec<u16> = (0..t.uses.len() as u16)
                    .filter(|&e| t.uses[e as usize] > 0)
                    .collect();
                ranked.sort_by_key(|&e| (core::cmp::Reverse(t.uses[e as usize]), e));
                (p.group.layer, ranked)
            })
            .collect()
    }

    /// Loads each listed layer's first experts (as many as its pool holds) and waits until
    /// they are in: a warm start from a saved [`most_used`](Self::most_used) list. Experts
    /// or layers the model does not have are skipped (the list may come from another file).
    pub fn warm(&self, lists: &[(usize, Vec<u16>)]) -> Result<(), StoreError> {
        for (layer, experts) in lists {
            let Some(p) = self.pools.iter().position(|p| p.group.layer == *layer) else {
                continue;
            };
            let pool = &self.pools[p];
            let mut t = pool.table.lock();
            let n_slots = t.cache.n_slots();
            let wanted = experts
                .iter()
                .copied()
                .filter(|&e| (e as usize) < pool.group.n_expert)
                .take(n_slots);
            for (rank, e) in wanted.enumerate() {
                if t.cache.slot_of(e).is_some() {
                    continue;
                }
                let Some(s) = t.cache.victim(|s| t.state[s] == SlotState::Empty) else {
                    break;
                };
                t.cache.assign(s, e);
                // The list's order as a small head start: the first most valued.
                for _ in rank..n_slots {
                    t.cache.touch(s);
                }
                t.state[s] = SlotState::Loading { parts_left: 3 };
                self.queue(p, s, e, Want::Predict);
            }
        }
        self.work_ready.notify();
        // Wait until every queued slot is Ready or Failed.
        loop {
            let epoch = self.data_ready.epoch();
            let loading = self.pools.iter().any(|pool| {
                let t = pool.table.lock();
                t.state
                    .iter()
                    .any(|s| matches!(s, SlotState::Loading { .. }))
            });
            if !loading {
                break;
            }
            if !self.help() {
                self.data_ready.wait(epoch);
            }
        }
        for pool in &self.pools {
            let mut t = pool.table.lock();
            let failed = t
                .state
                .iter()
                .position(|s| matches!(s, SlotState::Failed(_)));
            if let Some(s) = failed {
                let e = t.cache.expert_in(s).unwrap_or(0);
                let state = core::mem::replace(&mut t.state[s], SlotState::Empty);
                t.cache.remove(s);
                if let SlotState::Failed(err) = state {
                    return Err(self.read_error(pool, 0, e, err));
                }
            }
        }
        // The warm loads are the load's, not the run's.
        self.predicted_loads.store(0, Ordering::Relaxed);
        self.predicted_bytes.store(0, Ordering::Relaxed);
        Ok(())
    }

    /// Queues the three reads of expert `e` into slot `s` of pool `p`.
    fn queue(&self, p: usize, s: usize, e: u16, want: Want) {
        let mut jobs = self.jobs.lock();
        let queue = match want {
            Want::Demand | Want::Retry => &mut jobs.demand,
            Want::Predict => &mut jobs.predicted,
        };
        for part in 0..3 {
            // Within capacity: one load in flight per slot (see `new`).
            queue.push_back(Job {
                pool: p as u32,
                slot: s as u32,
                part,
                expert: e,
            });
        }
    }

    /// Routing of pool `p` chose (`Demand`) or a prediction named (`Predict`) `experts`:
    /// touches the present ones and starts loading the missing ones.
    fn want(&self, p: usize, experts: &[u16], want: Want) {
        let pool = &self.pools[p];
        let mut queued = false;
        {
            let mut t = pool.table.lock();
            if want == Want::Demand {
                t.cache.tick();
                self.settle_predictions(p, &mut t, experts);
                self.lookups
                    .fetch_add(experts.len() as u64, Ordering::Relaxed);
                if !t.predicted.is_empty() {
                    let right = t.predicted.iter().filter(|e| experts.contains(e)).count();
                    self.predicted
                        .fetch_add(t.predicted.len() as u64, Ordering::Relaxed);
                    self.predicted_right
                        .fetch_add(right as u64, Ordering::Relaxed);
                    t.predicted.clear();
                }
            } else if want == Want::Predict {
                // A guess is read only while the flash has nothing else to do: with reads
                // for a token still queued the flash is the bottleneck, and a wrong guess
                // would take its time from them.
                if !self.jobs.lock().demand.is_empty() {
                    return;
                }
                t.predicted.clear();
                for &e in experts.iter().take(MAX_EXPERTS_USED) {
                    let _ = t.predicted.push(e);
                }
            }
            for &e in experts {
                if e as usize >= pool.group.n_expert {
                    continue;
                }
                // A read that failed earlier (its pass stopped before it was asked for):
                // read it again.
                if let Some(s) = t.cache.slot_of(e) {
                    if matches!(t.state[s], SlotState::Failed(_)) {
                        t.state[s] = SlotState::Empty;
                        t.cache.remove(s);
                    }
                }
                if let Some(s) = t.cache.slot_of(e) {
                    if want == Want::Demand {
                        t.cache.touch(s);
                        t.uses[e as usize] += 1;
                        if matches!(t.state[s], SlotState::Loading { .. }) {
                            self.in_flight.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    continue;
                }
                let t_ref = &*t;
                let victim = t_ref.cache.victim(|s| {
                    t_ref.pins[s] == 0
                        && !matches!(t_ref.state[s], SlotState::Loading { .. })
                        && t_ref
                            .cache
                            .expert_in(s)
                            .is_none_or(|x| !experts.contains(&x))
                });
                let Some(s) = victim else {
                    // Every slot busy: a demand get loads it when one frees up.
                    continue;
                };
                t.cache.assign(s, e);
                t.state[s] = SlotState::Loading { parts_left: 3 };
                let bytes = self.expert_read_bytes(pool, e);
                if want != Want::Predict {
                    t.cache.touch(s);
                    t.uses[e as usize] += 1;
                    self.misses.fetch_add(1, Ordering::Relaxed);
                    self.missed_bytes.fetch_add(bytes, Ordering::Relaxed);
                } else {
                    self.predicted_loads.fetch_add(1, Ordering::Relaxed);
                    self.predicted_bytes.fetch_add(bytes, Ordering::Relaxed);
                }
                self.queue(p, s, e, want);
                queued = true;
            }
        }
        if queued {
            self.work_ready.notify();
        }
    }

    /// The router of pool `p` chose `chosen`: predicted loads of this pool that have not begun
    /// are settled. A chosen expert's reads move to the demand queue (the token waits for
    /// them now); a load nobody chose is dropped and its slot freed, so a wrong guess costs
    /// no flash time unless its reads had already begun.
    fn settle_predictions(&self, p: usize, t: &mut SlotTable, chosen: &[u16]) {
        let mut jobs = self.jobs.lock();
        let Jobs { demand, predicted } = &mut *jobs;
        let mut i = 0;
        while i < predicted.len() {
            let job = predicted[i];
            if job.pool as usize != p {
                i += 1;
                continue;
            }
            if chosen.contains(&job.expert) {
                let _ = predicted.remove(i);
                demand.push_back(job);
                continue;
            }
            let same_slot = |k: &Job| k.pool == job.pool && k.slot == job.slot;
            let slot = job.slot as usize;
            let queued = predicted.iter().filter(|k| same_slot(k)).count();
            if t.state[slot]
                != (SlotState::Loading {
                    parts_left: queued as u8,
                })
                || queued != 3
            {
                // A read of it has begun: let it finish (the slot is Ready then).
                i += 1;
                continue;
            }
            predicted.retain(|k| !same_slot(k));
            t.state[slot] = SlotState::Empty;
            if let Some(e) = t.cache.remove(slot) {
                let bytes = self.expert_read_bytes(&self.pools[p], e);
                self.predicted_loads.fetch_sub(1, Ordering::Relaxed);
                self.predicted_bytes.fetch_sub(bytes, Ordering::Relaxed);
            }
        }
    }

    /// Takes one queued read (demand first) and does it; false when none was queued.
    fn help(&self) -> bool {
        let job = {
            let mut jobs = self.jobs.lock();
            jobs.demand
                .pop_front()
                .or_else(|| jobs.predicted.pop_front())
        };
        match job {
            Some(job) => {
                self.run(job);
                true
            }
            None => false,
        }
    }

    /// Reads one slice into its slot and marks the slot when its last slice is in.
    fn run(&self, job: Job) {
        let pool = &self.pools[job.pool as usize];
        let (s, part) = (job.slot as usize, job.part as usize);
        let id = pool.group.tensors[part];
        let result = self
            .table
            .extent(WeightKey::expert(id, job.expert))
            .map_err(|e| match e.kind {
                StoreErrorKind::Io(io) => io,
                _ => IoError {
                    code: 0,
                    op: "expert extent",
                    file: String::new(),
                    offset: e.offset,
                    len: e.len,
                },
            })
            .and_then(|r| {
                let span = aligned_span(&r, self.align as u64);
                let start = s * pool.slot_bytes + pool.part_at[part];
                let len = (span.end - span.start) as usize;
                // SAFETY: the slot is Loading, so nothing reads it and it is not evicted;
                // this job is the only one writing this slice's part of it.
                let buf = unsafe { pool.memory.slice_mut(start..start + len) };
                if self.reader.direct_alignment() > 1 {
                    self.reader.read_direct(span.start, buf)
                } else {
                    self.reader.read_at(span.start, buf)
                }
            });
        {
            let mut t = pool.table.lock();
            t.state[s] = match (
                core::mem::replace(&mut t.state[s], SlotState::Empty),
                result,
            ) {
                (SlotState::Loading { parts_left: 1 }, Ok(())) => SlotState::Ready,
                (SlotState::Loading { parts_left }, Ok(())) => SlotState::Loading {
                    parts_left: parts_left - 1,
                },
                // The first failure marks the slot; the other slices' jobs find it Failed
                // and leave it so until a get reports it.
                (SlotState::Loading { .. }, Err(e)) => SlotState::Failed(e),
                (other, _) => other,
            };
        }
        self.data_ready.notify();
    }

    /// The reader threads' loop: does queued reads until [`shut_down`](Self::shut_down).
    pub fn reader_loop(&self) {
        loop {
            let epoch = self.work_ready.epoch();
            if self.shut.load(Ordering::Acquire) {
                return;
            }
            if !self.help() {
                self.work_ready.wait(epoch);
            }
        }
    }

    /// Stops the reader threads (they finish the read they are in).
    pub fn shut_down(&self) {
        self.shut.store(true, Ordering::Release);
        self.work_ready.notify();
    }

    fn read_error(&self, pool: &LayerPool, part: usize, e: u16, err: IoError) -> StoreError {
        let key = WeightKey::expert(pool.group.tensors[part], e);
        let extent = self.table.extent(key).unwrap_or(0..0);
        self.table.error(key, extent, StoreErrorKind::Io(err))
    }

    /// Expert `key.expert` of the pooled tensor `key.tensor`, once its slot is Ready.
    fn get_expert(&self, p: usize, part: usize, e: u16) -> Result<&[u8], StoreError> {
        let pool = &self.pools[p];
        let key = WeightKey::expert(pool.group.tensors[part], e);
        let extent = self.table.extent(key)?;
        let mut asked = false;
        loop {
            let epoch;
            {
                let mut t = pool.table.lock();
                match t.cache.slot_of(e) {
                    Some(s) => match &t.state[s] {
                        SlotState::Ready => {
                            t.pins[s] += 1;
                            let span = aligned_span(&extent, self.align as u64);
                            let start = s * pool.slot_bytes
                                + pool.part_at[part]
                                + (extent.start - span.start) as usize;
                            let len = (extent.end - extent.start) as usize;
                            // SAFETY: the slot is Ready and pinned until this guard's release:
                            // no job writes it and it is not evicted.
                            return Ok(unsafe { pool.memory.slice(start..start + len) });
                        }
                        SlotState::Failed(_) => {
                            let SlotState::Failed(err) =
                                core::mem::replace(&mut t.state[s], SlotState::Empty)
                            else {
                                unreachable!()
                            };
                            t.cache.remove(s);
                            return Err(self.read_error(pool, part, e, err));
                        }
                        SlotState::Loading { .. } | SlotState::Empty => {}
                    },
                    None => {
                        drop(t);
                        // Not hinted, or no slot was free when it was: load it now.
                        let want = if asked { Want::Retry } else { Want::Demand };
                        self.want(p, &[e], want);
                        asked = true;
                        if pool.table.lock().cache.slot_of(e).is_some() {
                            continue;
                        }
                        // Every slot busy loading: wait for one to be done.
                        let epoch = self.data_ready.epoch();
                        if !self.help() {
                            self.data_ready.wait(epoch);
                        }
                        continue;
                    }
                }
                epoch = self.data_ready.epoch();
            }
            if !self.help() {
                self.data_ready.wait(epoch);
            }
        }
    }

    fn unpin(&self, p: usize, e: u16) {
        let mut t = self.pools[p].table.lock();
        if let Some(s) = t.cache.slot_of(e) {
            t.pins[s] = t.pins[s].saturating_sub(1);
        }
    }

    /// Pool and slice of an expert key, if its tensor is pooled.
    fn pooled(&self, key: WeightKey) -> Option<(usize, usize, u16)> {
        let e = key.expert?;
        let (p, part) = (*self.by_tensor.get(key.tensor)?)?;
        Some((p as usize, part as usize, e))
    }

    /// Routes a hint's expert keys to their pools: each run of keys of one pool is one
    /// routing (the model hints one token's experts of one layer at a time).
    fn hint(&self, keys: &[WeightKey], want: Want) {
        let mut current: Option<usize> = None;
        let mut experts = heapless::Vec::<u16, MAX_EXPERTS_USED>::new();
        for &key in keys {
            let Some((p, _, e)) = self.pooled(key) else {
                continue;
            };
            if current.is_some_and(|c| c != p) {
                self.want(current.unwrap_or(p), &experts, want);
                experts.clear();
            }
            current = Some(p);
            if !experts.contains(&e) {
                let _ = experts.push(e);
            }
        }
        if let Some(p) = current {
            self.want(p, &experts, want);
        }
    }
}

fn store_error(tensor: &str, reason: String) -> ModelError {
    ModelError::Store {
        tensor: tensor.into(),
        reason,
    }
}

/// The arena's plan for the pools of `groups` over `reader` (the file `gguf` was parsed
/// from): one buffer of slots per layer, aligned for the reader's direct reads. The region
/// [`ExpertPool::new`] carves them from needs its total.
pub fn slot_plan<R: ReadAt>(
    reader: &R,
    gguf: &Gguf,
    groups: &[ExpertGroup],
    config: PagerConfig,
) -> Result<ArenaPlan, ModelError> {
    let align = reader.direct_alignment().max(64);
    let table = TensorTable::new(gguf);
    let mut plan = slot_arena_plan(align)?;
    for layout in pool_layouts(&table, gguf, groups, config, align)? {
        plan.add_bytes(Part::ExpertSlots, layout.bytes as u64);
    }
    Ok(plan)
}

/// Where each slice of an expert sits in one slot of a layer's pool, and how big the pool is.
struct PoolLayout {
    part_at: [usize; 3],
    slot_bytes: usize,
    slots: usize,
    /// `slot_bytes * slots`.
    bytes: usize,
}

/// An arena plan with nothing in it yet, its read targets aligned to `align`.
fn slot_arena_plan(align: usize) -> Result<ArenaPlan, ModelError> {
    ArenaPlan::new()
        .with_direct_alignment(align)
        .ok_or_else(|| {
            store_error(
                "(expert pool)",
                format!("the reader's direct-read alignment {align} is not a power of two"),
            )
        })
}

/// The pools' layouts for `groups`: a slot holds one expert's three slices, each in an aligned
/// span of the largest (a slice's start is not aligned in the file). Refuses a pool smaller
/// than a token's experts, and an expert tensor the header does not describe as one.
fn pool_layouts(
    table: &TensorTable,
    gguf: &Gguf,
    groups: &[ExpertGroup],
    config: PagerConfig,
    align: usize,
) -> Result<Vec<PoolLayout>, ModelError> {
    let mut layouts = Vec::with_capacity(groups.len());
    for g in groups {
        let slots = config.slots_per_layer.min(g.n_expert);
        let name = |i: usize| {
            gguf.tensors
                .get(g.tensors[i])
                .map_or_else(|| format!("#{}", g.tensors[i]), |t| t.name.into())
        };
        if slots < g.n_used || slots == 0 {
            return Err(store_error(
                &name(0),
                format!(
                    "a pool of {slots} experts cannot hold the {} a token of layer {} uses: \
                     give --moe-pool {} or more",
                    g.n_used,
                    g.layer,
                    g.n_used.max(1)
                ),
            ));
        }
        let mut part_at = [0usize; 3];
        let mut at = 0usize;
        for (i, &id) in g.tensors.iter().enumerate() {
            // Every expert of the tensor has the same size, each starts elsewhere in an
            // alignment block.
            let one = table
                .extent(WeightKey::expert(id, 0))
                .map_err(|e| store_error(&name(i), format!("{e}")))?;
            let last = table
                .extent(WeightKey::expert(id, (g.n_expert - 1) as u16))
                .map_err(|e| store_error(&name(i), format!("{e}")))?;
            let n_expert_found = (last.end - one.start) / (one.end - one.start).max(1);
            if n_expert_found != g.n_expert as u64 {
                return Err(store_error(
                    &name(i),
                    format!(
                        "the layer has {} experts, the tensor {n_expert_found}",
                        g.n_expert
                    ),
                ));
            }
            part_at[i] = at;
            let room = largest_span(one.end - one.start, align as u64);
            at = to_usize(at as u64 + room, &name(i))?;
        }
        let bytes = at
            .checked_mul(slots)
            .ok_or_else(|| store_error(&name(0), "the pool is larger than memory".into()))?;
        layouts.push(PoolLayout {
            part_at,
            slot_bytes: at,
            slots,
            bytes,
        });
    }
    Ok(layouts)
}

fn to_usize(n: u64, tensor: &str) -> Result<usize, ModelError> {
    usize::try_from(n).map_err(|_| store_error(tensor, format!("{n} bytes do not fit in memory")))
}

/// The store the model runs on: experts from the pools, everything else from `inner`.
pub struct PagedStore<S, R: ReadAt, G: Signal> {
    inner: S,
    pool: Arc<ExpertPool<R, G>>,
    /// The platform's reader threads, stopped when this store drops.
    _threads: Option<alloc::boxed::Box<dyn Send + Sync>>,
}

impl<S: WeightStore, R: ReadAt + Send + Sync, G: Signal> PagedStore<S, R, G> {
    /// `threads`: whatever keeps the pool's reader threads running (dropped with the
    /// store); `None` when the compute thread does the reads itself.
    pub fn new(
        inner: S,
        pool: Arc<ExpertPool<R, G>>,
        threads: Option<alloc::boxed::Box<dyn Send + Sync>>,
    ) -> Self {
        PagedStore {
            inner,
            pool,
            _threads: threads,
        }
    }

    pub fn pool(&self) -> &Arc<ExpertPool<R, G>> {
        &self.pool
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: WeightStore, R: ReadAt + Send + Sync, G: Signal> WeightStore for PagedStore<S, R, G> {
    fn get(&self, key: WeightKey) -> Result<Weight<'_>, StoreError> {
        match self.pool.pooled(key) {
            Some((p, part, e)) => {
                let bytes = self.pool.get_expert(p, part, e)?;
                Ok(Weight::new(self, key, bytes))
            }
            None => self.inner.get(key),
        }
    }

    fn get_repacked(&self, key: WeightKey, layout: &str) -> Option<Weight<'_>> {
        match self.pool.pooled(key) {
            Some(_) => None,
            None => self.inner.get_repacked(key, layout),
        }
    }

    fn read_rows(
        &self,
        key: WeightKey,
        first_row: usize,
        n_rows: usize,
        out: &mut [u8],
    ) -> Result<(), StoreError> {
        self.inner.read_rows(key, first_row, n_rows, out)
    }

    fn prefetch(&self, keys: &[WeightKey]) {
        self.pool.hint(keys, Want::Demand);
        self.inner.prefetch(keys);
    }

    fn predict(&self, keys: &[WeightKey]) {
        self.pool.hint(keys, Want::Predict);
    }

    fn experts_held(&self, tensor: TensorId, held: &mut [bool]) -> bool {
        let Some(&Some((p, _))) = self.pool.by_tensor.get(tensor) else {
            return false;
        };
        let t = self.pool.pools[p as usize].table.lock();
        for (e, h) in held.iter_mut().enumerate() {
            *h = t.cache.slot_of(e as u16).is_some();
        }
        true
    }

    fn release(&self, key: WeightKey) {
        // Guards of `inner` release into it directly; only experts come here.
        if let Some((p, _, e)) = self.pool.pooled(key) {
            self.pool.unpin(p, e);
        }
    }

    fn held_bytes(&self) -> u64 {
        self.inner.held_bytes() + self.pool.pool_bytes()
    }

    fn stream_stats(&self) -> Option<super::store::StreamStats> {
        self.inner.stream_stats()
    }

    fn moe_stats(&self) -> Option<MoeStats> {
        Some(self.pool.stats())
    }
}
