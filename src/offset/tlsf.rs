//! [`OffsetAllocator`]: a TLSF-style allocator of ranges of one address space.
//!
//! This file holds the state and the operations that change it; reports and
//! iteration live in `inspect.rs`, the bins of free gaps and the search
//! through them in `tlsf/gap_bins.rs`, the placements by address of
//! [`Strategy::MinOffset`] and [`Strategy::MaxOffset`] in
//! `tlsf/lowest_offset.rs`, and allocations at a
//! place the caller chose (the destinations of compaction's moves) in
//! `tlsf/move_destinations.rs`.

use super::allocation::{next_owner_tag, AllocationId, FreeRange, OffsetAllocation};
use super::bin_mask::BinMask;
use super::node::{Node, ADDRESS_BITS, NIL};
use super::report::{Counters, SearchStats};
use super::size_class::{bin_count, MantissaBits};
use super::{OffsetError, Strategy};

mod gap_bins;
mod lowest_offset;
mod move_destinations;

/// The largest capacity an [`OffsetAllocator`] manages: offsets take 48 bits.
pub const MAX_CAPACITY: u64 = (1u64 << ADDRESS_BITS) - 1;

/// The most allocation slots an [`OffsetAllocator`] can have.
pub const MAX_SLOTS: u32 = u32::MAX - 2;

/// Allocates ranges of `[0, capacity)` in O(1) (save near-failing requests,
/// see [`allocate`](Self::allocate)), with power-of-two alignment,
/// generational ids and exact reports. It knows nothing about what the range
/// is: a `VkDeviceMemory` block, a buffer, a descriptor heap.
///
/// `M` is the number of mantissa bits of the size classes (2 to 6, checked at
/// compile time): bins are at most `1/2^M` of their size wide. More bits mean
/// finer bins (`64 << M` of them) and a bin table of `12 << (M + 6)` bytes;
/// 3 suits most uses. Any other width is a build error:
/// ```compile_fail,E0080
/// let heap = vk_suballoc::offset::OffsetAllocator::<7>::new(1024, 16);
/// ```
///
/// # Panics
/// No method panics, whatever its arguments (sizes, alignments and ids up to
/// `u64::MAX` are errors, not panics). A node table the host cannot allocate
/// is [`OffsetError::OutOfHostMemory`]; only the fixed bin table, allocated
/// by [`new`](Self::new), aborts the process on failure, as any `Vec` does.
///
/// # Metadata
/// One 32-byte node per allocation slot, allocated by [`new`](Self::new)
/// and [`reserve_slots`](Self::reserve_slots), plus a fixed bin table (6 KiB
/// for `M = 3`); see [`metadata_bytes`](Self::metadata_bytes). Nothing inside
/// `[0, capacity)` is read or written, so the managed range may be device
/// memory the host cannot touch.
///
/// # How it works
/// Every allocation is a node in an address-ordered list and owns the free gap
/// after it; each non-empty gap sits in the free list of the bin of its size
/// (`size_class.rs`), found through a two-level bitmask. Allocation takes the
/// first non-empty bin whose every gap is large enough, splits the gap, and
/// files the head slack of an aligned placement and the tail back in their
/// bins. Freeing merges the allocation and both neighbouring gaps into the gap
/// of the previous node.
///
/// # Never a false out-of-space
/// The guaranteed search can miss gaps that are large enough but sit in a bin
/// whose lower bound is below the request (sebbbi/OffsetAllocator's
/// "round-up" rule, which fails to place 67 bytes in a 69-byte gap). Only when
/// that search finds nothing does `allocate` look into those *boundary* bins,
/// gap by gap; each bin keeps an upper bound of its largest gap, so bins that
/// cannot help are skipped without a look. So a failed allocation means that
/// no free range could hold the aligned request. See
/// [`allocate`](Self::allocate) for the exact cost.
///
/// # Example
/// ```
/// use vk_suballoc::offset::{OffsetAllocator, OffsetError};
///
/// let mut heap = OffsetAllocator::<3>::new(1024, 16)?;
/// let a = heap.allocate(100, 64)?;
/// assert_eq!(a.offset % 64, 0);
/// heap.free(a.id)?;
/// assert_eq!(heap.free(a.id), Err(OffsetError::StaleId));
/// assert_eq!(heap.storage_report().largest_free_range, 1024);
/// # Ok::<(), OffsetError>(())
/// ```
#[derive(Clone, Debug)]
pub struct OffsetAllocator<const M: u32 = 3> {
    /// Slot 0 is the sentinel; slots `1..` hold allocations or are unused.
    pub(super) nodes: Vec<Node>,
    pub(super) bin_heads: Box<[u32]>,
    /// Per bin, an upper bound of its largest gap (0 when empty).
    pub(super) bin_max_hint: Box<[u64]>,
    pub(super) mask: BinMask<M>,
    /// Top of the stack of unused slots.
    pub(super) unused_slot: u32,
    /// Last node in address order.
    tail: u32,
    pub(super) capacity: u64,
    pub(super) owner: u32,
    pub(super) free_bytes: u64,
    pub(super) free_ranges: u64,
    pub(super) counters: Counters,
    pub(super) search: SearchStats,
}

pub(super) const SENTINEL: u32 = 0;

/// The last generation a slot is live with (odd, as every live one): its
/// free retires the slot.
const LAST_GENERATION: u32 = u32::MAX;

impl<const M: u32> OffsetAllocator<M> {
    /// Creates an allocator of `capacity` bytes with room for `max_allocations`
    /// live allocations. All metadata is allocated here (32 bytes per slot plus
    /// the bin table); `allocate` and `free` never touch the heap.
    ///
    /// # Errors
    /// [`OffsetError::CapacityTooLarge`] above [`MAX_CAPACITY`];
    /// [`OffsetError::TooManySlots`] above [`MAX_SLOTS`];
    /// [`OffsetError::OutOfHostMemory`] when the host cannot allocate the
    /// node table.
    ///
    /// # Time complexity
    /// O(`max_allocations`).
    pub fn new(capacity: u64, max_allocations: u32) -> Result<Self, OffsetError> {
        #[allow(clippy::let_unit_value)]
        let () = MantissaBits::<M>::VALID;
        if capacity > MAX_CAPACITY {
            return Err(OffsetError::CapacityTooLarge {
                requested: capacity,
                max: MAX_CAPACITY,
            });
        }
        if max_allocations > MAX_SLOTS {
            return Err(OffsetError::TooManySlots {
                requested: u64::from(max_allocations),
                max: u64::from(MAX_SLOTS),
            });
        }
        let mut nodes = Vec::new();
        nodes
            .try_reserve_exact(max_allocations as usize + 1)
            .map_err(|_| OffsetError::OutOfHostMemory)?;
        let mut sentinel = Node::unused(NIL);
        sentinel.set(0, capacity, 1);
        nodes.push(sentinel);
        let mut this = Self {
            nodes,
            bin_heads: vec![NIL; bin_count(M)].into_boxed_slice(),
            bin_max_hint: vec![0; bin_count(M)].into_boxed_slice(),
            mask: BinMask::new(),
            unused_slot: NIL,
            tail: SENTINEL,
            capacity,
            owner: next_owner_tag(),
            free_bytes: capacity,
            free_ranges: 0,
            counters: Counters::default(),
            search: SearchStats::default(),
        };
        this.push_unused_slots(max_allocations);
        if capacity > 0 {
            this.insert_gap(SENTINEL, capacity);
        }
        Ok(this)
    }

    /// Allocates `size` bytes at an offset that is a multiple of `align`.
    ///
    /// # Errors
    /// [`OffsetError::ZeroSize`], [`OffsetError::AlignmentNotPowerOfTwo`],
    /// [`OffsetError::SizeExceedsCapacity`] for bad requests;
    /// [`OffsetError::OutOfSlots`], and [`OffsetError::OutOfSpace`] (fewer
    /// free bytes than `size`) or [`OffsetError::TooFragmented`] (enough free
    /// bytes, but no free range holds the aligned request) when it cannot be
    /// placed now. A space error is never false: some free range could have
    /// held the request otherwise. On error no allocation or free range
    /// changes; the failure counters count the attempt, unless its size is
    /// zero or its alignment not a power of two, and a space error also
    /// counts one boundary search in [`search_stats`](Self::search_stats)
    /// (a request refused before any search, larger than the capacity or
    /// without a free slot, counts none).
    ///
    /// # Time complexity
    /// O(1) — two bitmask searches and a constant number of list updates —
    /// whenever a bin holds a gap of at least `size + align - 1` bytes rounded
    /// up to the next bin bound (for `align == 1`: of at least `size` bytes
    /// rounded up), which is every request that is not close to failing.
    ///
    /// Otherwise the request's worst case, `size + align - 1` bytes, is close
    /// to the largest free range (the request itself too when `align == 1`),
    /// and the *boundary* bins, whose gaps may or may not hold it, are
    /// searched gap by gap, smallest bin first, until a gap holds it or none
    /// does: the bins from `size` rounded down to below `size + align - 1`
    /// rounded up (one bin when `align == 1`: gaps within `1/2^M` of
    /// `size`), skipping every bin whose largest gap is known to be smaller
    /// than `size`. That costs O(gaps in those bins), no loop over
    /// allocations or other bins. A search that sees a whole bin without
    /// success makes the bin's bound exact, so repeating a failing request
    /// of alignment 1 costs O(1) until a larger gap enters that bin. With a
    /// larger alignment those bins reach far below the largest free range,
    /// and a request that will succeed may look at every gap of `size`
    /// bytes or more first: 4 KiB at 64 KiB alignment, with no free range of
    /// 72 KiB, looks at every free range of 4 KiB or more before the 70 KiB
    /// one that holds it. Those bins keep gaps of `size` bytes or more that
    /// the alignment shifts the request out of, so each repeat walks them
    /// again (still O(gaps in the boundary bins)).
    pub fn allocate(&mut self, size: u64, align: u64) -> Result<OffsetAllocation, OffsetError> {
        self.allocate_body(size, align)
    }

    /// [`allocate`](Self::allocate) with a [`Strategy`]: with
    /// [`Strategy::MinTime`] the same call, with [`Strategy::MinMemory`]
    /// a look at up to 8 free ranges that fit more tightly first, with
    /// [`Strategy::MinOffset`] the lowest offset where the request fits,
    /// with [`Strategy::MaxOffset`] the highest.
    ///
    /// ```
    /// use vk_suballoc::offset::{OffsetAllocator, Strategy};
    ///
    /// let mut heap = OffsetAllocator::<3>::new(4000, 8)?;
    /// let ids: Vec<_> = [1000, 10, 1100, 10].iter().map(|&s| heap.allocate(s, 1).unwrap().id).collect();
    /// heap.free(ids[0])?; // a free range of 1000 bytes at 0
    /// heap.free(ids[2])?; // and one of 1100 bytes at 1010
    /// // 970 bytes: the good fit looks among ranges of 1024 bytes or more,
    /// // the tight one first at those of 960 to 1023.
    /// assert_eq!(heap.clone().allocate_with(970, 1, Strategy::MinTime)?.offset, 1010);
    /// assert_eq!(heap.clone().allocate_with(970, 1, Strategy::MinMemory)?.offset, 0);
    /// // The lowest offset: the first free range in address order holds it.
    /// assert_eq!(heap.clone().allocate_with(970, 1, Strategy::MinOffset)?.offset, 0);
    /// // 1050 bytes: only the range at 1010 holds them.
    /// assert_eq!(heap.clone().allocate_with(1050, 1, Strategy::MinOffset)?.offset, 1010);
    /// // The highest offset: the end of the last free range, [2120, 4000).
    /// assert_eq!(heap.allocate_with(10, 1, Strategy::MaxOffset)?.offset, 3990);
    /// # Ok::<(), vk_suballoc::offset::OffsetError>(())
    /// ```
    ///
    /// # Errors
    /// Those of [`allocate`](Self::allocate), in the same cases: every
    /// strategy fails exactly where no free range holds the request.
    ///
    /// # Time complexity
    /// As [`allocate`](Self::allocate)'s, and for `MinMemory` up to 8 more
    /// free ranges looked at. `MinOffset` walks the allocations in address
    /// order, O(allocations before the range it takes), and `MaxOffset` in
    /// reverse, O(allocations after it): not for hot paths.
    pub fn allocate_with(
        &mut self,
        size: u64,
        align: u64,
        strategy: Strategy,
    ) -> Result<OffsetAllocation, OffsetError> {
        match strategy {
            Strategy::MinTime => {}
            Strategy::MinMemory => {
                if let Some(placed) = self.allocate_tight(size, align) {
                    return Ok(placed);
                }
            }
            Strategy::MinOffset => return self.allocate_lowest(size, align),
            Strategy::MaxOffset => return self.allocate_highest(size, align),
        }
        self.allocate_body(size, align)
    }

    /// The first look of [`Strategy::MinMemory`]: a request that passes
    /// `allocate`'s checks and fits a gap of the bin it rounds down to
    /// ([`find_tight_gap`](Self::find_tight_gap)) is placed there; `None`
    /// for any other, which the caller hands to `allocate`'s body (errors
    /// included).
    ///
    /// Out of line, and not a strategy argument of that body: as one, even
    /// constant in the packed call, it made LLVM compile the common path
    /// worse (callgrind, the pools on the peer traces: 8-10 more
    /// instructions per allocation).
    #[inline(never)]
    pub(super) fn allocate_tight(&mut self, size: u64, align: u64) -> Option<OffsetAllocation> {
        if size == 0 || !align.is_power_of_two() || size > self.capacity || self.unused_slot == NIL
        {
            return None;
        }
        let (gap_owner, offset) = self.find_tight_gap(size, align)?;
        Some(self.place(gap_owner, offset, size))
    }

    /// The body of [`allocate`](Self::allocate), shared with
    /// [`allocate_packed`](Self::allocate_packed).
    #[inline(always)]
    pub(super) fn allocate_body(
        &mut self,
        size: u64,
        align: u64,
    ) -> Result<OffsetAllocation, OffsetError> {
        if size == 0 {
            return Err(OffsetError::ZeroSize);
        }
        if !align.is_power_of_two() {
            return Err(OffsetError::AlignmentNotPowerOfTwo(align));
        }
        if size > self.capacity {
            self.counters.on_failure(size);
            return Err(OffsetError::SizeExceedsCapacity {
                size,
                capacity: self.capacity,
            });
        }
        if self.unused_slot == NIL {
            self.counters.on_failure(size);
            return Err(OffsetError::OutOfSlots(self.slot_count()));
        }
        let Some((gap_owner, offset)) = self.find_fit(size, align) else {
            self.counters.on_failure(size);
            return Err(if self.free_bytes < size {
                OffsetError::OutOfSpace {
                    size,
                    free: self.free_bytes,
                }
            } else {
                OffsetError::TooFragmented {
                    size,
                    align,
                    free: self.free_bytes,
                }
            });
        };
        Ok(self.place(gap_owner, offset, size))
    }

    /// Frees the allocation `id` names, merging it with free neighbours.
    /// Returns the free range its bytes are now part of: its own range and
    /// the free ranges on either side.
    ///
    /// # Errors
    /// [`OffsetError::ForeignId`] when another allocator issued `id`;
    /// [`OffsetError::StaleId`] when it was freed already (or its slot was
    /// reused). Nothing changes on error.
    ///
    /// # Time complexity
    /// O(1): no search, at most two gaps leave their bins and one enters.
    pub fn free(&mut self, id: AllocationId) -> Result<FreeRange, OffsetError> {
        self.free_body(id)
    }

    /// The body of [`free`](Self::free), shared with
    /// [`free_packed`](Self::free_packed).
    #[inline(always)]
    pub(super) fn free_body(&mut self, id: AllocationId) -> Result<FreeRange, OffsetError> {
        let slot = self.live_slot(id)?;
        let node = self.nodes[slot as usize];
        let prev = self.nodes[node.prev as usize];
        let (offset, end) = (prev.gap_end(), node.end());
        if prev.gap() > 0 {
            self.remove_gap(node.prev, prev.gap());
        }
        if node.gap() > 0 {
            self.remove_gap(slot, node.gap());
        }
        // Unlink the node: the previous node's gap now spans all three ranges.
        let merged = &mut self.nodes[node.prev as usize];
        merged.next = node.next;
        merged.set_gap_end(node.gap_end());
        if node.next == NIL {
            self.tail = node.prev;
        } else {
            self.nodes[node.next as usize].prev = node.prev;
        }
        let merged = FreeRange {
            offset: prev.end(),
            size: node.gap_end() - prev.end(),
        };
        self.insert_gap(node.prev, merged.size);
        let freed = &mut self.nodes[slot as usize];
        freed.set_generation(id.generation.wrapping_add(1));
        // The last generation retires its slot rather than come round to
        // ids issued before (`AllocationId`): off the stack, it stays
        // unused with generation 0, which no id carries.
        if id.generation != LAST_GENERATION {
            freed.next = self.unused_slot;
            self.unused_slot = slot;
        }
        self.free_bytes += end - offset;
        self.counters.on_free(end - offset);
        Ok(merged)
    }

    /// Appends `extra_bytes` of free space at the end. No live allocation moves;
    /// the new space merges with a free range that ends at the old capacity.
    ///
    /// # Errors
    /// [`OffsetError::CapacityTooLarge`] when the new capacity would exceed
    /// [`MAX_CAPACITY`]; nothing changes then.
    ///
    /// # Time complexity
    /// O(1).
    pub fn grow(&mut self, extra_bytes: u64) -> Result<(), OffsetError> {
        let new_capacity = self
            .capacity
            .checked_add(extra_bytes)
            .filter(|&c| c <= MAX_CAPACITY)
            .ok_or(OffsetError::CapacityTooLarge {
                requested: self.capacity.saturating_add(extra_bytes),
                max: MAX_CAPACITY,
            })?;
        if extra_bytes == 0 {
            return Ok(());
        }
        let tail = self.tail;
        let old_gap = self.nodes[tail as usize].gap();
        if old_gap > 0 {
            self.remove_gap(tail, old_gap);
        }
        self.capacity = new_capacity;
        self.nodes[tail as usize].set_gap_end(new_capacity);
        self.insert_gap(tail, old_gap + extra_bytes);
        self.free_bytes += extra_bytes;
        Ok(())
    }

    /// Adds `additional` allocation slots. This allocates (the node table may
    /// move in memory; ids and offsets stay valid); call it outside hot paths,
    /// for example after [`OffsetError::OutOfSlots`].
    ///
    /// # Errors
    /// [`OffsetError::TooManySlots`] when the total would exceed [`MAX_SLOTS`];
    /// [`OffsetError::OutOfHostMemory`] when the host cannot grow the node
    /// table. Nothing changes then.
    ///
    /// # Time complexity
    /// O(`additional`), plus a copy of the node table when it must move.
    pub fn reserve_slots(&mut self, additional: u32) -> Result<(), OffsetError> {
        let total = u64::from(self.slot_count()) + u64::from(additional);
        if total > u64::from(MAX_SLOTS) {
            return Err(OffsetError::TooManySlots {
                requested: total,
                max: u64::from(MAX_SLOTS),
            });
        }
        self.nodes
            .try_reserve_exact(additional as usize)
            .map_err(|_| OffsetError::OutOfHostMemory)?;
        self.push_unused_slots(additional);
        Ok(())
    }

    // ----- placement -----

    /// Carves `[offset, offset + size)` out of `gap_owner`'s gap (the caller
    /// checked that it fits) and gives it the top unused slot. Always
    /// inlined: see [`find_fit`](Self::find_fit).
    #[inline(always)]
    pub(super) fn place(&mut self, gap_owner: u32, offset: u64, size: u64) -> OffsetAllocation {
        let owner = self.nodes[gap_owner as usize];
        self.remove_gap(gap_owner, owner.gap());

        let slot = self.unused_slot;
        let end = offset + size;
        let node = &mut self.nodes[slot as usize];
        self.unused_slot = node.next;
        let generation = node.generation().wrapping_add(1);
        node.set(end, owner.gap_end(), generation);
        node.prev = gap_owner;
        node.next = owner.next;
        let owner_node = &mut self.nodes[gap_owner as usize];
        owner_node.next = slot;
        owner_node.set_gap_end(offset);
        if owner.next == NIL {
            self.tail = slot;
        } else {
            self.nodes[owner.next as usize].prev = slot;
        }

        // Head slack of the aligned placement stays free with the owner; the
        // rest of the gap now follows the new node.
        if offset > owner.end() {
            self.insert_gap(gap_owner, offset - owner.end());
        }
        if owner.gap_end() > end {
            self.insert_gap(slot, owner.gap_end() - end);
        }
        self.free_bytes -= size;
        self.counters.on_allocate(size);
        OffsetAllocation {
            id: AllocationId {
                slot,
                generation,
                owner: self.owner,
            },
            offset,
            size,
        }
    }

    // ----- slots -----

    /// Checks that `id` names a live allocation of this allocator.
    #[inline]
    pub(super) fn live_slot(&self, id: AllocationId) -> Result<u32, OffsetError> {
        if id.owner != self.owner {
            return Err(OffsetError::ForeignId);
        }
        match self.nodes.get(id.slot as usize) {
            Some(node)
                if id.slot != SENTINEL
                    && id.generation % 2 == 1
                    && node.generation() == id.generation =>
            {
                Ok(id.slot)
            }
            _ => Err(OffsetError::StaleId),
        }
    }

    /// Appends `count` unused slots, the lowest index on top of the stack.
    fn push_unused_slots(&mut self, count: u32) {
        let first = self.nodes.len() as u32;
        for i in 0..count {
            let next = if i + 1 == count {
                self.unused_slot
            } else {
                first + i + 1
            };
            self.nodes.push(Node::unused(next));
        }
        if count > 0 {
            self.unused_slot = first;
        }
    }
}
