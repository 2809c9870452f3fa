//! Which memory type a request goes to: a ranked list of candidates.
//!
//! A device offers up to 32 memory types, each a set of property flags on a
//! heap. A resource says which types it can live in (`memoryTypeBits` of its
//! `VkMemoryRequirements`); the engine says how it will be used ([`Usage`]).
//! This module turns both into a ranked list: types that lack a *required*
//! flag are dropped (host access needs `HOST_VISIBLE`), and so are protected
//! types, lazily allocated ones unless the usage is transient, and types
//! whose heap is smaller than the request; the rest are ordered by a
//! weighted count of missing *preferred* and present *unwanted* flags, ties
//! broken by type index (drivers list their best types first). AMD's
//! device-coherent types rank after all others when their feature is
//! enabled, and then take only the requests that admit no other type
//! ([`RankTable::is_last_resort`]); they are never candidates when it is not
//! ([`MemoryContext::usable_types`](super::context::MemoryContext::usable_types),
//! which also leaves out protected types unless `protectedMemory` is
//! enabled; then only a custom pool of one uses them).
//! A request's own required and preferred property flags
//! (`AllocationDesc::required_flags`, `preferred_flags`) narrow and reorder
//! this ranking per request (`allocator/place/candidates.rs`, with
//! [`Candidates::reordered`]).
//! The allocator tries the candidates in order and moves on to the next one
//! when a type is out of memory, over budget, at `maxMemoryAllocationCount`
//! or cannot map its new memory.

use gpu_alloc_types::{MemoryHeap, MemoryPropertyFlags as Props, MemoryType};

use super::Usage;

/// Up to 32 memory type indices, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Candidates {
    types: [u8; 32],
    len: u8,
}

impl Candidates {
    // `#[inline]`: the allocator is generic, so its hot path is compiled in
    // the user's crate, where a non-inline helper of this crate is a call.
    #[inline]
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.types[..self.len as usize]
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The types of `ranked` that `admits` (at most 32), ordered by
    /// `cost`, lowest first; types of equal cost keep their order in
    /// `ranked`. For requests whose preferred flags re-rank the types.
    ///
    /// # Time complexity
    /// O(types²) with at most 32 types; no allocation.
    pub(crate) fn reordered(
        ranked: &[u8],
        admits: impl Fn(u8) -> bool,
        cost: impl Fn(u8) -> u32,
    ) -> Self {
        let mut reordered = Self {
            types: [0; 32],
            len: 0,
        };
        let mut costs = [0u32; 32];
        for &index in ranked.iter().filter(|&&t| admits(t)).take(32) {
            // Insertion sort: stable.
            let cost = cost(index);
            let mut at = reordered.len as usize;
            while at > 0 && costs[at - 1] > cost {
                costs[at] = costs[at - 1];
                reordered.types[at] = reordered.types[at - 1];
                at -= 1;
            }
            costs[at] = cost;
            reordered.types[at] = index;
            reordered.len += 1;
        }
        reordered
    }
}

/// Flag weights of one usage: `(flag, weight)` pairs.
struct Preference {
    required: Props,
    preferred: [(Props, u32); 3],
    unwanted: [(Props, u32); 2],
}

fn preference(usage: Usage) -> Preference {
    let none = (Props::empty(), 0);
    let prefer_host = usage.contains(Usage::PREFER_HOST);
    if usage.contains(Usage::READBACK) {
        // The host reads: uncached reads are an order of magnitude slower.
        Preference {
            required: Props::HOST_VISIBLE,
            preferred: [(Props::HOST_CACHED, 4), (Props::HOST_COHERENT, 2), none],
            unwanted: [(Props::DEVICE_LOCAL, 1), none],
        }
    } else if usage.contains(Usage::UPLOAD)
        && usage.contains(Usage::ALLOW_TRANSFER_INSTEAD)
        && prefer_host
    {
        // Written by the host where it can, kept out of VRAM where it can:
        // host-visible memory as staging ranks it (below: outside VRAM,
        // then the BAR), then memory the host cannot map (a transfer, as
        // the flag allows), outside VRAM first; never a failure for want
        // of a host-visible type.
        Preference {
            required: Props::empty(),
            preferred: [(Props::HOST_VISIBLE, 8), (Props::HOST_COHERENT, 4), none],
            unwanted: [(Props::DEVICE_LOCAL, 2), (Props::HOST_CACHED, 1)],
        }
    } else if usage.contains(Usage::UPLOAD) && usage.contains(Usage::ALLOW_TRANSFER_INSTEAD) {
        // Read by the GPU often; written by the host directly only when that
        // costs the GPU nothing: device-local memory first, host-visible as
        // well when the device has such (else the engine uses a transfer),
        // and of two such, the coherent one, as for the other host writes:
        // MoltenVK lists a non-coherent type (managed storage) before the
        // coherent one, and writes there need flushes.
        Preference {
            required: Props::empty(),
            preferred: [
                (Props::DEVICE_LOCAL, 4),
                (Props::HOST_VISIBLE, 2),
                (Props::HOST_COHERENT, 1),
            ],
            unwanted: [(Props::HOST_CACHED, 1), none],
        }
    } else if usage.contains(Usage::UPLOAD) && usage.contains(Usage::DEVICE_LOCAL) && !prefer_host {
        // Written by the host every frame, read by the GPU many times: VRAM
        // through the BAR when the device has it.
        Preference {
            required: Props::HOST_VISIBLE,
            preferred: [(Props::DEVICE_LOCAL, 4), (Props::HOST_COHERENT, 2), none],
            unwanted: [(Props::HOST_CACHED, 1), none],
        }
    } else if usage.contains(Usage::UPLOAD) {
        // Staging: sequential host writes (write-combined is best), read once
        // by a transfer; keep VRAM and the BAR for what the GPU reads often.
        Preference {
            required: Props::HOST_VISIBLE,
            preferred: [(Props::HOST_COHERENT, 4), none, none],
            unwanted: [(Props::DEVICE_LOCAL, 2), (Props::HOST_CACHED, 1)],
        }
    } else if usage.contains(Usage::TRANSIENT) {
        Preference {
            required: Props::empty(),
            preferred: [(Props::LAZILY_ALLOCATED, 4), (Props::DEVICE_LOCAL, 2), none],
            unwanted: [(Props::HOST_VISIBLE, 1), none],
        }
    } else if prefer_host {
        // GPU only, out of VRAM (VMA's AUTO_PREFER_HOST counts
        // DEVICE_LOCAL alone, and takes the first type of a tie): system
        // memory, the write-combined type before the cached one, which
        // the GPU reads through the host's caches.
        Preference {
            required: Props::empty(),
            preferred: [none, none, none],
            unwanted: [(Props::DEVICE_LOCAL, 4), (Props::HOST_CACHED, 1)],
        }
    } else {
        // GPU only. Host-visible device-local memory (the BAR, or shared memory
        // of an integrated GPU) is left for what the host writes.
        Preference {
            required: Props::empty(),
            preferred: [(Props::DEVICE_LOCAL, 4), none, none],
            unwanted: [(Props::HOST_VISIBLE, 2), (Props::HOST_CACHED, 1)],
        }
    }
}

/// Ranks the memory types allowed by `memory_type_bits` for `usage`, leaving
/// out types whose heap is smaller than `size`, protected types, and lazily
/// allocated types unless the usage is [`Usage::TRANSIENT`]. Types in `last`
/// (one bit per type index) rank after every other type, whatever their flags:
/// AMD's device-coherent types when their feature is enabled.
///
/// # Time complexity
/// O(types²) with at most 32 types; no allocation.
pub(crate) fn rank_memory_types(
    types: &[MemoryType],
    heaps: &[MemoryHeap],
    memory_type_bits: u32,
    usage: Usage,
    size: u64,
    last: u32,
) -> Candidates {
    let preference = preference(usage);
    let admits = |index: u8| {
        let ty = &types[usize::from(index)];
        let allowed = memory_type_bits & (1 << index) != 0;
        let heap_fits = heaps.get(ty.heap as usize).is_some_and(|h| h.size >= size);
        let lazy_ok =
            !ty.props.contains(Props::LAZILY_ALLOCATED) || usage.contains(Usage::TRANSIENT);
        allowed
            && heap_fits
            && lazy_ok
            && !ty.props.contains(Props::PROTECTED)
            && ty.props.contains(preference.required)
    };
    let cost = |index: u8| {
        let props = types[usize::from(index)].props;
        let missing: u32 = preference
            .preferred
            .iter()
            .filter(|(flag, _)| !flag.is_empty() && !props.contains(*flag))
            .map(|(_, weight)| weight)
            .sum();
        let unwanted: u32 = preference
            .unwanted
            .iter()
            .filter(|(flag, _)| !flag.is_empty() && props.contains(*flag))
            .map(|(_, weight)| weight)
            .sum();
        // Above any sum of flag weights.
        let demoted = if last & (1 << index) != 0 { 1 << 16 } else { 0 };
        missing + unwanted + demoted
    };
    // Stable, so equal costs keep the driver's order.
    let indices: [u8; 32] = std::array::from_fn(|index| index as u8);
    Candidates::reordered(&indices[..types.len().min(32)], admits, cost)
}

/// The ranking of every memory type for each usage, computed once per
/// device, so requests do not rank again.
///
/// [`rank_memory_types`] filters by `memoryTypeBits` and heap size, then
/// sorts stably by a cost that depends on the type and usage alone; so
/// ranking all types once and dropping the excluded ones per request (see
/// [`RankTable::admits`]) yields the same list in the same order.
/// `DEVICE_ADDRESS` does not take part in ranking, so the other six usage
/// flags ([`RANKING_FLAGS`]) index the table ([`rank_index`]).
#[derive(Clone, Debug)]
pub(crate) struct RankTable {
    by_usage: [Candidates; 1 << RANKING_FLAGS.len()],
    /// The size of each memory type's heap (0 when the type or its heap
    /// does not exist), for the per-request size filter: read here, not
    /// through the type's heap index in the device's tables, which cost
    /// two bounds checks and two dependent loads per candidate.
    heap_sizes: [u64; 32],
    /// The types ranked last (AMD's device-coherent ones with their
    /// feature on), one bit per type index: candidates of a request only
    /// when it admits no other ([`RankTable::is_last_resort`]).
    last: u32,
}

impl RankTable {
    /// Ranks `types` for every combination of the ranking usage flags, the
    /// types in `last` after all others ([`rank_memory_types`]).
    pub(crate) fn new(types: &[MemoryType], heaps: &[MemoryHeap], last: u32) -> Self {
        let mut heap_sizes = [0; 32];
        for (index, ty) in types.iter().enumerate().take(32) {
            heap_sizes[index] = heaps.get(ty.heap as usize).map_or(0, |heap| heap.size);
        }
        Self {
            heap_sizes,
            last,
            by_usage: std::array::from_fn(|index| {
                // Size 0 keeps every type whose heap exists; the size filter
                // is applied per request.
                rank_memory_types(types, heaps, u32::MAX, usage_of_rank_index(index), 0, last)
            }),
        }
    }

    /// Every memory type usable for `usage`, best first, before the
    /// `memoryTypeBits` and heap-size filters.
    ///
    /// # Time complexity
    /// O(1).
    #[inline]
    pub(crate) fn ranked(&self, usage: Usage) -> &[u8] {
        self.by_usage[rank_index(usage)].as_slice()
    }

    /// Whether memory type `index` is one of the types ranked last (AMD's
    /// device-coherent ones, with their feature on): a request takes one
    /// only when its `memoryTypeBits` admit no other type ranked for its
    /// usage (crash breadcrumbs), never as the fallback of an ordinary
    /// request that the other types refused, which would put it in
    /// uncached device memory.
    #[inline]
    pub(crate) fn is_last_resort(&self, index: u8) -> bool {
        self.last & 1u32.wrapping_shl(u32::from(index)) != 0
    }

    /// Whether a request whose first candidate is `first` may fall back to
    /// memory type `index` when `first` refused it: `index` admits the
    /// request ([`admits`](Self::admits)), and is no last-resort type
    /// ([`is_last_resort`](Self::is_last_resort)) unless `first` is one.
    /// The allocation path's walk over the next types and
    /// `allocate_many`'s up-front check both take this.
    #[inline]
    pub(crate) fn falls_back_to(
        &self,
        first: u8,
        index: u8,
        memory_type_bits: u32,
        size: u64,
    ) -> bool {
        self.admits(index, memory_type_bits, size)
            && (self.is_last_resort(first) || !self.is_last_resort(index))
    }

    /// Whether memory type `index` of a ranked list takes a request of
    /// `size` bytes (at least 1: every request's, `check_requirements`)
    /// allowed in `memory_type_bits`: the per-request filters of
    /// [`rank_memory_types`]. A type without a heap has size 0 here, so it
    /// is never admitted, as there.
    #[inline]
    pub(crate) fn admits(&self, index: u8, memory_type_bits: u32, size: u64) -> bool {
        debug_assert!(size > 0, "requests of 0 bytes are refused before ranking");
        memory_type_bits & (1 << index) != 0
            && self
                .heap_sizes
                .get(usize::from(index))
                .is_some_and(|&heap| heap >= size)
    }
}

/// The usage flags ranking depends on: all but `DEVICE_ADDRESS`, whose bit
/// (4) the table's index leaves out.
const RANKING_FLAGS: [Usage; 6] = [
    Usage::DEVICE_LOCAL,
    Usage::UPLOAD,
    Usage::READBACK,
    Usage::TRANSIENT,
    Usage::ALLOW_TRANSFER_INSTEAD,
    Usage::PREFER_HOST,
];

/// `usage`'s entry in [`RankTable`]: its flags' bits with
/// `DEVICE_ADDRESS`'s (bit 4) taken out, the bits above it moved down one
/// (callgrind: the allocation path's instructions as with a test per flag,
/// which LLVM folded as well, before the sixth flag).
#[inline]
fn rank_index(usage: Usage) -> usize {
    const _: () = assert!(Usage::DEVICE_ADDRESS.bits() == 1 << 4);
    const _: () = assert!(Usage::PREFER_HOST.bits() == 1 << 6);
    let bits = usage.bits();
    (bits & 0b1111 | (bits >> 1) & 0b11_0000) as usize
}

/// The usage whose [`rank_index`] is `index` (below `1 <<
/// RANKING_FLAGS.len()`), without `DEVICE_ADDRESS`.
fn usage_of_rank_index(index: usize) -> Usage {
    let index = index as u32;
    Usage::from_bits(index & 0b1111 | (index & 0b11_0000) << 1)
}

#[cfg(all(test, feature = "fake-device"))]
mod tests;
