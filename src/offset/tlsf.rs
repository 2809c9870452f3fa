//! [`OffsetAllocator`]: a TLSF-style allocator of ranges of one address space.

use super::allocation::{next_owner_tag, AllocationId, FreeRange, OffsetAllocation};
use super::bin_mask::BinMask;
use super::node::{Node, ADDRESS_BITS, NIL};
use super::report::{Counters, StorageReport};
use super::size_class::{bin_count, bin_down, bin_up, MantissaBits};
use super::OffsetError;

/// The largest capacity an [`OffsetAllocator`] manages: offsets take 48 bits.
pub const MAX_CAPACITY: u64 = (1u64 << ADDRESS_BITS) - 1;

/// The most allocation slots an [`OffsetAllocator`] can have.
pub const MAX_SLOTS: u32 = u32::MAX - 2;

/// Allocates ranges of `[0, capacity)` in O(1), with power-of-two alignment,
/// generational ids and exact reports. It knows nothing about what the range
/// is: a `VkDeviceMemory` block, a buffer, a descriptor heap.
///
/// `M` is the number of mantissa bits of the size classes (2 to 6, checked at
/// compile time). More bits mean finer bins and a better fit for more metadata
/// (`64 << M` bin heads); 3 suits most uses.
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
/// whose lower bound is below the request. Only when it finds nothing does
/// `allocate` look at those bins; each bin keeps an upper bound of its largest
/// gap so that bins that cannot help are skipped without a look. So a failed
/// allocation means no free range could hold the aligned request.
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
    nodes: Vec<Node>,
    bin_heads: Box<[u32]>,
    /// Per bin, an upper bound of its largest gap (0 when empty).
    bin_max_hint: Box<[u64]>,
    mask: BinMask<M>,
    /// Top of the stack of unused slots.
    unused_slot: u32,
    /// Last node in address order.
    tail: u32,
    capacity: u64,
    owner: u32,
    free_bytes: u64,
    free_ranges: u64,
    counters: Counters,
}

const SENTINEL: u32 = 0;

impl<const M: u32> OffsetAllocator<M> {
    /// Creates an allocator of `capacity` bytes with room for `max_allocations`
    /// live allocations. All metadata is allocated here; `allocate` and `free`
    /// never touch the heap.
    ///
    /// # Errors
    /// [`OffsetError::CapacityTooLarge`] above [`MAX_CAPACITY`];
    /// [`OffsetError::TooManySlots`] above [`MAX_SLOTS`].
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
        let mut nodes = Vec::with_capacity(max_allocations as usize + 1);
        let mut sentinel = Node::unused(NIL);
        sentinel.set(0, 0, 1);
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
    /// [`OffsetError::OutOfSlots`], [`OffsetError::OutOfSpace`] and
    /// [`OffsetError::TooFragmented`] when it cannot be placed now. On error
    /// nothing changes but the failure counters.
    ///
    /// # Time complexity
    /// O(1) whenever a bin that guarantees a fit is non-empty: two bitmask
    /// searches and a constant number of list updates. When none is, the
    /// allocator is out of space for this size; the bins below are then
    /// searched exactly (skipping bins whose largest gap is known to be too
    /// small) so the failure is never false.
    pub fn allocate(&mut self, size: u64, align: u64) -> Result<OffsetAllocation, OffsetError> {
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
    /// Returns the range it occupied.
    ///
    /// # Errors
    /// [`OffsetError::StaleId`] when `id` was freed already (or its slot
    /// reused); [`OffsetError::ForeignId`] when another allocator issued it.
    /// Nothing changes on error.
    ///
    /// # Time complexity
    /// O(1).
    pub fn free(&mut self, id: AllocationId) -> Result<FreeRange, OffsetError> {
        let slot = self.live_slot(id)?;
        let node = self.nodes[slot as usize];
        let (offset, end) = (node.offset(), node.end());
        let prev = node.prev;
        let gap_before = offset - self.nodes[prev as usize].end();
        let gap_after = self.gap_end(slot) - end;
        if gap_before > 0 {
            self.remove_gap(prev, gap_before);
        }
        if gap_after > 0 {
            self.remove_gap(slot, gap_after);
        }
        // Unlink the node; the previous node's gap now spans all three ranges.
        self.nodes[prev as usize].next = node.next;
        if node.next == NIL {
            self.tail = prev;
        } else {
            self.nodes[node.next as usize].prev = prev;
        }
        self.insert_gap(prev, gap_before + (end - offset) + gap_after);
        let freed = &mut self.nodes[slot as usize];
        freed.set_generation(id.generation.wrapping_add(1));
        freed.next = self.unused_slot;
        self.unused_slot = slot;
        self.free_bytes += end - offset;
        self.counters.on_free(end - offset);
        Ok(FreeRange {
            offset,
            size: end - offset,
        })
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
        let old_gap = self.capacity - self.nodes[tail as usize].end();
        if old_gap > 0 {
            self.remove_gap(tail, old_gap);
        }
        self.capacity = new_capacity;
        self.insert_gap(tail, old_gap + extra_bytes);
        self.free_bytes += extra_bytes;
        Ok(())
    }

    /// Adds `additional` allocation slots. This allocates (the node table may
    /// move in memory; ids and offsets stay valid); call it outside hot paths,
    /// for example after [`OffsetError::OutOfSlots`].
    ///
    /// # Errors
    /// [`OffsetError::TooManySlots`] when the total would exceed [`MAX_SLOTS`].
    ///
    /// # Time complexity
    /// O(`additional`).
    pub fn reserve_slots(&mut self, additional: u32) -> Result<(), OffsetError> {
        let total = u64::from(self.slot_count()) + u64::from(additional);
        if total > u64::from(MAX_SLOTS) {
            return Err(OffsetError::TooManySlots {
                requested: total,
                max: u64::from(MAX_SLOTS),
            });
        }
        self.nodes.reserve_exact(additional as usize);
        self.push_unused_slots(additional);
        Ok(())
    }

    /// The live allocation `id` names, if it is live.
    ///
    /// # Time complexity
    /// O(1).
    pub fn get(&self, id: AllocationId) -> Option<OffsetAllocation> {
        let slot = self.live_slot(id).ok()?;
        Some(self.allocation_in(slot))
    }

    /// The live allocation whose range contains `offset`, if any: the reverse
    /// lookup a GPU fault address or a memory-map picture needs.
    ///
    /// # Time complexity
    /// O(live allocations): a walk in address order. Not for hot paths.
    pub fn allocation_at(&self, offset: u64) -> Option<OffsetAllocation> {
        self.allocations()
            .take_while(|a| a.offset <= offset)
            .find(|a| offset < a.end())
    }

    /// Live allocations in address order.
    pub fn allocations(&self) -> impl Iterator<Item = OffsetAllocation> + '_ {
        let mut slot = self.nodes[SENTINEL as usize].next;
        std::iter::from_fn(move || {
            if slot == NIL {
                return None;
            }
            let allocation = self.allocation_in(slot);
            slot = self.nodes[slot as usize].next;
            Some(allocation)
        })
    }

    /// Free ranges in address order; neighbours are always merged, so no two
    /// returned ranges touch.
    pub fn free_ranges(&self) -> impl Iterator<Item = FreeRange> + '_ {
        let mut slot = SENTINEL;
        std::iter::from_fn(move || {
            while slot != NIL {
                let here = slot;
                slot = self.nodes[here as usize].next;
                let offset = self.nodes[here as usize].end();
                let size = self.gap_end(here) - offset;
                if size > 0 {
                    return Some(FreeRange { offset, size });
                }
            }
            None
        })
    }

    /// Exact free-space figures.
    ///
    /// # Time complexity
    /// O(free ranges in the highest non-empty bin): the largest free range is
    /// found exactly, not estimated from its bin.
    pub fn storage_report(&self) -> StorageReport {
        let largest_free_range = self.mask.highest().map_or(0, |bin| {
            self.bin_gaps(bin)
                .map(|(_, gap)| gap)
                .max()
                .unwrap_or_default()
        });
        StorageReport {
            capacity: self.capacity,
            free_bytes: self.free_bytes,
            largest_free_range,
            free_ranges: self.free_ranges,
        }
    }

    /// Running counters (live and peak bytes, successes, failures).
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Free bytes, in O(1).
    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// Whether no allocation is live.
    pub fn is_empty(&self) -> bool {
        self.counters.live_allocations == 0
    }

    /// Number of allocation slots (live allocations possible without
    /// [`reserve_slots`](Self::reserve_slots)).
    pub fn slot_count(&self) -> u32 {
        (self.nodes.len() - 1) as u32
    }

    /// Bytes of metadata this allocator holds: node table and bin tables.
    pub fn metadata_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node>()
            + self.bin_heads.len() * std::mem::size_of::<u32>()
            + self.bin_max_hint.len() * std::mem::size_of::<u64>()
            + std::mem::size_of::<Self>()
    }

    // ----- search -----

    /// Finds a gap that holds `size` bytes at alignment `align`: returns the
    /// gap's owner node and the aligned offset.
    #[inline]
    fn find_fit(&mut self, size: u64, align: u64) -> Option<(u32, u64)> {
        // 1. Good fit: the first non-empty bin whose every gap holds `size`.
        let Some(bin) = self.mask.first_at_or_above(bin_up::<M>(size)) else {
            return self.find_fit_exhaustive(size, align);
        };
        let head = self.bin_heads[bin as usize];
        if let Some(offset) = self.fit_in_gap(head, size, align) {
            return Some((head, offset));
        }
        // 2. With alignment: gaps of at least `size + align - 1` hold the
        //    request wherever they start.
        if let Some(worst_case) = size.checked_add(align - 1).filter(|&s| s <= MAX_CAPACITY) {
            if let Some(bin) = self.mask.first_at_or_above(bin_up::<M>(worst_case)) {
                let head = self.bin_heads[bin as usize];
                let offset = self.fit_in_gap(head, size, align)?;
                return Some((head, offset));
            }
        }
        self.find_fit_exhaustive(size, align)
    }

    /// The cold path of [`find_fit`]: every gap of at least `size` bytes is
    /// tried, in bins from small to large, skipping bins whose upper bound
    /// shows they cannot help.
    #[cold]
    fn find_fit_exhaustive(&mut self, size: u64, align: u64) -> Option<(u32, u64)> {
        let mut next_bin = Some(bin_down::<M>(size));
        while let Some(bin) = next_bin.and_then(|b| self.mask.first_at_or_above(b)) {
            next_bin = bin.checked_add(1);
            if self.bin_max_hint[bin as usize] < size {
                continue;
            }
            let mut largest = 0;
            let mut node = self.bin_heads[bin as usize];
            while node != NIL {
                if let Some(offset) = self.fit_in_gap(node, size, align) {
                    return Some((node, offset));
                }
                largest = largest.max(self.gap_end(node) - self.nodes[node as usize].end());
                node = self.nodes[node as usize].bin_next;
            }
            // The whole bin was seen: its bound is now exact.
            self.bin_max_hint[bin as usize] = largest;
        }
        None
    }

    /// The aligned offset at which `size` bytes fit in `node`'s gap, if they do.
    #[inline]
    fn fit_in_gap(&self, node: u32, size: u64, align: u64) -> Option<u64> {
        let start = self.nodes[node as usize].end();
        let aligned = (start + (align - 1)) & !(align - 1);
        (aligned + size <= self.gap_end(node)).then_some(aligned)
    }

    // ----- placement -----

    #[inline]
    fn place(&mut self, gap_owner: u32, offset: u64, size: u64) -> OffsetAllocation {
        let owner_end = self.nodes[gap_owner as usize].end();
        let gap_end = self.gap_end(gap_owner);
        self.remove_gap(gap_owner, gap_end - owner_end);

        let slot = self.unused_slot;
        let next = self.nodes[gap_owner as usize].next;
        let node = &mut self.nodes[slot as usize];
        self.unused_slot = node.next;
        let generation = node.generation().wrapping_add(1);
        node.set(offset, offset + size, generation);
        node.prev = gap_owner;
        node.next = next;
        self.nodes[gap_owner as usize].next = slot;
        if next == NIL {
            self.tail = slot;
        } else {
            self.nodes[next as usize].prev = slot;
        }

        // Head slack of the aligned placement stays free with the owner; the
        // rest of the gap now follows the new node.
        if offset > owner_end {
            self.insert_gap(gap_owner, offset - owner_end);
        }
        if gap_end > offset + size {
            self.insert_gap(slot, gap_end - (offset + size));
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

    // ----- bins -----

    #[inline]
    fn insert_gap(&mut self, node: u32, gap: u64) {
        let bin = bin_down::<M>(gap) as usize;
        let head = self.bin_heads[bin];
        let entry = &mut self.nodes[node as usize];
        entry.bin_prev = NIL;
        entry.bin_next = head;
        if head == NIL {
            self.mask.set(bin as u32);
        } else {
            self.nodes[head as usize].bin_prev = node;
        }
        self.bin_heads[bin] = node;
        let hint = &mut self.bin_max_hint[bin];
        *hint = (*hint).max(gap);
        self.free_ranges += 1;
    }

    #[inline]
    fn remove_gap(&mut self, node: u32, gap: u64) {
        let bin = bin_down::<M>(gap) as usize;
        let Node {
            bin_prev, bin_next, ..
        } = self.nodes[node as usize];
        if bin_prev == NIL {
            self.bin_heads[bin] = bin_next;
            if bin_next == NIL {
                self.mask.clear(bin as u32);
                self.bin_max_hint[bin] = 0;
            }
        } else {
            self.nodes[bin_prev as usize].bin_next = bin_next;
        }
        if bin_next != NIL {
            self.nodes[bin_next as usize].bin_prev = bin_prev;
        }
        self.free_ranges -= 1;
    }

    /// `(node, gap size)` of every gap in `bin`.
    fn bin_gaps(&self, bin: u32) -> impl Iterator<Item = (u32, u64)> + '_ {
        let mut node = self.bin_heads[bin as usize];
        std::iter::from_fn(move || {
            if node == NIL {
                return None;
            }
            let here = node;
            node = self.nodes[here as usize].bin_next;
            Some((here, self.gap_end(here) - self.nodes[here as usize].end()))
        })
    }

    // ----- nodes -----

    /// Where `node`'s gap ends: the next node's offset, or the capacity.
    #[inline]
    fn gap_end(&self, node: u32) -> u64 {
        match self.nodes[node as usize].next {
            NIL => self.capacity,
            next => self.nodes[next as usize].offset(),
        }
    }

    /// Checks that `id` names a live allocation of this allocator.
    #[inline]
    fn live_slot(&self, id: AllocationId) -> Result<u32, OffsetError> {
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

    fn allocation_in(&self, slot: u32) -> OffsetAllocation {
        let node = &self.nodes[slot as usize];
        OffsetAllocation {
            id: AllocationId {
                slot,
                generation: node.generation(),
                owner: self.owner,
            },
            offset: node.offset(),
            size: node.end() - node.offset(),
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
