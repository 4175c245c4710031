//! Which experts of one layer sit in its pool of slots, and which one leaves when another must
//! come in: the expert pager's policy (pager.rs), kept apart from its threads and buffers so the
//! trace simulator (`smolrun moe-sim`) replays the very same code against other policies and
//! against Belady's optimum.
//!
//! Every routing of the layer (one token's chosen experts) is one tick of the layer's clock.
//! - [`Eviction::DecayedFrequency`]: each slot's score is the sum of `decay^age` over its past
//!   uses (age in ticks); the lowest score leaves. It keeps an expert that many tokens use even
//!   when it skipped a few, which LRU throws out.
//! - [`Eviction::Lru`]: the least recently used leaves.
//!
//! Decayed scores are kept without touching every slot each tick: a use adds `growth^tick`
//! (growth = 1/decay) instead of decaying all the others by `decay`; the order is the same.
//! The scale is brought back down when it grows large.

use alloc::vec;
use alloc::vec::Vec;

/// How a full pool picks the expert to drop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Eviction {
    /// Lowest sum of `decay^age` over past uses; `decay` in (0, 1).
    DecayedFrequency { decay: f32 },
    /// Least recently used.
    Lru,
}

impl Eviction {
    /// The pager's default: decay 0.95 per routing of the layer (a use 14 tokens ago counts
    /// half), the best of 0.8/0.9/0.95/0.99 on the traces of the moefied Qwen2.5-Coder (see
    /// `smolrun moe-sim`).
    pub const DEFAULT: Eviction = Eviction::DecayedFrequency { decay: 0.95 };

    pub fn name(&self) -> &'static str {
        match self {
            Eviction::DecayedFrequency { .. } => "decayed-frequency",
            Eviction::Lru => "lru",
        }
    }
}

/// Marks "no slot" in [`ExpertCache`]'s expert-to-slot table.
const NO_SLOT: u32 = u32::MAX;

/// Scores above this are scaled down (with the growth factor) so they stay finite.
const RESCALE_ABOVE: f64 = 1e150;

/// One layer's slots: which expert each holds and how much it was used.
#[derive(Debug, Clone)]
pub struct ExpertCache {
    policy: Eviction,
    /// The expert in each slot.
    slot_expert: Vec<Option<u16>>,
    /// The slot of each expert, or [`NO_SLOT`].
    expert_slot: Vec<u32>,
    /// Decayed use count (scaled by `weight`), or the tick of the last use (LRU).
    score: Vec<f64>,
    /// What a use adds now: growth^tick, rescaled.
    weight: f64,
    growth: f64,
    tick: u64,
}

impl ExpertCache {
    /// An empty pool of `n_slots` slots for a layer of `n_expert` experts.
    pub fn new(n_expert: usize, n_slots: usize, policy: Eviction) -> ExpertCache {
        let growth = match policy {
            Eviction::DecayedFrequency { decay } => 1.0 / (decay as f64).clamp(1e-3, 1.0),
            Eviction::Lru => 1.0,
        };
        ExpertCache {
            policy,
            slot_expert: vec![None; n_slots],
            expert_slot: vec![NO_SLOT; n_expert],
            score: vec![0.0; n_slots],
            weight: 1.0,
            growth,
            tick: 0,
        }
    }

    pub fn n_slots(&self) -> usize {
        self.slot_expert.len()
    }

    pub fn n_expert(&self) -> usize {
        self.expert_slot.len()
    }

    /// The slot that holds expert `e`, if any.
    pub fn slot_of(&self, e: u16) -> Option<usize> {
        match self.expert_slot.get(e as usize) {
            Some(&s) if s != NO_SLOT => Some(s as usize),
            _ => None,
        }
    }

    /// The expert in slot `s`, if any.
    pub fn expert_in(&self, s: usize) -> Option<u16> {
        self.slot_expert.get(s).copied().flatten()
    }

    /// One routing of the layer: the clock moves on.
    pub fn tick(&mut self) {
        self.tick += 1;
        if let Eviction::DecayedFrequency { .. } = self.policy {
            self.weight *= self.growth;
            if self.weight > RESCALE_ABOVE {
                let down = 1.0 / self.weight;
                self.score.iter_mut().for_each(|s| *s *= down);
                self.weight = 1.0;
            }
        }
    }

    /// Slot `s` was used now.
    pub fn touch(&mut self, s: usize) {
        match self.policy {
            Eviction::DecayedFrequency { .. } => self.score[s] += self.weight,
            Eviction::Lru => self.score[s] = self.tick as f64,
        }
    }

    /// The slot to (re)fill among those `may_use` allows: an empty one first, else the one
    /// the policy values least (the lower slot on a tie). `None` when `may_use` allows none.
    pub fn victim(&self, may_use: impl Fn(usize) -> bool) -> Option<usize> {
        let mut best: Option<(usize, f64)> = None;
        for s in 0..self.n_slots() {
            if !may_use(s) {
                continue;
            }
            if self.slot_expert[s].is_none() {
                return Some(s);
            }
            if best.is_none_or(|(_, b)| self.score[s] < b) {
                best = Some((s, self.score[s]));
            }
        }
        best.map(|(s, _)| s)
    }

    /// Puts expert `e` into slot `s` (its score starts from nothing); returns the expert it
    /// replaced. An `e` past the layer's experts is ignored (the store checked it before).
    pub fn assign(&mut self, s: usize, e: u16) -> Option<u16> {
        if e as usize >= self.expert_slot.len() || s >= self.slot_expert.len() {
            return None;
        }
        let old = self.remove(s);
        self.slot_expert[s] = Some(e);
        self.expert_slot[e as usize] = s as u32;
        self.score[s] = 0.0;
        old
    }

    /// Empties slot `s`; returns the expert it held.
    pub fn remove(&mut self, s: usize) -> Option<u16> {
        let old = self.slot_expert.get_mut(s)?.take();
        if let Some(o) = old {
            self.expert_slot[o as usize] = NO_SLOT;
        }
        self.score[s] = 0.0;
        old
    }

    /// The held experts, most valued first (for a warm-start list).
    pub fn ranked(&self) -> Vec<u16> {
        let mut held: Vec<(u16, f64)> = (0..self.n_slots())
            .filter_map(|s| Some((self.slot_expert[s]?, self.score[s])))
            .collect();
        held.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        held.into_iter().map(|(e, _)| e).collect()
    }
}

/// Hits and misses of a replay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayCount {
    pub lookups: u64,
    pub misses: u64,
}

impl ReplayCount {
    pub fn miss_rate(&self) -> f64 {
        if self.lookups == 0 {
            0.0
        } else {
            self.misses as f64 / self.lookups as f64
        }
    }
}

/// Replays one layer's routings (`steps`: each token's chosen experts) through a pool of
/// `n_slots` under `policy`, the way the pager runs them: the step's present experts are used,
/// then each missing one takes a victim that is not among the step's experts.
pub fn replay(steps: &[&[u16]], n_expert: usize, n_slots: usize, policy: Eviction) -> ReplayCount {
    let mut cache = ExpertCache::new(n_expert, n_slots, policy);
    let mut count = ReplayCount::default();
    for step in steps {
        cache.tick();
        for &e in step.iter() {
            count.lookups += 1;
            match cache.slot_of(e) {
                Some(s) => cache.touch(s),
                None => {
                    count.misses += 1;
                    let in_step = |s: usize| cache.expert_in(s).is_some_and(|x| step.contains(&x));
                    if let Some(s) = cache.victim(|s| !in_step(s)) {
                        cache.assign(s, e);
                        cache.touch(s);
                    }
                }
            }
        }
    }
    count
}

/// Belady's optimum for the same replay: on a miss, the expert whose next use lies furthest
/// ahead (never used again: furthest of all) leaves. No policy that knows only the past can
/// miss less on this trace with this pool.
pub fn replay_belady(steps: &[&[u16]], n_expert: usize, n_slots: usize) -> ReplayCount {
    // next_use[i][j]: the step after i where steps[i][j] is used again (usize::MAX: never).
    let mut next_use: Vec<Vec<usize>> = steps.iter().map(|s| vec![usize::MAX; s.len()]).collect();
    let mut seen_at = vec![usize::MAX; n_expert];
    for (i, step) in steps.iter().enumerate().rev() {
        for (j, &e) in step.iter().enumerate() {
            if let Some(at) = seen_at.get(e as usize) {
                next_use[i][j] = *at;
            }
        }
        for &e in step.iter() {
            if let Some(at) = seen_at.get_mut(e as usize) {
                *at = i;
            }
        }
    }
    // For each held expert: the step of its next use.
    let mut held: Vec<(u16, usize)> = Vec::with_capacity(n_slots);
    let mut count = ReplayCount::default();
    for (i, step) in steps.iter().enumerate() {
        for (j, &e) in step.iter().enumerate() {
            count.lookups += 1;
            let next = next_use[i][j];
            if let Some(h) = held.iter_mut().find(|h| h.0 == e) {
                h.1 = next;
                continue;
            }
            count.misses += 1;
            if held.len() < n_slots {
                held.push((e, next));
                continue;
            }
            // The held expert used furthest ahead, not one this step still needs.
            let victim = held
                .iter()
                .enumerate()
                .filter(|(_, h)| !step.contains(&h.0))
                .max_by_key(|(_, h)| h.1)
                .map(|(k, _)| k);
            if let Some(k) = victim {
                held[k] = (e, next);
            }
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_slot_is_taken_before_any_eviction() {
        let mut c = ExpertCache::new(8, 2, Eviction::Lru);
        assert_eq!(c.victim(|_| true), Some(0));
        c.assign(0, 3);
        assert_eq!(c.victim(|_| true), Some(1));
        assert_eq!(c.slot_of(3), Some(0));
        assert_eq!(c.slot_of(4), None);
        assert_eq!(c.slot_of(99), None);
    }

    #[test]
    fn lru_drops_the_least_recently_used() {
        let mut c = ExpertCache::new(8, 2, Eviction::Lru);
        c.tick();
        c.assign(0, 1);
        c.touch(0);
        c.tick();
        c.assign(1, 2);
        c.touch(1);
        c.tick();
        c.touch(0);
        assert_eq!(c.victim(|_| true), Some(1));
        assert_eq!(c.assign(1, 5), Some(2));
        assert_eq!(c.slot_of(2), None);
    }

    #[test]
    fn decayed_frequency_keeps_the_often_used_expert_that_lru_drops() {
        // Expert 1 is used 5 times, then expert 2 once, more recently: LRU drops 1, the
        // decayed count drops 2.
        let mut lfu = ExpertCache::new(8, 2, Eviction::DecayedFrequency { decay: 0.9 });
        let mut lru = ExpertCache::new(8, 2, Eviction::Lru);
        for c in [&mut lfu, &mut lru] {
            c.assign(0, 1);
            for _ in 0..5 {
                c.tick();
                c.touch(0);
            }
            c.tick();
            c.assign(1, 2);
            c.touch(1);
        }
        assert_eq!(lfu.victim(|_| true), Some(1));
        assert_eq!(lru.victim(|_| true), Some(0));
    }

    #[test]
    fn decayed_scores_stay_finite_over_a_long_run() {
        let mut c = ExpertCache::new(4, 2, Eviction::DecayedFrequency { decay: 0.5 });
        c.assign(0, 0);
        c.assign(1, 1);
        for t in 0..100_000 {
            c.tick();
            c.touch(t % 2);
        }
        assert!(c.score.iter().all(|s| s.is_finite()));
        assert!(c.weight.is_finite());
        // Slot 1 was used last.
        assert_eq!(c.victim(|_| true), Some(0));
    }

    #[test]
    fn the_victim_respects_what_may_not_be_evicted() {
        let mut c = ExpertCache::new(8, 2, Eviction::Lru);
        c.assign(0, 1);
        c.assign(1, 2);
        assert_eq!(c.victim(|s| s != 0), Some(1));
        assert_eq!(c.victim(|_| false), None);
    }

    #[test]
    fn belady_never_misses_more_than_the_online_policies() {
        // A pseudo-random skewed trace: 64 experts, 4 per step.
        let mut x = 12345u32;
        let mut steps = Vec::new();
        for _ in 0..2000 {
            let mut step = Vec::new();
            while step.len() < 4 {
                x = x.wrapping_mul(1664525).wrapping_add(1013904223);
                let r = (x >> 8) as f32 / (1u32 << 24) as f32;
                let e = (64.0 * r * r * r) as u16;
                if !step.contains(&e) {
                    step.push(e);
                }
            }
            steps.push(step);
        }
        let steps: Vec<&[u16]> = steps.iter().map(|s| &s[..]).collect();
        for slots in [4, 8, 16, 32] {
            let opt = replay_belady(&steps, 64, slots);
            let lru = replay(&steps, 64, slots, Eviction::Lru);
            let lfu = replay(&steps, 64, slots, Eviction::DEFAULT);
            assert_eq!(opt.lookups, lru.lookups);
            assert!(opt.misses <= lru.misses, "{slots}: {opt:?} {lru:?}");
            assert!(opt.misses <= lfu.misses, "{slots}: {opt:?} {lfu:?}");
            // Skewed: the decayed count beats LRU once the pool holds the popular ones.
            if slots >= 16 {
                assert!(lfu.misses < lru.misses, "{slots}: {lfu:?} {lru:?}");
            }
        }
        // A pool that holds every expert misses each once.
        assert_eq!(replay_belady(&steps, 64, 64).misses, 64);
    }
}
