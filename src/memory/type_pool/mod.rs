//! [`TypePool`]: the blocks and dedicated allocations of one memory type.
//!
//! Requests go to the first block (in creation order, so old blocks fill up
//! and new ones can empty out) whose offset allocator can place them; when
//! none can, to the pool's reserve (an empty block of the other
//! granularity class, adopted; then the blocks a defragmentation plan is
//! emptying, in the order they retired, kept apart, out of that first-fit
//! walk); when that cannot either, a new block is created
//! ([`block_size`](super::block_size)). Large
//! requests and those the driver asks for get dedicated memory (in a custom
//! pool, with a [`PoolPolicy`], only those that require it). When the
//! driver is out of memory, or the heap over budget, the pool retries
//! smaller blocks (in a default pool down to a remainder block that
//! leaves half the heap's last room), then dedicated memory, before it
//! reports failure (and the allocator moves on to the next memory type);
//! sizes the heap refused
//! before are skipped without a call while it remembers the refusal, but
//! for the attempts every request makes (`context/refusals.rs`).
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
//! largest, then [`TypePool::trim`] when that was not enough). A block
//! that empties while its heap is at or over its budget keeps none: every
//! empty block of the pool goes, but a custom pool's `min_blocks` (VMA's
//! `budgetExceeded` rule); so do they at a frame's end that finds the heap
//! there (`allocator/frames/kept_blocks.rs`). A block a defragmentation plan empties is released
//! at once (`defragment`), unless a custom pool would fall below
//! `min_blocks`: it then stops retiring and stays. When
//! optimal images have blocks of their own, a kept block serves whichever
//! kind needs a block next.
//! [`TypePool::trim`] releases the kept ones as well.
//!
//! This file holds the pool, its policy, and what its parts share (the
//! making of its memory objects and their serials, renaming); `allocate`
//! places requests in blocks, `run_slots` small buffers in runs, `free`
//! frees them; `new_block`
//! makes blocks, `empty_blocks` keeps and releases them, `dedicated`
//! holds dedicated memory, `inspect` the read-only views for reports,
//! `placement` the request, location and counter types, `corruption`
//! the pattern in debug margins (`Config::detect_corruption`), and
//! `debug_fill` the fills of new and freed memory (`Config::debug_fill`).

use std::panic::{self, AssertUnwindSafe};

use ash::vk;

use super::block::{Block, DedicatedMemory};
use super::context::{MemoryContext, MemoryRequest, NewMemory};
use super::held_lock::Held;
use super::runs::Runs;
use super::slab::{Slab, SlabKey};
use crate::device::{DedicatedTarget, MemoryDeviceExt};
use crate::Error;

mod allocate;
mod allocation_log;
pub(crate) mod backtraces;
mod corruption;
pub(crate) mod debug_fill;
mod dedicated;
mod defragment;
mod empty_blocks;
mod free;
mod inspect;
mod new_block;
mod placement;
mod run_slots;
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
    /// The least alignment of every allocation in the pool's blocks; 0:
    /// none.
    pub(crate) min_alignment: u64,
}

/// What of a custom pool's policy shapes each of its requests
/// ([`TypePool::shape`]): kept in the pools' table too, to be read without
/// the pool's lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PoolShape {
    /// The size of every block, when the policy fixes one.
    pub(crate) block_size: Option<u64>,
    /// The least alignment of every allocation; 0: none.
    pub(crate) min_alignment: u64,
}

/// Fits a custom pool's `request` whose rounding (its size rounded up to
/// its alignment, an atom or a granularity page) takes it past the pool's
/// fixed `block_size`, but whose bytes and debug margin (`margin`) fit in a
/// block: it takes a block from its start to its end, which no other
/// allocation follows. Without this, a 1000-byte request aligned to 256
/// was refused as too large for a pool of 1000-byte blocks
/// ([`Error::TooLargeForPool`] said 1024 bytes); VMA places it. (Requests
/// that share a block still take their rounded size: the bytes of a block
/// past the last multiple of a request's rounding serve only a request
/// that takes the whole block.)
pub(crate) fn fit_to_block_size(request: &mut PoolRequest<'_>, block_size: u64, margin: u64) {
    if request.placed_size > block_size && request.size.saturating_add(margin) <= block_size {
        request.placed_size = block_size;
        request.run_class = None;
    }
}

/// [`Error::TooLargeForPool`] when `request` (fitted with
/// [`fit_to_block_size`]) takes more than a block of `block_size` bytes.
pub(crate) fn too_large_for_block_size(
    request: &PoolRequest<'_>,
    block_size: u64,
) -> Option<Error> {
    (request.placed_size > block_size).then_some(Error::TooLargeForPool {
        size: request.placed_size,
        block_size,
    })
}

impl PoolPolicy {
    /// The default pools': growing blocks, none kept, no limit.
    pub(crate) const DEFAULT: Self = Self {
        block_size: None,
        min_blocks: 0,
        max_blocks: u64::MAX,
        export_handle_types: vk::ExternalMemoryHandleTypeFlags::empty(),
        min_alignment: 0,
    };
}

/// [`Error::SizeExceedsHeaps`] when `request` takes more in a block of
/// `memory_type` (its size and debug margin, rounded up as a block places
/// it: to its alignment, up to 4096 bytes, or to a granularity page) than
/// the type's heap holds, else [`Error::SizeExceedsMaxAllocation`] when
/// more than `maxMemoryAllocationSize`: no block of that type can ever
/// exist that holds it (VUID-vkAllocateMemory-pAllocateInfo-01713), so no
/// memory freed would help. Its `size` is the bytes the request takes in
/// a block. Dedicated memory, of the request's own size, may still hold
/// it.
pub(crate) fn too_large_for_any_block<D>(
    context: &MemoryContext<D>,
    memory_type: u32,
    request: &PoolRequest<'_>,
) -> Option<Error> {
    let size = request.placed_size;
    let heap = context.heap_size(memory_type);
    let max = context.properties.device.max_memory_allocation_size;
    if size > heap {
        Some(Error::SizeExceedsHeaps {
            size,
            largest_heap: heap,
        })
    } else if size > max {
        Some(Error::SizeExceedsMaxAllocation { size, max })
    } else {
        None
    }
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
    /// Blocks of each granularity class that requests try first fit
    /// (`allocate`), oldest first; not those a defragmentation plan is
    /// emptying, which are in `retiring`.
    order: [Vec<SlabKey>; 2],
    /// Blocks of each granularity class a defragmentation plan is emptying
    /// (`defragment`), in the order they last retired: out of the first-fit
    /// walk, so that a request takes one only when no other block of its
    /// class has room, and before new memory (`allocate_in_reserve`).
    retiring: [Vec<SlabKey>; 2],
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
    /// The backtrace of each live allocation's call, for leak reports;
    /// empty but with `Config::allocation_backtraces` (`backtraces.rs`).
    backtraces: backtraces::BacktraceTable,
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
            retiring: [Vec::new(), Vec::new()],
            dedicated: Slab::new(),
            runs: Runs::default(),
            next_serial: 0,
            policy,
            // A custom pool's requests are never `Auto`.
            dedicated_above: u64::MAX,
            name: name.map(Into::into),
            guarded: corruption::GuardTable::new(),
            backtraces: backtraces::BacktraceTable::default(),
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
                self.create_block(context, size, &request, false, &mut None)
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

    /// What of the pool's policy shapes each of its requests.
    pub(crate) fn shape(&self) -> PoolShape {
        PoolShape {
            block_size: self.policy.block_size,
            min_alignment: self.policy.min_alignment,
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
    /// advances when it is made. With `skip_if_refused`, the heap's
    /// remembered refusal of `size` bytes or fewer answers instead of the
    /// driver ([`MemoryRequest::skip_if_refused`]). `remainder_turn` is
    /// released once the memory is counted in the heap's usage
    /// ([`MemoryContext::allocate_memory`]).
    ///
    /// # Errors
    /// Those of [`MemoryContext::allocate_memory`].
    #[allow(clippy::too_many_arguments)]
    fn make_memory<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        size: u64,
        dedicated: Option<DedicatedTarget>,
        priority: Option<f32>,
        name: &str,
        request: &PoolRequest<'_>,
        skip_if_refused: bool,
        remainder_turn: &mut Option<Held<'_, ()>>,
    ) -> Result<NewMemory<M>, Error> {
        let new = context.allocate_memory::<M>(
            &MemoryRequest {
                memory_type: self.memory_type,
                size,
                dedicated,
                priority,
                name: Some(name),
                within_budget: request.within_budget,
                export_handle_types: self.policy.export_handle_types,
                skip_if_refused,
            },
            remainder_turn,
        )?;
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

    /// The name of the live allocation at `location`, `None` when it has
    /// none.
    ///
    /// # Errors
    /// [`Error::StaleAllocation`] when `location` names nothing live.
    pub(crate) fn name_of(&self, location: Location) -> Result<Option<&str>, Error> {
        match location {
            Location::Dedicated(key) => {
                let dedicated = self.dedicated.get(key).ok_or(Error::StaleAllocation)?;
                Ok(dedicated.name.as_deref())
            }
            Location::Block { block, range } => {
                let block = self.blocks.get(block).ok_or(Error::StaleAllocation)?;
                block.ranges.get(range).ok_or(Error::StaleAllocation)?;
                Ok(block.names.get(&range.slot()).map(|name| &**name))
            }
            Location::Slot {
                run,
                slot,
                generation,
            } => {
                self.runs
                    .live(run, slot, generation)
                    .ok_or(Error::StaleAllocation)?;
                Ok(self.runs.name(run, slot))
            }
        }
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
}
