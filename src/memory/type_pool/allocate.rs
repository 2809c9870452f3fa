//! The allocation path of a [`TypePool`]: a request takes a run slot
//! (`run_slots`), else the first block of its granularity class whose
//! offset allocator places it, else, out of line, the pool's reserve (an
//! empty block of the other class, adopted, then the blocks a
//! defragmentation plan is emptying), dedicated memory or a new block, in
//! the order its [`DedicatedChoice`] and the device's state (budget,
//! `maxMemoryAllocationCount`) say; and the first fit in one block, with
//! the counting of what is handed out. It is apart as the crate's
//! hottest path, tuned with callgrind and perf: its `#[inline(always)]` and
//! `#[cold]` attributes, and the comments that give their measurements, stay
//! with it.

use super::{
    is_no_room, too_large_for_any_block, too_large_for_block_size, DedicatedChoice, Location,
    Placement, PoolCounters, PoolRequest, TypePool,
};
use crate::device::MemoryDeviceExt;
use crate::memory::block::Block;
use crate::memory::context::MemoryContext;
use crate::memory::slab::{Slab, SlabKey};
use crate::offset::{AllocationId, OffsetAllocator, PackedAllocation, Strategy};
use crate::Error;

impl<M> TypePool<M> {
    /// Places `request` in this memory type.
    ///
    /// # Errors
    /// [`Error::OutOfDeviceMemory`] when neither blocks nor dedicated memory
    /// could hold it; the budget, object-count and device errors of
    /// [`MemoryContext::allocate_memory`]; [`Error::OutOfHostMemory`] for a
    /// new block's slot table; in a custom pool [`Error::TooLargeForPool`]
    /// past its fixed block size and [`Error::PoolFull`] at its
    /// `max_blocks`; [`Error::SizeExceedsHeaps`] or
    /// [`Error::SizeExceedsMaxAllocation`] when, rounded as a block places
    /// it, it passes the largest block the type can have and may not take
    /// dedicated memory ([`too_large_for_any_block`]);
    /// [`Error::NoRoomInExistingMemory`] for a request for existing memory
    /// only that none holds.
    ///
    /// Inlined into the allocation path, like `Placer::allocate_in_type`: as
    /// a call, its `Result<Placement, Error>` went through the stack and
    /// the caller's 16-byte copy of it waited for the callee's narrower
    /// stores (perf: a quarter of the caller's samples on that copy).
    /// Inlined, every trace allocates 3–6 ns faster on lavapipe's machine.
    #[inline(always)]
    pub(crate) fn allocate<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        request: &PoolRequest<'_>,
    ) -> Result<Placement, Error> {
        // Small buffers: a slot of a run, carving a new run when none of
        // the class has room; but not those placed by address (the lowest
        // or highest offset), which a slot of a run carved anywhere would
        // not be. (Tested here, for small buffers only: in the request's
        // making, for every request, it cost 2 instructions per allocation
        // on the `mixed` peer trace.)
        if let (Some(class), false) = (request.run_class, request.strategy.places_by_address()) {
            let class = usize::from(class);
            if let Some(taken) = self.runs.take(class) {
                return Ok(self.hand_out_slot(taken, request));
            }
            if let Some(taken) = self.take_from_new_run(*request, class) {
                return Ok(self.hand_out_slot(taken, request));
            }
            // No room for a run: the request alone may still fit.
        }
        // Past 3/4 of maxMemoryAllocationCount only a requirement makes
        // dedicated memory first (MemoryContext::objects_mostly_used).
        let dedicated_first = match request.dedicated {
            DedicatedChoice::Require => true,
            DedicatedChoice::Prefer => !context.objects_mostly_used(),
            DedicatedChoice::Never => false,
            // Only default pools' requests are `Auto` (a custom pool's are
            // `Never` or `Require`), so the type's preferred size is the
            // pool's, without a look at its policy.
            // An alignment past half a block (`AllocationDesc::min_alignment`)
            // leaves room for one such allocation per block: dedicated
            // memory, of its exact size, starts at 0 too.
            DedicatedChoice::Auto => {
                request.size.max(request.align) > self.dedicated_above
                    && !context.objects_mostly_used()
            }
        };
        // The common case, an existing block, stays inline; dedicated memory
        // and new blocks are out of line.
        if !dedicated_first {
            if let Some(placement) = self.allocate_in_blocks(request) {
                return Ok(self.count(placement, request));
            }
        }
        // Taken apart and put together again: returned as it came, the
        // slow path's result, which comes back through memory, was where
        // the fast paths' placements met it too (stored there field by
        // field, then copied out again into the allocation): 7-10
        // instructions per allocation (callgrind, the peer traces).
        let Placement {
            location,
            memory,
            offset,
            mapped,
        } = self.allocate_slow(context, *request, dedicated_first)?;
        Ok(Placement {
            location,
            memory,
            offset,
            mapped,
        })
    }

    /// [`allocate`](Self::allocate) past the first-fit walk: dedicated memory
    /// first when `dedicated_first` (then the existing blocks), else the
    /// reserve ([`allocate_in_reserve`](Self::allocate_in_reserve)), then a
    /// new block, then dedicated memory when the device has no room for one;
    /// past the budget, dedicated memory and no new block (but past 3/4 of
    /// `maxMemoryAllocationCount`). Existing blocks, the reserve's included,
    /// always come before a new block. A
    /// request for existing memory only goes to
    /// [`allocate_in_existing`](Self::allocate_in_existing) instead.
    ///
    /// The request comes by value, as to
    /// [`take_from_new_run`](Self::take_from_new_run): only these cold calls
    /// then put it in memory, and the inlined path keeps its fields in
    /// registers. By reference, every allocation stored the whole request
    /// (callgrind, 1e5 operations: 0.5-0.6 % more instructions on every
    /// peer trace).
    #[cold]
    #[inline(never)]
    fn allocate_slow<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        request: PoolRequest<'_>,
        dedicated_first: bool,
    ) -> Result<Placement, Error> {
        let request = &request;
        // A small buffer placed by address passed the runs by in
        // `allocate`; no block's free range holds it, so a free slot of an
        // existing run (none retiring) comes before the reserve or new
        // memory, as it does for the other strategies: else it failed as
        // existing memory only, or made a new block, beside free slots.
        if let (Some(class), true) = (request.run_class, request.strategy.places_by_address()) {
            if let Some(taken) = self.runs.take(usize::from(class)) {
                return Ok(self.hand_out_slot(taken, request));
            }
        }
        if request.existing_memory_only {
            return self.allocate_in_existing(context, request, dedicated_first);
        }
        // (`allocate` walked the blocks unless dedicated memory came first.)
        if !dedicated_first {
            if let Some(placement) = self.allocate_in_reserve(request) {
                return Ok(self.count(placement, request));
            }
        }
        if request.within_budget {
            context.begin_budget_checks();
        }
        let preferred = self.preferred_block_size(context);
        // Past the heap's budget, memory of the request's own size, not a
        // new block, which would pass the budget by a whole block (up to
        // 256 MiB): VMA, too, turns to dedicated memory there. But not past
        // 3/4 of maxMemoryAllocationCount, where the last objects go to
        // blocks: a memory object per small buffer reached the limit
        // (TooManyObjects) where one block held them all.
        let past_budget = request.past_budget
            && request.dedicated != DedicatedChoice::Never
            && !context.objects_mostly_used();
        // Why dedicated memory, tried first, could not be made.
        let mut dedicated_refusal = None;
        if dedicated_first || past_budget {
            match self.allocate_dedicated(context, request) {
                // Unless the driver requires dedicated memory, an existing
                // block may still take the request when the device has no
                // room for another object, is at maxMemoryAllocationCount,
                // cannot map a new one, or is out of host memory (as VMA,
                // which turns to its blocks on any failure of dedicated
                // memory tried first).
                Err(error)
                    if request.dedicated != DedicatedChoice::Require
                        && (is_no_room(error)
                            || matches!(
                                error,
                                Error::TooManyObjects(_)
                                    | Error::MapFailed
                                    | Error::OutOfHostMemory
                            )) =>
                {
                    // (`allocate` and the reserve above tried them unless
                    // dedicated memory came first.)
                    if dedicated_first {
                        if let Some(placement) = self.allocate_in_existing_blocks(request) {
                            return Ok(self.count(placement, request));
                        }
                    }
                    // A new block would be another vkAllocateMemory, which
                    // the host's want of memory would fail again.
                    if past_budget || error == Error::OutOfHostMemory {
                        return Err(error);
                    }
                    dedicated_refusal = Some(error);
                }
                result => return result,
            }
        }
        // Dedicated memory after the blocks, should the device have no
        // room for one (the arm below).
        let dedicated_after = !dedicated_first && request.dedicated != DedicatedChoice::Never;
        match self.allocate_in_new_block(context, request, preferred, dedicated_after) {
            Ok(placement) => Ok(self.count(placement, request)),
            // No block of this type could ever hold the request: that is
            // its answer only when dedicated memory may not take it. Else
            // dedicated memory's refusal is, tried first or now: a want of
            // memory there may yet be met (kept empty blocks give way).
            Err(error)
                if error.is_past_every_block() && request.dedicated != DedicatedChoice::Never =>
            {
                match dedicated_refusal {
                    Some(refusal) => Err(refusal),
                    None => self.allocate_dedicated(context, request),
                }
            }
            Err(error) if is_no_room(error) && dedicated_after => {
                self.allocate_dedicated(context, request)
            }
            result => result,
        }
    }

    /// [`allocate_slow`](Self::allocate_slow) for a request for existing
    /// memory only: the blocks, which `allocate` did not try when dedicated
    /// memory came first (a requirement for it cannot be met without new
    /// memory); then, as [`allocate_in_new_block`](Self::allocate_in_new_block)
    /// would, a fixed block size the request exceeds is said
    /// ([`Error::TooLargeForPool`]: no block of the pool could ever hold
    /// it), as is, for a request that may not take dedicated memory, a
    /// heap or `maxMemoryAllocationSize` it exceeds as a block places it
    /// ([`too_large_for_any_block`]); then
    /// the reserve ([`allocate_in_reserve`](Self::allocate_in_reserve)).
    /// Never a new memory object.
    #[cold]
    #[inline(never)]
    fn allocate_in_existing<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        request: &PoolRequest<'_>,
        dedicated_first: bool,
    ) -> Result<Placement, Error> {
        if request.dedicated == DedicatedChoice::Require {
            return Err(Error::NoRoomInExistingMemory);
        }
        if dedicated_first {
            if let Some(placement) = self.allocate_in_blocks(request) {
                return Ok(self.count(placement, request));
            }
        }
        if let Some(error) = self.too_large_for_blocks(request) {
            return Err(error);
        }
        if request.dedicated == DedicatedChoice::Never {
            if let Some(error) = too_large_for_any_block(context, self.memory_type, request) {
                return Err(error);
            }
        }
        if let Some(placement) = self.allocate_in_reserve(request) {
            return Ok(self.count(placement, request));
        }
        Err(Error::NoRoomInExistingMemory)
    }

    /// The first-fit walk ([`allocate_in_blocks`](Self::allocate_in_blocks)),
    /// then the reserve ([`allocate_in_reserve`](Self::allocate_in_reserve)):
    /// every existing block, for a request that tried dedicated memory
    /// first.
    #[cold]
    fn allocate_in_existing_blocks(&mut self, request: &PoolRequest<'_>) -> Option<Placement> {
        self.allocate_in_blocks(request)
            .or_else(|| self.allocate_in_reserve(request))
    }

    /// The pool's reserve, for a request the first-fit walk
    /// ([`allocate_in_blocks`](Self::allocate_in_blocks)) could not place,
    /// before any new memory is made: first an empty block of the other
    /// granularity class, adopted
    /// ([`adopt_empty_block`](Self::adopt_empty_block): it serves either
    /// kind), then the blocks of the request's class a defragmentation
    /// plan is emptying, in the order they retired. A kept empty block is
    /// idle memory, while a request a retiring block takes keeps that block
    /// until it is freed and undoes part of the plan's work; so retiring
    /// blocks come last of all (`Allocator::plan_defragmentation`). An
    /// engine that never carries its moves out leaves the block retiring,
    /// and requests that fit nowhere else still use it rather than new
    /// memory.
    ///
    /// Kept out of the walk, so that a request that fits in a block of the
    /// walk never looks at a retiring one; out of line, as the walk is
    /// inlined.
    ///
    /// # Time complexity
    /// When the pool keeps an empty block, O(blocks of the other class) to
    /// find it; then O(1) per retiring block of the request's class (a
    /// block's miss cache, then its offset allocator).
    #[cold]
    #[inline(never)]
    fn allocate_in_reserve(&mut self, request: &PoolRequest<'_>) -> Option<Placement> {
        if let Some(key) = self.adopt_empty_block(request) {
            let adopted = self.allocate_in_block(key, request);
            if adopted.is_some() {
                return adopted;
            }
        }
        let Self {
            retiring,
            blocks,
            counters,
            ..
        } = self;
        retiring[request.class]
            .iter()
            .find_map(|&key| place_in_block(blocks, counters, key, request))
    }

    /// [`Error::TooLargeForPool`] when the pool fixes its blocks' size and
    /// `request` takes more.
    pub(super) fn too_large_for_blocks(&self, request: &PoolRequest<'_>) -> Option<Error> {
        too_large_for_block_size(request, self.policy.block_size?)
    }

    /// Counts a placement of `request` as a live allocation in a block, where
    /// one is handed out (a run's own range is not one: its slots are).
    #[inline(always)]
    pub(super) fn count(&mut self, placement: Placement, request: &PoolRequest<'_>) -> Placement {
        self.counters.block_allocations += 1;
        self.counters.block_allocated_bytes += request.size;
        placement
    }

    /// First fit over the blocks of the request's class (not those
    /// retiring: [`allocate_in_reserve`](Self::allocate_in_reserve)). Inlined
    /// (with `allocate_in_block`) into the allocation path: measured 5 ns
    /// (about 9 %) less per operation on `small-churn`, `mixed` and
    /// `frame-loop` than as calls. The blocks are borrowed apart from their
    /// order, which no placement changes: the loop walks a slice, not an
    /// index whose bounds and length it checked again for every block
    /// (callgrind, 1e5 operations: 0.3-0.9 % fewer instructions on the peer
    /// traces). A plain loop: `find_map` over the slice cost 4-5 % more.
    #[inline(always)]
    fn allocate_in_blocks(&mut self, request: &PoolRequest<'_>) -> Option<Placement> {
        let Self {
            order,
            blocks,
            counters,
            ..
        } = self;
        for &key in &order[request.class] {
            if let Some(placement) = place_in_block(blocks, counters, key, request) {
                return Some(placement);
            }
        }
        None
    }

    /// Places `request` in block `key` ([`place_in_block`]).
    #[inline(always)]
    pub(super) fn allocate_in_block(
        &mut self,
        key: SlabKey,
        request: &PoolRequest<'_>,
    ) -> Option<Placement> {
        place_in_block(&mut self.blocks, &mut self.counters, key, request)
    }
}

/// Places `request` in block `key` of `blocks` when it has room there; a
/// block that was empty leaves the pool's count of empty blocks
/// (`counters`).
#[inline(always)]
fn place_in_block<M>(
    blocks: &mut Slab<Block<M>>,
    counters: &mut PoolCounters,
    key: SlabKey,
    request: &PoolRequest<'_>,
) -> Option<Placement> {
    let block = blocks.get_mut(key)?;
    let placed = request.placed_size;
    if block.miss.rules_out(placed, request.align) {
        return None;
    }
    // No free range is large enough: a miss, known without the offset
    // allocator's call, whose failures cost about 110 instructions each
    // (callgrind: a fifth of `streaming`'s calls failed, and the bound
    // foresaw 99.8 % of those failures). It replaces a test of the free
    // bytes, which it never exceeds.
    if block.ranges.largest_free_bound() < placed {
        block.miss.record(placed, request.align);
        return None;
    }
    let was_empty = block.ranges.is_empty();
    // The packed call: its result comes back in registers (offset/packed.rs).
    let mut result = allocate_range(&mut block.ranges, request);
    if result.is_none() && !block.ranges.has_unused_slot() {
        grow_slot_table(&mut block.ranges)?;
        result = allocate_range(&mut block.ranges, request);
    }
    let Some(packed) = result else {
        // The request was checked: only space failed it.
        block.miss.record(placed, request.align);
        return None;
    };
    let range = block.ranges.id_of(packed);
    let placement = record_range(block, key, range, packed.offset, request);
    if was_empty {
        counters.empty_blocks -= 1;
    }
    Some(placement)
}

/// The offset allocator's packed call for `request`'s placed size,
/// alignment and strategy: `None` when it does not fit (or no slot is
/// left).
#[inline(always)]
fn allocate_range(
    ranges: &mut OffsetAllocator,
    request: &PoolRequest<'_>,
) -> Option<PackedAllocation> {
    let (size, align) = (request.placed_size, request.align);
    match request.strategy {
        Strategy::MinTime => ranges.allocate_packed(size, align),
        strategy => ranges.allocate_packed_with(size, align, strategy),
    }
}

/// Grows a block's node table when every slot is taken (amortised:
/// doubling, 64 slots at least); `None` when the host cannot. Out of
/// line: the allocation path only calls it when a block runs out of slots.
#[cold]
#[inline(never)]
pub(super) fn grow_slot_table(ranges: &mut OffsetAllocator) -> Option<()> {
    let slots = ranges.slot_count();
    ranges.reserve_slots(slots.max(64)).ok()
}

/// Records the new range `range` of `block` (slab key `key`) at `offset`
/// for `request`, its resource kind and its name, and returns its
/// placement.
#[inline(always)]
pub(super) fn record_range<M>(
    block: &mut Block<M>,
    key: SlabKey,
    range: AllocationId,
    offset: u64,
    request: &PoolRequest<'_>,
) -> Placement {
    block.kinds.record(range.slot(), request.kind);
    if let Some(name) = request.name {
        block.names.insert(range.slot(), name.into());
    }
    Placement {
        location: Location::Block { block: key, range },
        memory: block.raw,
        offset,
        mapped: block.mapped.map(|base| base.add(offset)),
    }
}
