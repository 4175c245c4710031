//! What to map and what to read with pread, under iOS's cap on mappable address space.
//!
//! iOS 12 on a 1 GB device lets a process map only about 1.7 GB in all (1.3 GB for some
//! daemon users), libraries and heap included, so a 2.6 GB model file cannot simply be mapped:
//! mmap fails before the first token. The budget maps the whole file when it fits; otherwise
//! one prefix of the file that holds every weight used on every token (for a mixture of
//! experts written with its experts last, everything but the experts), and the rest is read
//! with pread into buffers the engine owns (the expert pager's slots). If even that prefix
//! does not fit, nothing is mapped and every weight is streamed.
//!
//! Pure arithmetic, tested on the host; the engine asks it before mapping.

use core::ops::Range;

/// Mappable address space of an iOS 12 process on a 1 GB device, as measured (about 1.7 GB):
/// used when the cap cannot be read.
pub const IOS12_MAPPABLE_BYTES: u64 = 1_700_000_000;

/// Address space kept for everything that is not the model file: the binary and system
/// libraries, thread stacks, the heap (KV cache, arena, expert pool). 384 MiB covers a
/// 700 MB-footprint process whose model file is mostly mapped.
pub const DEFAULT_RESERVED_BYTES: u64 = 384 << 20;

/// Mappings start and end on pages (16 KiB on arm64 iOS).
pub const IOS_PAGE_BYTES: u64 = 16 << 10;

/// How often a region of the file is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// On every token (dense weights, embeddings, norms, routers): worth a mapping.
    EveryToken,
    /// Only when chosen (mixture-of-experts experts): can live in pread buffers.
    WhenChosen,
}

/// The decision: which bytes of the file are mapped (page-aligned, may be empty) and which
/// regions must be read with pread instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapPlan {
    pub mapped: Range<u64>,
    /// The regions (as given) that lie at least partly outside `mapped`.
    pub pread: Vec<Range<u64>>,
}

/// The address-space budget of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressSpaceBudget {
    /// All address space the process may map.
    pub limit: u64,
    /// Part of `limit` kept for everything but the model file.
    pub reserved: u64,
}

impl AddressSpaceBudget {
    /// The iOS 12 default: [`IOS12_MAPPABLE_BYTES`] less [`DEFAULT_RESERVED_BYTES`].
    pub const fn ios12() -> AddressSpaceBudget {
        AddressSpaceBudget {
            limit: IOS12_MAPPABLE_BYTES,
            reserved: DEFAULT_RESERVED_BYTES,
        }
    }

    /// Bytes of the model file that may be mapped.
    pub fn for_file(&self) -> u64 {
        self.limit.saturating_sub(self.reserved)
    }

    /// Decides for a file of `file_len` bytes whose weights lie in `regions`.
    pub fn plan(&self, file_len: u64, regions: &[(Range<u64>, Access)]) -> MapPlan {
        let room = self.for_file();
        let whole = round_up(file_len, IOS_PAGE_BYTES);
        let mapped = if whole <= room {
            0..file_len
        } else {
            // The shortest prefix that holds every every-token region (the GGUF header and
            // metadata at the front come with it).
            let prefix_end = regions
                .iter()
                .filter(|(_, access)| *access == Access::EveryToken)
                .map(|(range, _)| range.end)
                .max()
                .unwrap_or(0)
                .min(file_len);
            if round_up(prefix_end, IOS_PAGE_BYTES) <= room {
                0..prefix_end
            } else {
                0..0
            }
        };
        let pread = regions
            .iter()
            .filter(|(range, _)| range.end > mapped.end || range.start < mapped.start)
            .map(|(range, _)| range.clone())
            .collect();
        MapPlan { mapped, pread }
    }
}

fn round_up(value: u64, to: u64) -> u64 {
    value.div_ceil(to).saturating_mul(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    #[test]
    fn a_small_model_is_mapped_whole() {
        let budget = AddressSpaceBudget::ios12();
        let regions = [(MB..250 * MB, Access::EveryToken)];
        let plan = budget.plan(253 * MB, &regions);
        assert_eq!(plan.mapped, 0..253 * MB);
        assert!(plan.pread.is_empty());
    }

    #[test]
    fn experts_last_moe_maps_the_dense_prefix_and_preads_the_experts() {
        // Moon-Beam-8B-A1B as the iPad runs it: 474 MB of dense weights, then 2.1 GB of experts.
        let budget = AddressSpaceBudget::ios12();
        let mut regions = vec![(10 * MB..474 * MB, Access::EveryToken)];
        let experts: Vec<_> = (0..32)
            .map(|layer| {
                let start = 474 * MB + layer * 66 * MB;
                (start..start + 66 * MB, Access::WhenChosen)
            })
            .collect();
        regions.extend(experts.iter().cloned());
        let plan = budget.plan(2_600 * MB, &regions);
        assert_eq!(plan.mapped, 0..474 * MB);
        assert_eq!(plan.pread.len(), 32);
        assert_eq!(plan.pread[0], 474 * MB..540 * MB);
    }

    #[test]
    fn a_dense_model_bigger_than_the_budget_is_streamed() {
        let budget = AddressSpaceBudget::ios12();
        let regions = [(MB..4_000 * MB, Access::EveryToken)];
        let plan = budget.plan(4_000 * MB, &regions);
        assert_eq!(plan.mapped, 0..0);
        assert_eq!(plan.pread, vec![MB..4_000 * MB]);
    }

    #[test]
    fn the_limit_is_what_is_left_after_the_reserve() {
        let budget = AddressSpaceBudget {
            limit: 1_300 * MB,
            reserved: 300 * MB,
        };
        assert_eq!(budget.for_file(), 1_000 * MB);
        // Exactly at the edge after page rounding still fits; one page more does not.
        let fits = 1_000 * MB / IOS_PAGE_BYTES * IOS_PAGE_BYTES;
        assert_eq!(budget.plan(fits, &[]).mapped, 0..fits);
        let regions = [(0..fits + 1, Access::EveryToken)];
        assert_eq!(budget.plan(fits + 1, &regions).mapped, 0..0);
        let tiny = AddressSpaceBudget {
            limit: 10,
            reserved: 20,
        };
        assert_eq!(tiny.for_file(), 0);
    }
}
