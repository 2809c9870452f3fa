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
mod tests {
    use super::*;
    use crate::device::fake::FakeLayout;

    /// Every usage flag; their 128 combinations are every usage there is.
    const USAGE_FLAGS: [Usage; 7] = [
        Usage::DEVICE_LOCAL,
        Usage::UPLOAD,
        Usage::READBACK,
        Usage::TRANSIENT,
        Usage::DEVICE_ADDRESS,
        Usage::ALLOW_TRANSFER_INSTEAD,
        Usage::PREFER_HOST,
    ];

    fn rank(layout: &FakeLayout, usage: Usage) -> Vec<u8> {
        rank_memory_types(&layout.memory_types, &layout.memory_heaps, !0, usage, 1, 0)
            .as_slice()
            .to_vec()
    }

    #[test]
    fn discrete_gpu_choices() {
        let gpu = FakeLayout::discrete();
        // 0 none, 1 DL, 2 HV|HC, 3 HV|HC|HCached, 4 DL|HV|HC (BAR)
        assert_eq!(rank(&gpu, Usage::DEVICE_LOCAL)[0], 1);
        assert_eq!(rank(&gpu, Usage::DEVICE_LOCAL).last(), Some(&3));
        assert_eq!(rank(&gpu, Usage::UPLOAD), vec![2, 3, 4]);
        assert_eq!(
            rank(&gpu, Usage::UPLOAD | Usage::DEVICE_LOCAL),
            vec![4, 2, 3]
        );
        assert_eq!(rank(&gpu, Usage::READBACK), vec![3, 2, 4]);
        // The BAR, then VRAM (unmapped), then system memory.
        let optional = Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD;
        assert_eq!(rank(&gpu, optional), vec![4, 1, 2, 3, 0]);
        assert_eq!(
            rank(&gpu, optional | Usage::DEVICE_LOCAL),
            vec![4, 1, 2, 3, 0]
        );
        // Host reads still need host-visible memory.
        assert_eq!(rank(&gpu, optional | Usage::READBACK), vec![3, 2, 4]);
        // Out of VRAM: system memory (the unmappable type first, as the
        // driver lists it; uncached before cached), then VRAM.
        let parked = Usage::PREFER_HOST;
        assert_eq!(rank(&gpu, parked), vec![0, 2, 3, 1, 4]);
        assert_eq!(
            rank(&gpu, parked | Usage::DEVICE_LOCAL),
            vec![0, 2, 3, 1, 4]
        );
        // Host writes: staging memory, also where `DEVICE_LOCAL` asked for
        // the BAR; with a transfer allowed, then memory not mapped,
        // outside VRAM first.
        assert_eq!(rank(&gpu, parked | Usage::UPLOAD), vec![2, 3, 4]);
        assert_eq!(
            rank(&gpu, parked | Usage::UPLOAD | Usage::DEVICE_LOCAL),
            vec![2, 3, 4]
        );
        assert_eq!(rank(&gpu, parked | optional), vec![2, 3, 4, 0, 1]);
        assert_eq!(rank(&gpu, parked | Usage::READBACK), vec![3, 2, 4]);
    }

    #[test]
    fn integrated_gpu_choices() {
        let gpu = FakeLayout::integrated();
        // 0 DL, 1 DL|HV|HC, 2 DL|HV|HC|HCached
        assert_eq!(rank(&gpu, Usage::DEVICE_LOCAL), vec![0, 1, 2]);
        assert_eq!(rank(&gpu, Usage::UPLOAD), vec![1, 2]);
        assert_eq!(rank(&gpu, Usage::READBACK), vec![2, 1]);
        // Device-local host-visible memory: written directly.
        let optional = Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD;
        assert_eq!(rank(&gpu, optional), vec![1, 2, 0]);
        // All memory is device-local: `PREFER_HOST` only puts the cached
        // type last.
        assert_eq!(rank(&gpu, Usage::PREFER_HOST), vec![0, 1, 2]);
        assert_eq!(rank(&gpu, optional | Usage::PREFER_HOST), vec![1, 2, 0]);
    }

    #[test]
    fn mobile_gpu_choices() {
        let gpu = FakeLayout::mobile();
        // 0 DL, 1 DL|HV|HC, 2 DL|HV|HCached (non-coherent), 3 DL|LAZY
        assert_eq!(rank(&gpu, Usage::DEVICE_LOCAL), vec![0, 1, 2]);
        assert_eq!(rank(&gpu, Usage::READBACK), vec![2, 1]);
        assert_eq!(rank(&gpu, Usage::UPLOAD), vec![1, 2]);
        assert_eq!(rank(&gpu, Usage::TRANSIENT)[0], 3);
    }

    /// Intel Arc without resizable BAR: the only system-memory type is
    /// cached, the only uncached host-visible one the 256 MiB BAR.
    #[test]
    fn intel_arc_small_bar_choices() {
        let gpu = FakeLayout::intel_arc();
        // 0 DL, 1 HV|HC|HCached (system), 2 DL|HV|HC (BAR)
        assert_eq!(rank(&gpu, Usage::DEVICE_LOCAL), vec![0, 2, 1]);
        // Staging stays out of the BAR: cached system memory, which VMA
        // picks too (a tie there, broken by the index).
        assert_eq!(rank(&gpu, Usage::UPLOAD), vec![1, 2]);
        assert_eq!(rank(&gpu, Usage::UPLOAD | Usage::DEVICE_LOCAL), vec![2, 1]);
        assert_eq!(rank(&gpu, Usage::READBACK), vec![1, 2]);
        let optional = Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD;
        assert_eq!(rank(&gpu, optional), vec![2, 0, 1]);
    }

    /// MoltenVK on Apple silicon lists managed storage (cached, not
    /// coherent) before shared storage (cached and coherent). VMA's flag
    /// counts tie them for uploads the GPU reads and prefer neither for
    /// readback, so it takes the first, which needs flushes and
    /// invalidations; the coherent one goes first here.
    #[test]
    fn apple_choices() {
        let gpu = FakeLayout::apple();
        // 0 DL, 1 DL|HV|HCached (non-coherent), 2 DL|HV|HC|HCached
        assert_eq!(rank(&gpu, Usage::DEVICE_LOCAL), vec![0, 1, 2]);
        assert_eq!(rank(&gpu, Usage::UPLOAD), vec![2, 1]);
        assert_eq!(rank(&gpu, Usage::UPLOAD | Usage::DEVICE_LOCAL), vec![2, 1]);
        assert_eq!(rank(&gpu, Usage::READBACK), vec![2, 1]);
        let optional = Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD;
        assert_eq!(rank(&gpu, optional), vec![2, 1, 0]);
    }

    /// Mali has no device-local type the host cannot map: GPU-only data
    /// takes the uncached one, and the lazily allocated type is for
    /// transient attachments only.
    #[test]
    fn mali_choices() {
        let gpu = FakeLayout::mali();
        // 0 DL|HV|HC, 1 DL|HV|HC|HCached, 2 DL|LAZY
        assert_eq!(rank(&gpu, Usage::DEVICE_LOCAL), vec![0, 1]);
        assert_eq!(rank(&gpu, Usage::UPLOAD), vec![0, 1]);
        assert_eq!(rank(&gpu, Usage::READBACK), vec![1, 0]);
        assert_eq!(rank(&gpu, Usage::TRANSIENT), vec![2, 0, 1]);
    }

    /// AMD's device-coherent duplicates (types 4–7) rank after every
    /// normal type, whatever the usage, when their feature is enabled; in
    /// the driver's order among themselves by cost.
    #[test]
    fn demoted_types_rank_last() {
        let gpu = FakeLayout::amd();
        let ranked = |usage| {
            rank_memory_types(
                &gpu.memory_types,
                &gpu.memory_heaps,
                !0,
                usage,
                1,
                0b1111_0000,
            )
            .as_slice()
            .to_vec()
        };
        // 0 DL, 1 HV|HC, 2 DL|HV|HC (BAR), 3 HV|HC|HCached, 4..7 the same, AMD.
        assert_eq!(ranked(Usage::DEVICE_LOCAL), vec![0, 2, 1, 3, 4, 6, 5, 7]);
        assert_eq!(ranked(Usage::UPLOAD), vec![1, 3, 2, 5, 7, 6]);
        assert_eq!(ranked(Usage::READBACK), vec![3, 1, 2, 7, 5, 6]);
        // Not demoted, the duplicates interleave with the normal types.
        assert_eq!(
            rank(&gpu, Usage::DEVICE_LOCAL),
            vec![0, 4, 2, 6, 1, 5, 3, 7]
        );
    }

    #[test]
    fn memory_type_bits_and_heap_sizes_filter() {
        let gpu = FakeLayout::discrete();
        let only_host = rank_memory_types(
            &gpu.memory_types,
            &gpu.memory_heaps,
            0b01100,
            Usage::DEVICE_LOCAL,
            1,
            0,
        );
        assert_eq!(only_host.as_slice(), &[2, 3]);
        // 512 MiB does not fit the 256 MiB BAR heap.
        let big = rank_memory_types(
            &gpu.memory_types,
            &gpu.memory_heaps,
            !0,
            Usage::UPLOAD | Usage::DEVICE_LOCAL,
            512 << 20,
            0,
        );
        assert_eq!(big.as_slice(), &[2, 3]);
        assert!(!big.is_empty());
        assert!(
            rank_memory_types(&gpu.memory_types, &gpu.memory_heaps, 0, Usage::UPLOAD, 1, 0)
                .is_empty()
        );
    }

    /// Whether every `false` of `flags` comes before every `true`.
    fn falses_first(flags: impl Iterator<Item = bool>) -> bool {
        let flags: Vec<bool> = flags.collect();
        flags.windows(2).all(|pair| pair[0] <= pair[1])
    }

    /// Every usage, every preset (and one with a protected type): the
    /// first type is the one an engine developer expects, and the order
    /// never puts a worse kind of memory before a better one.
    /// - never a protected type; lazily allocated ones for `TRANSIENT` only;
    ///   only host-visible ones when the host reads or writes directly;
    /// - `READBACK`: host-cached first where the device has it;
    /// - `UPLOAD | DEVICE_LOCAL`: device-local host-visible (BAR, ReBAR,
    ///   unified) first, every one of those before host memory;
    /// - `UPLOAD` (staging): host-visible memory outside VRAM first,
    ///   uncached where the device has it there;
    /// - `UPLOAD | ALLOW_TRANSFER_INSTEAD` and GPU-only: every device-local
    ///   type before any host type; GPU-only data first where the host
    ///   cannot map it; `TRANSIENT`: lazily allocated memory first;
    /// - with `PREFER_HOST`: `UPLOAD` (with `DEVICE_LOCAL` too) as staging;
    ///   `UPLOAD | ALLOW_TRANSFER_INSTEAD` every host-visible type first,
    ///   outside VRAM where the device has such; GPU-only every type outside
    ///   VRAM first, uncached where the device has such;
    /// - types ranked last (AMD's device-coherent ones) after all others.
    #[test]
    fn every_usage_on_every_preset_ranks_as_an_engine_expects() {
        let mut protected = FakeLayout::discrete();
        protected.memory_types.insert(
            0,
            MemoryType {
                heap: 0,
                props: Props::DEVICE_LOCAL | Props::PROTECTED,
            },
        );
        let mut layouts: Vec<(FakeLayout, u32)> = vec![
            (FakeLayout::discrete(), 0),
            (FakeLayout::rebar(), 0),
            (FakeLayout::integrated(), 0),
            (FakeLayout::mobile(), 0),
            (FakeLayout::lavapipe(), 0),
            (FakeLayout::amd(), 0b1111_0000),
            (FakeLayout::intel_arc(), 0),
            (FakeLayout::apple(), 0),
            (FakeLayout::mali(), 0),
            (protected, 0),
        ];
        // Whatever order the driver lists the types in.
        for index in 0..layouts.len() {
            let (mut reversed, last) = layouts[index].clone();
            reversed.memory_types.reverse();
            let count = reversed.memory_types.len() as u32;
            layouts.push((reversed, last.reverse_bits() >> (32 - count)));
        }
        let flags = USAGE_FLAGS;
        let (dl, hv, cached) = (Props::DEVICE_LOCAL, Props::HOST_VISIBLE, Props::HOST_CACHED);
        let originals = layouts.len() / 2;
        for (index, (layout, last)) in layouts.iter().enumerate() {
            let order = if index < originals {
                ""
            } else {
                " (types reversed)"
            };
            let types = &layout.memory_types;
            for combo in 0..1u32 << flags.len() {
                let mut usage = Usage::default();
                for (bit, flag) in flags.iter().enumerate() {
                    if combo & (1 << bit) != 0 {
                        usage |= *flag;
                    }
                }
                let ranked = rank_memory_types(types, &layout.memory_heaps, !0, usage, 1, *last);
                let ctx = format!("{}{order} {usage:?}: {:?}", layout.name, ranked.as_slice());
                // Demoted types come after all the others.
                let demoted = ranked.as_slice().iter().map(|&t| last & (1 << t) != 0);
                assert!(falses_first(demoted), "{ctx}");
                let props: Vec<Props> = ranked
                    .as_slice()
                    .iter()
                    .filter(|&&t| last & (1 << t) == 0)
                    .map(|&t| types[usize::from(t)].props)
                    .collect();
                assert!(!props.is_empty(), "{ctx}");
                let first = props[0];
                // Whether a type the ranking kept has `flags` and none of `without`.
                let exists = |flags: Props, without: Props| {
                    props
                        .iter()
                        .any(|p| p.contains(flags) && !p.intersects(without))
                };
                // Every type with `flags` comes before every type without.
                let come_first =
                    |flags: Props| falses_first(props.iter().map(|p| !p.contains(flags)));
                for p in &props {
                    assert!(!p.contains(Props::PROTECTED), "{ctx}");
                    if p.contains(Props::LAZILY_ALLOCATED) {
                        assert!(usage.contains(Usage::TRANSIENT), "{ctx}");
                    }
                    if usage.needs_host_access() {
                        assert!(p.contains(hv), "{ctx}");
                    }
                }
                let upload = usage.contains(Usage::UPLOAD);
                let prefer_host = usage.contains(Usage::PREFER_HOST);
                // Every type without `flags` comes before every type with.
                let come_last =
                    |flags: Props| falses_first(props.iter().map(|p| p.contains(flags)));
                if usage.contains(Usage::READBACK) {
                    if exists(hv | cached, Props::empty()) {
                        assert!(first.contains(cached), "{ctx}");
                    }
                } else if upload && usage.contains(Usage::ALLOW_TRANSFER_INSTEAD) && prefer_host {
                    assert!(come_first(hv), "{ctx}");
                    if exists(hv, dl) {
                        assert!(!first.contains(dl), "{ctx}");
                    }
                } else if upload && usage.contains(Usage::ALLOW_TRANSFER_INSTEAD) {
                    assert!(come_first(dl), "{ctx}");
                    if exists(dl | hv, Props::empty()) {
                        assert!(first.contains(dl | hv), "{ctx}");
                    }
                } else if upload && usage.contains(Usage::DEVICE_LOCAL) && !prefer_host {
                    assert!(come_first(dl | hv), "{ctx}");
                } else if upload {
                    if exists(hv, dl) {
                        assert!(!first.contains(dl), "{ctx}");
                    }
                    // Uncached where system memory has it; the BAR is
                    // not worth it (Intel Arc's one uncached type).
                    if exists(
                        hv,
                        cached | if exists(hv, dl) { dl } else { Props::empty() },
                    ) {
                        assert!(!first.contains(cached), "{ctx}");
                    }
                } else if usage.contains(Usage::TRANSIENT) && exists(Props::LAZILY_ALLOCATED, hv) {
                    assert!(first.contains(Props::LAZILY_ALLOCATED), "{ctx}");
                } else if usage.contains(Usage::TRANSIENT) {
                    // No lazily allocated type: GPU-only memory, as below
                    // without `PREFER_HOST`, which a transient
                    // attachment does not heed.
                    assert!(come_first(dl), "{ctx}");
                } else if prefer_host {
                    assert!(come_last(dl), "{ctx}");
                    if exists(Props::empty(), dl | cached) {
                        assert!(!first.intersects(dl | cached), "{ctx}");
                    }
                } else {
                    assert!(come_first(dl), "{ctx}");
                    if exists(dl, hv) {
                        assert!(!first.contains(hv), "{ctx}");
                    }
                }
            }
        }
    }

    /// An empty [`Usage`] (what `Usage::default()`, and so
    /// `AllocationDesc::default()` and `Request::default()`, carry; what a
    /// port of gpu-allocator's `MemoryLocation::Unknown` may write) ranks
    /// the memory types exactly as `DEVICE_LOCAL` does, on every preset in
    /// either type order, with `DEVICE_ADDRESS` too (the README's "Coming
    /// from gpu-allocator" promises it).
    #[test]
    fn an_empty_usage_ranks_as_device_local() {
        for layout in FakeLayout::presets() {
            let mut reversed = layout.clone();
            reversed.memory_types.reverse();
            for layout in [layout, reversed] {
                for extra in [Usage::default(), Usage::DEVICE_ADDRESS] {
                    assert_eq!(
                        rank(&layout, extra),
                        rank(&layout, Usage::DEVICE_LOCAL | extra),
                        "{} ({:?}): {extra:?}",
                        layout.name,
                        layout.memory_types
                    );
                }
            }
        }
    }

    /// The flags [`Usage`]'s docs say change nothing where they do not
    /// apply leave the ranking exactly as it was, for every usage, on every
    /// preset in either type order: `DEVICE_ADDRESS` anywhere ("it
    /// restricts no memory type"), `ALLOW_TRANSFER_INSTEAD` without
    /// `UPLOAD` or with `READBACK`, and `PREFER_HOST` with `READBACK`, or
    /// with `TRANSIENT` and no `UPLOAD`.
    #[test]
    fn flags_that_do_not_apply_change_no_ranking() {
        for layout in FakeLayout::presets() {
            let mut reversed = layout.clone();
            reversed.memory_types.reverse();
            for layout in [layout, reversed] {
                for combo in 0..1u32 << USAGE_FLAGS.len() {
                    let usage = USAGE_FLAGS
                        .iter()
                        .enumerate()
                        .filter(|(bit, _)| combo & (1 << bit) != 0)
                        .fold(Usage::default(), |usage, (_, &flag)| usage | flag);
                    let upload = usage.contains(Usage::UPLOAD);
                    let readback = usage.contains(Usage::READBACK);
                    let transient = usage.contains(Usage::TRANSIENT);
                    let mut inert = vec![Usage::DEVICE_ADDRESS];
                    if !upload || readback {
                        inert.push(Usage::ALLOW_TRANSFER_INSTEAD);
                    }
                    if readback || (transient && !upload) {
                        inert.push(Usage::PREFER_HOST);
                    }
                    for flag in inert {
                        assert_eq!(
                            rank(&layout, usage | flag),
                            rank(&layout, usage),
                            "{} ({:?}): {usage:?} with {flag:?}",
                            layout.name,
                            layout.memory_types
                        );
                    }
                }
            }
        }
    }

    /// The table plus the per-request filters give exactly what ranking
    /// each request from scratch gives.
    #[test]
    fn rank_table_matches_ranking_per_request() {
        let flags = USAGE_FLAGS;
        for (layout, last) in [
            (FakeLayout::discrete(), 0),
            (FakeLayout::integrated(), 0),
            (FakeLayout::mobile(), 0),
            (FakeLayout::amd(), 0b1111_0000),
            (FakeLayout::intel_arc(), 0),
            (FakeLayout::apple(), 0),
            (FakeLayout::mali(), 0),
        ] {
            let (types, heaps) = (&layout.memory_types, &layout.memory_heaps);
            let table = RankTable::new(types, heaps, last);
            // Every combination of the flags, `ALLOW_TRANSFER_INSTEAD` too.
            for combo in 0..1u32 << flags.len() {
                let mut usage = Usage::default();
                for (bit, flag) in flags.iter().enumerate() {
                    if combo & (1 << bit) != 0 {
                        usage |= *flag;
                    }
                }
                for bits in [0, 1, 0b0110, 0b1010, 0b1_1111, u32::MAX, 1 << 31] {
                    for size in [1, 64 << 20, 300 << 20, 2 << 30, 1 << 40] {
                        let expected = rank_memory_types(types, heaps, bits, usage, size, last);
                        let fast: Vec<u8> = table
                            .ranked(usage)
                            .iter()
                            .copied()
                            .filter(|&t| table.admits(t, bits, size))
                            .collect();
                        assert_eq!(fast, expected.as_slice(), "{usage:?} {bits:#b} {size}");
                    }
                }
            }
        }
    }
}
