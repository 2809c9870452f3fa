//! [`TypePool`]: the blocks and dedicated allocations of one memory type.
//!
//! Requests go to the first block (in creation order, so old blocks fill up
//! and new ones can empty out) whose offset allocator can place them; when
//! none can, a new block is created ([`block_size`](super::block_size)). Large
//! requests and those the driver asks for get dedicated memory (in a custom
//! pool, with a [`PoolPolicy`], only those that require it). When the
//! driver is out of memory, or the heap over budget, the pool retries
//! smaller blocks, then dedicated memory, before it reports failure (and the
//! allocator moves on to the next memory type).
//!
//! Small buffers take slots of runs ([`runs`](super::runs)): ranges of a
//! block cut into equal slots, one offset-allocator range for up to 64
//! buffers.
//!
//! Past 3/4 of `maxMemoryAllocationCount`, requests the driver merely
//! prefers in dedicated memory, and large ones, go to blocks first, as in
//! VMA: the last objects are kept for blocks, which hold many allocations.
//!
//! Empty blocks are expensive to recreate, so each pool keeps its largest
//! (a custom pool also its `min_blocks`), and a default pool more while
//! they are within `Config::empty_block_reserve` times the bytes allocated
//! in its blocks; when a block empties, the empty blocks past that are
//! released, smallest first ([`TypePool::release_surplus_empty_blocks`],
//! which a request short of memory also calls to release all but the
//! largest, then [`TypePool::trim`] when that was not enough). A block a defragmentation plan empties is released
//! at once (`defragment`), unless a custom pool would fall below
//! `min_blocks`: it then stops retiring and stays. When
//! optimal images have blocks of their own, a kept block serves whichever
//! kind needs a block next.
//! [`TypePool::trim`] releases the kept ones as well.
//!
//! This file holds placement in blocks and runs and freeing; `new_block`
//! makes blocks, `empty_blocks` keeps and releases them, `dedicated`
//! holds dedicated memory, `inspect` the read-only views for reports,
//! `placement` the request, location and counter types, `corruption`
//! the pattern in debug margins (`Config::detect_corruption`), and
//! `debug_fill` the fills of new and freed memory (`Config::debug_fill`).

use std::panic::{self, AssertUnwindSafe};

use ash::vk;

use super::block::{Block, DedicatedMemory};
use super::context::{MemoryContext, MemoryRequest, NewMemory};
use super::deferred_log;
use super::runs::{class_size, run_fits_block, slots_per_run, Runs, TakenSlot};
use super::slab::{Slab, SlabKey};
use crate::device::{DedicatedTarget, MemoryDeviceExt};
use crate::offset::{AllocationId, OffsetAllocator};
use crate::Error;

mod corruption;
pub(crate) mod debug_fill;
mod dedicated;
mod defragment;
mod empty_blocks;
mod inspect;
mod new_block;
mod placement;
#[cfg(all(test, feature = "fake-device"))]
mod tests;

pub(crate) use corruption::Guarded;
pub(crate) use debug_fill::WrittenFree;
pub(crate) use defragment::{MoveBudget, PoolMovable};
pub(crate) use placement::{DedicatedChoice, Location, Placement, PoolCounters, PoolRequest};

/// What a custom pool fixes about its blocks (VMA's `VmaPoolCreateInfo`);
/// the default pool of each memory type fixes none of it
/// ([`PoolPolicy::DEFAULT`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PoolPolicy {
    /// The size of every block; `None`: VMA's growing sizes (block_size.rs).
    pub(crate) block_size: Option<u64>,
    /// Blocks made with the pool and kept through emptying and `trim`.
    pub(crate) min_blocks: u64,
    /// No block is made past this many.
    pub(crate) max_blocks: u64,
    /// Handle types every memory object of the pool, blocks and dedicated
    /// memory alike, can be exported as (`VkExportMemoryAllocateInfo`);
    /// empty: none.
    pub(crate) export_handle_types: vk::ExternalMemoryHandleTypeFlags,
}

impl PoolPolicy {
    /// The default pools': growing blocks, none kept, no limit.
    pub(crate) const DEFAULT: Self = Self {
        block_size: None,
        min_blocks: 0,
        max_blocks: u64::MAX,
        export_handle_types: vk::ExternalMemoryHandleTypeFlags::empty(),
    };
}

/// Whether a failure to create memory means "not this large": the heap is
/// full or the request would exceed its budget. Smaller blocks, or dedicated
/// memory of the exact size, may still succeed.
fn is_no_room(error: Error) -> bool {
    matches!(error, Error::OutOfDeviceMemory | Error::OverBudget { .. })
}

/// Blocks and dedicated allocations of one memory type.
#[derive(Debug)]
pub(crate) struct TypePool<M> {
    memory_type: u32,
    blocks: Slab<Block<M>>,
    /// Blocks of each granularity class, oldest first, but for those a
    /// defragmentation plan is emptying: they come last (`defragment`).
    order: [Vec<SlabKey>; 2],
    dedicated: Slab<DedicatedMemory<M>>,
    runs: Runs,
    next_serial: u32,
    policy: PoolPolicy,
    /// Half the memory type's preferred block size: a default pool's
    /// `Auto` request larger than this (or aligned to more) takes dedicated
    /// memory first. Kept here, not looked up in the context's table per
    /// request (an index and its bounds check on every allocation).
    dedicated_above: u64,
    /// Whether it is a custom pool: its blocks' debug names say so.
    custom: bool,
    /// A custom pool's `VK_EXT_memory_priority` priority for its blocks.
    priority: Option<f32>,
    /// A custom pool destroyed (`Allocator::destroy_pool`) while another
    /// thread still held a reference to it: calls that find it so refuse
    /// it as stale.
    destroyed: bool,
    /// A custom pool's name, in its blocks' debug names and leak reports.
    name: Option<Box<str>>,
    /// Allocations whose margins hold the corruption pattern; empty but in
    /// memory types with detection (`corruption.rs`).
    guarded: corruption::GuardTable,
    pub(crate) counters: PoolCounters,
}

impl<M> TypePool<M> {
    /// The default pool of `memory_type`, whose preferred block size
    /// ([`MemoryContext::preferred_block_size`]) is `preferred_block_size`.
    pub(crate) fn new(memory_type: u32, preferred_block_size: u64) -> Self {
        Self {
            custom: false,
            dedicated_above: preferred_block_size / 2,
            ..Self::with_policy(memory_type, PoolPolicy::DEFAULT, None, None)
        }
    }

    /// A pool of `memory_type` whose blocks follow `policy`: a custom pool,
    /// named `name`, whose blocks (and dedicated allocations whose request
    /// names none) get `priority` (`VK_EXT_memory_priority`). Makes no
    /// block yet ([`make_min_blocks`](Self::make_min_blocks) does).
    pub(crate) fn with_policy(
        memory_type: u32,
        policy: PoolPolicy,
        name: Option<&str>,
        priority: Option<f32>,
    ) -> Self {
        Self {
            custom: true,
            priority,
            destroyed: false,
            memory_type,
            blocks: Slab::new(),
            order: [Vec::new(), Vec::new()],
            dedicated: Slab::new(),
            runs: Runs::default(),
            next_serial: 0,
            policy,
            // A custom pool's requests are never `Auto`.
            dedicated_above: u64::MAX,
            name: name.map(Into::into),
            guarded: corruption::GuardTable::new(),
            counters: PoolCounters::default(),
        }
    }

    /// Makes the policy's `min_blocks` blocks. On failure, releases those
    /// it made and returns the error, leaving the pool empty; so too on a
    /// panic (of the memory callback, or the backend), which then goes on
    /// with the pool empty (`threads/callback_panic.rs`).
    ///
    /// # Errors
    /// As [`MemoryContext::allocate_memory`], and
    /// [`Error::OutOfHostMemory`] for a block's slot table.
    pub(crate) fn make_min_blocks<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
    ) -> Result<(), Error> {
        let size = self.preferred_block_size(context);
        let request = PoolRequest::for_block(size);
        while self.counters.blocks < self.policy.min_blocks {
            // Unwind safety: a block is in the pool whole or not at all.
            let made = panic::catch_unwind(AssertUnwindSafe(|| {
                self.create_block(context, size, &request)
            }));
            match made {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => {
                    self.release_all(context);
                    return Err(error);
                }
                Err(payload) => {
                    self.release_all(context);
                    panic::resume_unwind(payload);
                }
            }
        }
        Ok(())
    }

    /// The memory type of its blocks.
    pub(crate) fn memory_type(&self) -> u32 {
        self.memory_type
    }

    /// Whether small buffers take run slots here. Not in a pool with
    /// `max_blocks`: a run keeps up to 64 KiB for buffers of one size
    /// class, so in a capped pool requests of other sizes could find no
    /// room (`Error::PoolFull`) while that many bytes are free.
    #[inline]
    pub(crate) fn takes_runs(&self) -> bool {
        self.policy.max_blocks == u64::MAX
    }

    /// Fits a custom pool's `request` whose rounding (its size rounded up to
    /// its alignment, an atom or a granularity page) takes it past the
    /// pool's fixed block size, but whose bytes and debug margin
    /// (`margin`) fit in a block: it takes a block from its start to its
    /// end, which no other allocation follows. Without this, a 1000-byte
    /// request aligned to 256 was refused as too large for a pool of
    /// 1000-byte blocks ([`Error::TooLargeForPool`] said 1024 bytes); VMA
    /// places it. (Requests that share a block still take their rounded
    /// size: the bytes of a block past the last multiple of a request's
    /// rounding serve only a request that takes the whole block.)
    pub(crate) fn fit_to_fixed_blocks(&self, request: &mut PoolRequest<'_>, margin: u64) {
        let Some(block_size) = self.policy.block_size else {
            return;
        };
        if request.placed_size > block_size && request.size.saturating_add(margin) <= block_size {
            request.placed_size = block_size;
            request.run_class = None;
        }
    }

    /// Whether the pool was destroyed: see the field.
    #[inline]
    pub(crate) fn is_destroyed(&self) -> bool {
        self.destroyed
    }

    /// Marks a custom pool destroyed, and releases its blocks: the caller
    /// checked that it holds no allocation.
    pub(crate) fn destroy<D: MemoryDeviceExt<M>>(&mut self, context: &MemoryContext<D>) {
        debug_assert!(self.is_unused());
        self.destroyed = true;
        self.release_all(context);
    }

    /// Whether the pool holds no allocation (its blocks may remain).
    pub(crate) fn is_unused(&self) -> bool {
        self.counters.block_allocations == 0 && self.counters.dedicated == 0
    }

    /// Places `request` in this memory type.
    ///
    /// # Errors
    /// [`Error::OutOfDeviceMemory`] when neither blocks nor dedicated memory
    /// could hold it; the budget, object-count and device errors of
    /// [`MemoryContext::allocate_memory`]; [`Error::OutOfHostMemory`] for a
    /// new block's slot table; in a custom pool [`Error::TooLargeForPool`]
    /// past its fixed block size and [`Error::PoolFull`] at its
    /// `max_blocks`; [`Error::NoRoomInExistingMemory`] for a request for
    /// existing memory only that none holds.
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
        // the class has room.
        if let Some(class) = request.run_class {
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
        self.allocate_slow(context, *request, dedicated_first)
    }

    /// [`allocate`](Self::allocate) past the existing blocks: dedicated memory
    /// first when `dedicated_first` (then the existing blocks), else a new
    /// block, then dedicated memory when the device has no room for one;
    /// past the budget, dedicated memory and no new block (but past 3/4 of
    /// `maxMemoryAllocationCount`). A
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
        if request.existing_memory_only {
            return self.allocate_in_existing(request, dedicated_first);
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
        if dedicated_first || past_budget {
            match self.allocate_dedicated(context, request) {
                // Unless the driver requires dedicated memory, an existing
                // block may still take the request when the device has no
                // room for another object, is at maxMemoryAllocationCount,
                // or cannot map a new one.
                Err(error)
                    if request.dedicated != DedicatedChoice::Require
                        && (is_no_room(error)
                            || matches!(error, Error::TooManyObjects(_) | Error::MapFailed)) =>
                {
                    // (`allocate` tried them unless dedicated memory came
                    // first.)
                    if dedicated_first {
                        if let Some(placement) = self.allocate_in_blocks(request) {
                            return Ok(self.count(placement, request));
                        }
                    }
                    if past_budget {
                        return Err(error);
                    }
                }
                result => return result,
            }
        }
        match self.allocate_in_new_block(context, request, preferred) {
            Ok(placement) => Ok(self.count(placement, request)),
            Err(error)
                if is_no_room(error)
                    && !dedicated_first
                    && request.dedicated != DedicatedChoice::Never =>
            {
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
    /// it), and an empty block of the other granularity class, which
    /// exists, is adopted. Never a new memory object.
    #[cold]
    #[inline(never)]
    fn allocate_in_existing(
        &mut self,
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
        if let Some(key) = self.adopt_empty_block(request) {
            if let Some(placement) = self.allocate_in_block(key, request) {
                return Ok(self.count(placement, request));
            }
        }
        Err(Error::NoRoomInExistingMemory)
    }

    /// [`Error::TooLargeForPool`] when the pool fixes its blocks' size and
    /// `request` takes more.
    fn too_large_for_blocks(&self, request: &PoolRequest<'_>) -> Option<Error> {
        let block_size = self.policy.block_size?;
        (request.placed_size > block_size).then_some(Error::TooLargeForPool {
            size: request.placed_size,
            block_size,
        })
    }

    /// Carves a new run of `class` from the existing blocks and takes its
    /// first slot; `None` when no block has room for a run. Runs never
    /// create blocks: the request then takes a range of its own (in a gap
    /// too small for a run, or in a new block), and later runs come from the
    /// block it made. Nor do they come from blocks a defragmentation plan
    /// is emptying: a run there would hand out slots that keep the block;
    /// nor from blocks less than 16 times the run's size
    /// ([`run_fits_block`]). The request comes by value, as to
    /// [`allocate_slow`](Self::allocate_slow).
    #[cold]
    #[inline(never)]
    fn take_from_new_run(&mut self, request: PoolRequest<'_>, class: usize) -> Option<TakenSlot> {
        let run_request = Self::run_request(&request, class);
        let placement = (0..self.order[request.class].len()).find_map(|index| {
            let key = self.order[request.class][index];
            if !self.takes_run_in(key, &run_request) {
                return None;
            }
            self.allocate_in_block(key, &run_request)
        })?;
        self.start_run(class, placement)
    }

    /// Whether block `key` may hold a new run, whose range `run_request`
    /// asks for: it is not retiring, and large enough ([`run_fits_block`]).
    fn takes_run_in(&self, key: SlabKey, run_request: &PoolRequest<'_>) -> bool {
        self.blocks.get(key).is_some_and(|block| {
            !block.retiring && run_fits_block(run_request.placed_size, block.size)
        })
    }

    /// The request for the range of a new run of `class`, made for `request`.
    fn run_request<'r>(request: &PoolRequest<'r>, class: usize) -> PoolRequest<'r> {
        let slot_size = class_size(class);
        let bytes = slot_size * u64::from(slots_per_run(slot_size));
        PoolRequest {
            // Every slot then keeps every alignment its class serves (runs.rs).
            align: 1 << slot_size.trailing_zeros(),
            class: request.class,
            within_budget: request.within_budget,
            ..PoolRequest::for_block(bytes)
        }
    }

    /// Makes the block range `placement` a run of `class` and takes its
    /// first slot.
    fn start_run(&mut self, class: usize, placement: Placement) -> Option<TakenSlot> {
        let Placement {
            location: Location::Block { block, range },
            memory,
            offset,
            mapped,
        } = placement
        else {
            return None;
        };
        self.runs
            .insert(class, block, range, offset, memory, mapped);
        // The new run is the last of its class's list: take hands out its slot.
        self.runs.take(class)
    }

    /// Names a run slot taken for `request` and counts it as handed out.
    #[inline(always)]
    fn hand_out_slot(&mut self, taken: TakenSlot, request: &PoolRequest<'_>) -> Placement {
        if let Some(name) = request.name {
            self.runs.set_name(&taken, name);
        }
        self.count(taken.into(), request)
    }

    /// Counts a placement of `request` as a live allocation in a block, where
    /// one is handed out (a run's own range is not one: its slots are).
    #[inline(always)]
    fn count(&mut self, placement: Placement, request: &PoolRequest<'_>) -> Placement {
        self.counters.block_allocations += 1;
        self.counters.block_allocated_bytes += request.size;
        placement
    }

    /// Moves on to the next block or dedicated-memory serial, after a memory
    /// object took the current one. Names and dump ids use it: after 2^32
    /// objects of one type (no engine makes that many) they repeat, with no
    /// other effect.
    fn advance_serial(&mut self) {
        self.next_serial = self.next_serial.wrapping_add(1);
    }

    /// Makes this pool's next memory object (a block, or dedicated memory
    /// bound to `dedicated` when it names a resource), `size` bytes with
    /// the debug name `name`, within the heap's budget when `request` asks
    /// for that, exportable as the pool's policy says; the pool's serial
    /// advances when it is made.
    ///
    /// # Errors
    /// Those of [`MemoryContext::allocate_memory`].
    fn make_memory<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        size: u64,
        dedicated: Option<DedicatedTarget>,
        priority: Option<f32>,
        name: &str,
        request: &PoolRequest<'_>,
    ) -> Result<NewMemory<M>, Error> {
        let new = context.allocate_memory::<M>(&MemoryRequest {
            memory_type: self.memory_type,
            size,
            dedicated,
            priority,
            name: Some(name),
            within_budget: request.within_budget,
            export_handle_types: self.policy.export_handle_types,
        })?;
        self.advance_serial();
        Ok(new)
    }

    /// The size of this pool's blocks: its fixed size, or the memory type's
    /// preferred size, which the first blocks grow to.
    pub(crate) fn preferred_block_size<D: MemoryDeviceExt<M>>(
        &self,
        context: &MemoryContext<D>,
    ) -> u64 {
        self.policy
            .block_size
            .unwrap_or_else(|| context.preferred_block_size(self.memory_type))
    }

    /// First fit over the existing blocks of the request's class. Inlined
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
    fn allocate_in_block(&mut self, key: SlabKey, request: &PoolRequest<'_>) -> Option<Placement> {
        place_in_block(&mut self.blocks, &mut self.counters, key, request)
    }

    /// Names the live allocation at `location` anew (`None`: unnamed), for
    /// leak reports, memory maps and dumps; dedicated memory's debug name
    /// follows ([`rename_dedicated`](Self::rename_dedicated)).
    ///
    /// # Errors
    /// [`Error::StaleAllocation`] when `location` names nothing live.
    pub(crate) fn rename<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        location: Location,
        name: Option<&str>,
    ) -> Result<(), Error> {
        match location {
            Location::Dedicated(key) => self.rename_dedicated(context, key, name)?,
            Location::Block { block, range } => {
                let block = self.blocks.get_mut(block).ok_or(Error::StaleAllocation)?;
                block.ranges.get(range).ok_or(Error::StaleAllocation)?;
                match name {
                    Some(name) => {
                        block.names.insert(range.slot(), name.into());
                    }
                    None => {
                        block.names.remove(&range.slot());
                    }
                }
            }
            Location::Slot {
                run,
                slot,
                generation,
            } => {
                self.runs
                    .live(run, slot, generation)
                    .ok_or(Error::StaleAllocation)?;
                self.runs.rename(run, slot, name);
            }
        }
        Ok(())
    }

    /// Frees the allocation of `size` requested bytes at `location`; releases
    /// its memory when it was dedicated, and, when its block empties, the
    /// empty blocks the pool does not keep
    /// ([`block_emptied`](Self::block_emptied)).
    ///
    /// # Errors
    /// [`Error::StaleAllocation`] when `location` names nothing live.
    ///
    /// # Safety
    /// The GPU no longer uses the allocation (VUID-vkFreeMemory-memory-00677
    /// when memory is released).
    pub(crate) unsafe fn free<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        location: Location,
        size: u64,
    ) -> Result<(), Error> {
        // Every free comes here, so every guarded margin is checked once,
        // and every freed range filled.
        if context.is_debug_type(self.memory_type) {
            // SAFETY: the caller's contract.
            return unsafe { self.free_debug(context, location, size) };
        }
        // SAFETY: the caller's contract.
        unsafe { self.free_plain(context, location, size) }
    }

    /// [`free`](Self::free) in a memory type with corruption detection or
    /// debug fills on: checks the allocation's margin, fills the bytes it
    /// holds with the freed pattern (`debug_fill.rs`), frees it, and only
    /// then logs a damaged margin (under a `&self` call, once the pool's
    /// lock is released: `deferred_log`), so that a logger that panics on
    /// the error line leaves the allocation freed. The line is logged also
    /// when the free panics (the memory callback, as the emptied block is
    /// released), before that panic goes on. A backend panicking in the
    /// fill's flush (non-coherent types) goes on once the allocation is
    /// freed.
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[cold]
    #[inline(never)]
    unsafe fn free_debug<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        location: Location,
        size: u64,
    ) -> Result<(), Error> {
        let damaged = if context.detects_corruption(self.memory_type) {
            self.check_margin_on_free(context, location)
        } else {
            None
        };
        // A backend panicking in the flush of the fill (non-coherent
        // types) goes on once the allocation is freed: the pool holds it
        // still, and nobody else would free it.
        let filled = if context.fills(self.memory_type) {
            panic::catch_unwind(AssertUnwindSafe(|| {
                // SAFETY: the caller's contract: the allocation is freed
                // and the GPU is done with it.
                unsafe { self.fill_freed(context, location) }
            }))
        } else {
            Ok(())
        };
        if let (None, Ok(())) = (&damaged, &filled) {
            // SAFETY: the caller's contract.
            return unsafe { self.free_plain(context, location, size) };
        }
        // Unwind safety: a free updates the pool before anything that can
        // panic (`FirstPanic::run`'s note).
        let freed = panic::catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: the caller's contract.
            unsafe { self.free_plain(context, location, size) }
        }));
        if let Some(damaged) = damaged {
            deferred_log::log(log::Level::Error, damaged);
        }
        if let Err(payload) = filled {
            panic::resume_unwind(payload);
        }
        freed.unwrap_or_else(|payload| panic::resume_unwind(payload))
    }

    /// [`free`](Self::free) without the debug work (the margin check, the
    /// freed fill): for a memory type that has none, or once it is done.
    /// `Allocator::free` calls it directly once it has checked the type.
    /// A stale `location` is refused all the same.
    ///
    /// # Errors
    /// As [`free`](Self::free).
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[inline(always)]
    pub(crate) unsafe fn free_plain<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        location: Location,
        size: u64,
    ) -> Result<(), Error> {
        match location {
            Location::Dedicated(key) => {
                let dedicated = self.dedicated.remove(key).ok_or(Error::StaleAllocation)?;
                // SAFETY: the caller guarantees the GPU is done with it.
                unsafe { self.release_dedicated(context, dedicated) };
                Ok(())
            }
            Location::Slot {
                run,
                slot,
                generation,
            } => {
                let emptied = self
                    .runs
                    .free(run, slot, generation)
                    .map_err(|()| Error::StaleAllocation)?;
                self.counters.block_allocations -= 1;
                self.counters.block_allocated_bytes -= size;
                if let Some(run) = emptied {
                    if self.free_range(run.block, run.range)? {
                        self.block_emptied(context, run.block);
                    }
                }
                Ok(())
            }
            Location::Block { block, range } => {
                let emptied = self.free_range(block, range)?;
                self.counters.block_allocations -= 1;
                self.counters.block_allocated_bytes -= size;
                // After the counters: what an empty block may keep is
                // weighed against the bytes still allocated.
                if emptied {
                    self.block_emptied(context, block);
                }
                Ok(())
            }
        }
    }

    /// Gives `range` back to block `key`; returns whether that emptied the
    /// block (the caller, once its counters are up to date, calls
    /// [`block_emptied`](Self::block_emptied)).
    ///
    /// # Errors
    /// [`Error::StaleAllocation`] when the range is not live.
    #[inline(always)]
    fn free_range(&mut self, key: SlabKey, range: AllocationId) -> Result<bool, Error> {
        let block = self.blocks.get_mut(key).ok_or(Error::StaleAllocation)?;
        let merged = block
            .ranges
            .free_packed(range)
            .ok_or(Error::StaleAllocation)?;
        block.miss.after_free(merged.get());
        // Most allocations are unnamed: skip hashing the slot then.
        if !block.names.is_empty() {
            block.names.remove(&range.slot());
        }
        Ok(block.ranges.is_empty())
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
    let mut result = block.ranges.allocate_packed(placed, request.align);
    if result.is_none() && !block.ranges.has_unused_slot() {
        grow_slot_table(&mut block.ranges)?;
        result = block.ranges.allocate_packed(placed, request.align);
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

/// Grows a block's node table when every slot is taken (amortised:
/// doubling, 64 slots at least); `None` when the host cannot. Out of
/// line: the allocation path only calls it when a block runs out of slots.
#[cold]
#[inline(never)]
fn grow_slot_table(ranges: &mut OffsetAllocator) -> Option<()> {
    let slots = ranges.slot_count();
    ranges.reserve_slots(slots.max(64)).ok()
}

/// Records the new range `range` of `block` (slab key `key`) at `offset`
/// for `request`, its resource kind and its name, and returns its
/// placement.
#[inline(always)]
fn record_range<M>(
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
