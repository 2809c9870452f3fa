//! The rows without Vulkan: vk-suballoc's offset core and the
//! `offset-allocator` crate's, each managing one 4 GiB range
//! ([`CORE_CAPACITY`]) with sizes rounded as vk-suballoc's pools round them
//! ([`round_up_pow2`]), and [`HarnessFloor`], no allocator at all, the cost
//! of the replay's own loop under every row. They are apart from the
//! Vulkan allocators of `backends.rs` because they hand out offsets, not
//! memory: nothing is bound, and they run on no device.

use ash::vk;

use super::Backend;
use crate::trace::Req;

/// The range both cores manage: 4 GiB.
pub const CORE_CAPACITY: u64 = 4 << 30;

/// `value` rounded up to a multiple of `to`, a power of two (every Vulkan
/// alignment is one), with a mask: how vk-suballoc's pools round
/// (`round_up` in `src/allocator/place/pool_request.rs`).
/// `next_multiple_of` would be a division in the timed region of the core
/// rows alone, which the pools never pay: it made both cores slower than
/// the pools' own use of the core, and so flattered vk-suballoc's "within
/// 1.5x of our core" ratio.
#[inline]
pub fn round_up_pow2(value: u64, to: u64) -> u64 {
    debug_assert!(to.is_power_of_two());
    (value + (to - 1)) & !(to - 1)
}

/// Our core; with a `STRATEGY` other than [`MIN_TIME`] through
/// `allocate_with(.., strategy)` (`--strategy min-memory`, `min-offset` or
/// `max-offset`),
/// a type of its own so that the default row's loop has no test of the
/// strategy.
pub struct OurCore<const STRATEGY: u8 = MIN_TIME> {
    core: vk_suballoc::offset::OffsetAllocator,
}

/// [`OurCore`]'s `STRATEGY` for `Strategy::MinTime`, through `allocate`.
pub const MIN_TIME: u8 = 0;
/// [`OurCore`]'s `STRATEGY` for `Strategy::MinMemory`.
pub const MIN_MEMORY: u8 = 1;
/// [`OurCore`]'s `STRATEGY` for `Strategy::MinOffset`.
pub const MIN_OFFSET: u8 = 2;
/// [`OurCore`]'s `STRATEGY` for `Strategy::MaxOffset`.
pub const MAX_OFFSET: u8 = 3;

impl<const STRATEGY: u8> OurCore<STRATEGY> {
    pub fn new(max_allocations: u32) -> Self {
        Self {
            core: vk_suballoc::offset::OffsetAllocator::new(CORE_CAPACITY, max_allocations)
                .expect("core capacity"),
        }
    }
}

impl<const STRATEGY: u8> Backend for OurCore<STRATEGY> {
    type Handle = vk_suballoc::offset::OffsetAllocation;

    /// The size rounded up to the alignment, as vk-suballoc's pools place
    /// requests in their blocks (and as offset-allocator's row counts them,
    /// in whole units): exact sizes would leave slivers below the
    /// alignment between ranges, which clutter the bins and cost this row
    /// time the pools never spend (about 25 % at a million live
    /// allocations in the scaling run). Rounded with a mask, as the pools
    /// round ([`round_up_pow2`]).
    #[inline]
    fn allocate(&mut self, req: &Req) -> Option<Self::Handle> {
        let align = req.requirements.alignment;
        let size = round_up_pow2(req.requirements.size, align);
        let strategy = match STRATEGY {
            MIN_TIME => return self.core.allocate(size, align).ok(),
            MIN_MEMORY => vk_suballoc::Strategy::MinMemory,
            MIN_OFFSET => vk_suballoc::Strategy::MinOffset,
            _ => vk_suballoc::Strategy::MaxOffset,
        };
        self.core.allocate_with(size, align, strategy).ok()
    }

    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        self.core.free(handle.id).expect("live id");
    }

    fn placement(&self, handle: &Self::Handle) -> (vk::DeviceMemory, u64) {
        (vk::DeviceMemory::null(), handle.offset)
    }
}

/// No allocator at all: each allocation hands back a handle the size of
/// vk-suballoc's [`Allocation`](vk_suballoc::Allocation) (64 bytes, and
/// `Option` of it too) holding a counter, and a free drops it. Its replay
/// costs what the harness alone costs: the trace's loop and the reads and
/// writes of its table of handles, one slot per live allocation, at random
/// slots. That table is 64 KiB at 1e3 live allocations and 64 MiB at 1e6,
/// past every cache here: the floor under every row of the scaling run.
#[derive(Default)]
pub struct HarnessFloor {
    next: u64,
}

/// [`HarnessFloor`]'s handle: a non-zero word (so that `Option` of it
/// takes no more room, as `Option<Allocation>` takes none) and seven more.
#[derive(Clone, Copy, Debug)]
pub struct FloorHandle {
    _first: std::num::NonZeroU64,
    _rest: [u64; 7],
}

impl Backend for HarnessFloor {
    type Handle = FloorHandle;

    #[inline]
    fn allocate(&mut self, _: &Req) -> Option<Self::Handle> {
        self.next += 1;
        let first = std::num::NonZeroU64::new(self.next).expect("counts from 1");
        Some(std::hint::black_box(FloorHandle {
            _first: first,
            _rest: [self.next; 7],
        }))
    }

    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        std::hint::black_box(handle);
    }

    fn placement(&self, _: &Self::Handle) -> (vk::DeviceMemory, u64) {
        (vk::DeviceMemory::null(), 0)
    }
}

/// offset-allocator's sizes and offsets are `u32`, so it manages a 4 GiB
/// range in units of `2^shift` bytes, and pads a request whose alignment
/// is above the unit (it has no alignment of its own).
pub struct OffsetAllocatorCore {
    core: offset_allocator::Allocator,
    shift: u32,
}

impl OffsetAllocatorCore {
    /// The core with the unit [`offset_allocator_unit_shift`] picks for
    /// `requests`.
    pub fn new(max_allocations: u32, requests: &[Req]) -> Self {
        let shift = offset_allocator_unit_shift(requests);
        Self {
            core: offset_allocator::Allocator::with_max_allocs(
                (CORE_CAPACITY >> shift) as u32,
                max_allocations,
            ),
            shift,
        }
    }
}

/// The unit (as a power-of-two shift) that wastes the fewest bytes over
/// `requests`: a request takes its size rounded up to whole units, plus
/// `alignment / unit - 1` units of padding when its alignment is larger.
/// The candidates run from the smallest alignment to the largest (a unit
/// below the smallest only adds padding, one above the largest only
/// rounding), and at least 2 bytes, so that 4 GiB in units fits a `u32`.
/// A user who knows the alignments would pick so; a fixed 64 bytes rounded
/// every size of the H200's 16-byte-aligned buffers up to 64 (more
/// reserved bytes than our core, which rounds to the alignment), and on
/// lavapipe, whose buffers are 64-byte aligned, this picks 64.
pub fn offset_allocator_unit_shift(requests: &[Req]) -> u32 {
    let shift_of = |a: u64| a.max(1).trailing_zeros();
    let lowest = requests
        .iter()
        .map(|r| shift_of(r.requirements.alignment))
        .min()
        .unwrap_or(0)
        .max(1);
    let highest = requests
        .iter()
        .map(|r| shift_of(r.requirements.alignment))
        .max()
        .unwrap_or(0)
        .max(lowest);
    let waste = |shift: u32| -> u64 {
        requests
            .iter()
            .map(|r| {
                let (size, alignment) = (r.requirements.size, r.requirements.alignment);
                let units = size.div_ceil(1 << shift) + (alignment >> shift).max(1) - 1;
                (units << shift) - size
            })
            .sum()
    };
    (lowest..=highest)
        .min_by_key(|&shift| waste(shift))
        .unwrap_or(lowest)
}
impl Backend for OffsetAllocatorCore {
    /// The allocation and its aligned start in bytes.
    type Handle = (offset_allocator::Allocation, u64);

    #[inline]
    fn allocate(&mut self, req: &Req) -> Option<Self::Handle> {
        let shift = self.shift;
        let size = (req.requirements.size + ((1 << shift) - 1)) >> shift;
        let align = (req.requirements.alignment >> shift).max(1);
        let a = self.core.allocate((size + align - 1) as u32)?;
        let start = round_up_pow2(u64::from(a.offset), align) << shift;
        Some((a, start))
    }

    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        self.core.free(handle.0);
    }

    fn placement(&self, handle: &Self::Handle) -> (vk::DeviceMemory, u64) {
        (vk::DeviceMemory::null(), handle.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Kind;

    #[test]
    fn the_mask_rounds_as_next_multiple_of_for_every_power_of_two() {
        for shift in 0..20 {
            let to = 1u64 << shift;
            for value in (0..5000).chain([to - 1, to, to + 1, (1 << 35) + 3]) {
                assert_eq!(
                    round_up_pow2(value, to),
                    value.next_multiple_of(to),
                    "{value} {to}"
                );
            }
        }
    }

    /// The floor's table slots take the room vk-suballoc's do, so that
    /// it pays the same cache misses for them.
    #[test]
    fn the_floor_s_handle_slots_are_the_size_of_vk_suballoc_s() {
        use std::mem::size_of;
        assert_eq!(
            size_of::<Option<FloorHandle>>(),
            size_of::<Option<vk_suballoc::Allocation>>()
        );
        assert_eq!(size_of::<Option<FloorHandle>>(), 64);
    }

    fn req(size: u64, alignment: u64, kind: Kind) -> Req {
        Req::device_local(size, alignment, kind)
    }

    /// The H200 aligns buffers to 16 bytes and rounds their sizes to 16:
    /// offset-allocator then packs them as our core does, not at 64-byte
    /// steps.
    #[test]
    fn offset_allocator_packs_16_byte_aligned_buffers_without_rounding_to_64() {
        let requests = vec![req(80, 16, Kind::Buffer); 4];
        assert_eq!(offset_allocator_unit_shift(&requests), 4);
        let mut core = OffsetAllocatorCore::new(16, &requests);
        let starts: Vec<u64> = requests
            .iter()
            .map(|r| core.allocate(r).unwrap().1)
            .collect();
        assert_eq!(starts, [0, 80, 160, 240]);
    }

    /// lavapipe: 64-byte-aligned buffers of any size and 16-byte-aligned
    /// images of whole KiB: 64-byte units waste least (16 would pad every
    /// buffer by 48 bytes).
    #[test]
    fn offset_allocator_units_are_64_bytes_on_lavapipe_requests() {
        let requests = [
            req(100, 64, Kind::Buffer),
            req(4097, 64, Kind::Buffer),
            req(1024, 16, Kind::Image),
            req(65536, 16, Kind::Image),
        ];
        assert_eq!(offset_allocator_unit_shift(&requests), 6);
    }

    /// A request aligned above the unit is padded and its start aligned.
    #[test]
    fn offset_allocator_starts_are_aligned_above_the_unit() {
        let requests = [
            req(48, 16, Kind::Buffer),
            req(1024, 1024, Kind::Image),
            req(48, 16, Kind::Buffer),
            req(48, 16, Kind::Buffer),
            req(48, 16, Kind::Buffer),
        ];
        let mut core = OffsetAllocatorCore::new(16, &requests);
        let starts: Vec<u64> = requests
            .iter()
            .map(|r| core.allocate(r).unwrap().1)
            .collect();
        assert_eq!(starts[1] % 1024, 0, "{starts:?}");
        for (i, r) in requests.iter().enumerate() {
            for (j, q) in requests.iter().enumerate().skip(i + 1) {
                let (a, b) = (starts[i], starts[j]);
                let disjoint = a + r.requirements.size <= b || b + q.requirements.size <= a;
                assert!(disjoint, "{starts:?}");
            }
        }
    }
}
