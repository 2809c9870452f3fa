//! New blocks of a [`TypePool`]: their size (the pool's fixed size, or
//! VMA's growing sequence, [`block_size`](super::super::block_size)), the
//! smaller sizes tried when the device has no room or the heap's budget
//! none (those the heap refused since its memory was last freed skipped
//! without a call, but for one attempt per request:
//! `context/refusals.rs`), below the smallest of them, in a default pool,
//! a remainder block that leaves half the heap's last room
//! (`create_remainder_block`), an empty block of the other granularity
//! class taken over instead of a new one (by the reserve,
//! `allocate_in_reserve`, which requests try first), and the debug names
//! of a pool's memory objects.

use super::{is_no_room, too_large_for_any_block, Placement, PoolRequest, TypePool};
use crate::device::MemoryDeviceExt;
use crate::memory::block::{Block, Miss, SlotKinds};
use crate::memory::block_size::{
    least_block_size, new_block_size, remainder_block_size, retry_block_size,
};
use crate::memory::context::{Failure, MemoryContext};
use crate::memory::held_lock::Held;
use crate::memory::slab::SlabKey;
use crate::offset::{OffsetAllocator, OffsetError};
use crate::Error;

impl<M> TypePool<M> {
    /// Places `request` in a new block, once the existing blocks, the
    /// reserve's included (`allocate_in_reserve`), could not;
    /// `dedicated_after` when dedicated memory is tried next should the
    /// device have no room for a block.
    pub(super) fn allocate_in_new_block<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        request: &PoolRequest<'_>,
        preferred: u64,
        dedicated_after: bool,
    ) -> Result<Placement, Error> {
        // No block of a pool with a fixed size can hold more: said first,
        // as no freeing would help (nor would a full pool's room).
        if let Some(error) = self.too_large_for_blocks(request) {
            return Err(error);
        }
        let fixed = self.policy.block_size;
        // Each granularity class grows its own sequence of block sizes
        // (its retiring blocks included).
        let largest = self.order[request.class]
            .iter()
            .chain(&self.retiring[request.class])
            .filter_map(|key| self.blocks.get(*key))
            .map(|b| b.size)
            .max()
            .unwrap_or(0);
        // The preferred size is within the heap and maxMemoryAllocationSize
        // (block_size.rs), but a request of nearly either, rounded up to an
        // alignment that does not divide it, is not: no block of it can
        // exist (VUID-vkAllocateMemory-pAllocateInfo-01713). Said as such,
        // not as out of memory: kept empty blocks released for it, as for
        // a request short of memory, could not have helped.
        if let Some(error) = too_large_for_any_block(context, self.memory_type, request) {
            return Err(error);
        }
        if self.counters.blocks >= self.policy.max_blocks {
            return Err(Error::PoolFull {
                max_blocks: self.policy.max_blocks,
            });
        }
        let mut size = match fixed {
            Some(block_size) => block_size,
            None => new_block_size(preferred, largest, request.placed_size),
        };
        // A default pool's ladder goes on below its smallest size
        // (`create_remainder_block`); a custom pool's stops there.
        let remainder = !self.custom;
        let key = loop {
            // The smallest block is the request's last attempt, which the
            // heap's remembered refusal never answers, unless dedicated
            // memory, or a smaller block that holds it, comes after it
            // (`context/refusals.rs`).
            let last = fixed.is_some()
                || (retry_block_size(size, preferred, request.placed_size).is_none()
                    && !(remainder && least_block_size(size, request.placed_size).is_some()));
            let skip_if_refused = dedicated_after || !last;
            match self.create_block(context, size, request, skip_if_refused, &mut None) {
                Ok(key) => break key,
                // Out of memory or over budget: a smaller block may still
                // fit, unless the pool fixes the size (as VMA's pools do).
                Err(error) if is_no_room(error) && fixed.is_none() => {
                    let Some(smaller) = retry_block_size(size, preferred, request.placed_size)
                    else {
                        if !remainder {
                            return Err(error);
                        }
                        let key = self.create_remainder_block(
                            context,
                            request,
                            size,
                            dedicated_after,
                            error,
                        )?;
                        break key;
                    };
                    size = smaller;
                    // Once until the type makes memory again: a heap at its
                    // budget refuses every request's new block.
                    if context.first_failure(self.memory_type, Failure::SmallerBlock) {
                        log::warn!(
                            "vk-suballoc: {error} in memory type {}, retrying with a {size}-byte block",
                            self.memory_type
                        );
                    }
                }
                Err(error) => return Err(error),
            }
        };
        // A new block of at least the placed size holds it at offset 0, with
        // any power-of-two alignment. Should that ever fail, the block goes
        // back rather than stay as a second empty one.
        let placement = self.allocate_in_block(key, request);
        if placement.is_none() {
            self.release_block(context, key);
        }
        placement.ok_or(Error::OutOfDeviceMemory)
    }

    /// A default pool's last block for `request` once its ladder ended
    /// at `smallest` bytes, refused (`error`: the heap, or its budget, has
    /// less room than that, as at the edge of a budget): a block of the
    /// largest halving that leaves half the heap's known room (its
    /// budget's, when the request keeps to it; its size's, a limit's) and
    /// is below the heap's remembered refusal
    /// ([`remainder_block_size`]), one attempt; then,
    /// with no dedicated memory after it (`dedicated_after`), the least
    /// halving that holds the request ([`least_block_size`]), always asked
    /// for. Without this, each small request that the blocks could not
    /// hold took dedicated memory of its own size there: a
    /// `vkAllocateMemory` and one of `maxMemoryAllocationCount` each
    /// (2000 buffers of 256 bytes, 2000 memory objects, with 3.5 MiB left
    /// of a budget under a 4 MiB smallest block); a request that may not
    /// take dedicated memory went on to the next memory type.
    ///
    /// # Errors
    /// `error` when no block is tried, else the last attempt's, as
    /// [`create_block`](Self::create_block).
    fn create_remainder_block<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        request: &PoolRequest<'_>,
        smallest: u64,
        dedicated_after: bool,
        error: Error,
    ) -> Result<SlabKey, Error> {
        // Held until the block is counted in the heap's usage (released
        // there, `MemoryContext::allocate_memory`, before the memory
        // callback, the map and the debug fill), or refused: another
        // memory type of the heap (a pool of its own, under its own lock)
        // sizes its remainder block on the room this one leaves, not on
        // the room both read at once. Sized at once, each took half the
        // room, and together all of it (2 MiB left, two 1 MiB blocks:
        // budget_edge/remainder_turn.rs). A refused attempt keeps it for
        // the next.
        let mut turn = context.remainder_turn(self.memory_type);
        let placed = request.placed_size;
        let room = context.known_room(self.memory_type, request.within_budget);
        let refused = context.refused_bytes(self.memory_type);
        let tried = remainder_block_size(smallest, placed, room, refused);
        let least = least_block_size(smallest, placed);
        let mut error = error;
        if let Some(size) = tried {
            // The last attempt when it is the least block and no dedicated
            // memory follows: asked for, whatever the heap refused. (The
            // size is below the refusal read above, so on one thread no
            // remembered refusal answers this attempt either way; another
            // memory type of the heap may record a smaller one meanwhile,
            // through dedicated memory or a block of its ladder, which take
            // no remainder turn, and then this says whether the driver is
            // still asked.)
            let skip_if_refused = dedicated_after || tried != least;
            match self.create_block(context, size, request, skip_if_refused, &mut turn) {
                Ok(key) => return Ok(key),
                Err(refusal) if is_no_room(refusal) => error = refusal,
                Err(refusal) => return Err(refusal),
            }
        }
        match least {
            Some(least) if !dedicated_after && tried != Some(least) => {
                // A remainder block whose map failed was counted, which
                // released the turn, then freed: taken again, so that the
                // least block too is counted before another memory type
                // of the heap sizes its own.
                if turn.is_none() {
                    turn = context.remainder_turn(self.memory_type);
                }
                self.create_block(context, least, request, false, &mut turn)
            }
            _ => Err(error),
        }
    }

    /// Moves an empty block of the other granularity class, when it
    /// can hold `request`, to the request's class and returns it. An empty
    /// block holds nothing a resource could conflict with, so it serves
    /// either kind; without this, a buffer needing a block made one next to
    /// an empty image-only block.
    pub(super) fn adopt_empty_block(&mut self, request: &PoolRequest<'_>) -> Option<SlabKey> {
        if self.counters.empty_blocks == 0 {
            return None;
        }
        let other = &mut self.order[1 - request.class];
        let index = other.iter().position(|&key| {
            self.blocks
                .get(key)
                .is_some_and(|block| block.ranges.is_empty() && block.size >= request.placed_size)
        })?;
        let key = other.remove(index);
        let block = self.blocks.get_mut(key)?;
        block.class = request.class;
        block.kinds.clear();
        block.miss = Miss::NONE;
        self.order[request.class].push(key);
        Some(key)
    }

    /// Makes a block of `size` bytes for `request`'s granularity class,
    /// empty, in the pool; with `skip_if_refused`, the heap's remembered
    /// refusal of `size` bytes or fewer answers instead of the driver
    /// (`context/refusals.rs`). `remainder_turn` is released once the
    /// block is counted in the heap's usage
    /// ([`MemoryContext::allocate_memory`]), kept when it is refused.
    ///
    /// # Errors
    /// [`Error::OutOfHostMemory`] for the block's slot table, and those
    /// of [`MemoryContext::allocate_memory`].
    pub(super) fn create_block<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        size: u64,
        request: &PoolRequest<'_>,
        skip_if_refused: bool,
        remainder_turn: &mut Option<Held<'_, ()>>,
    ) -> Result<SlabKey, Error> {
        // Before the device memory, so that a failure leaves nothing to undo.
        let ranges =
            OffsetAllocator::new(size, context.config.initial_block_slots).map_err(|error| {
                match error {
                    OffsetError::OutOfHostMemory => Error::OutOfHostMemory,
                    _ => Error::OutOfDeviceMemory,
                }
            })?;
        let serial = self.next_serial;
        let name = self.memory_debug_name("block", serial);
        let new = self.make_memory(
            context,
            size,
            None,
            self.priority,
            &name,
            request,
            skip_if_refused,
            remainder_turn,
        )?;
        let raw = context.device.raw_memory(&new.memory);
        let key = self.blocks.insert(Block {
            memory: new.memory,
            raw,
            size,
            ranges,
            mapped: new.mapped,
            class: request.class,
            names: Default::default(),
            kinds: SlotKinds::default(),
            serial,
            miss: Miss::NONE,
            retiring: false,
            emptied_in_frame: context.current_frame(),
        });
        self.order[request.class].push(key);
        self.counters.blocks += 1;
        self.counters.block_bytes += size;
        self.counters.empty_blocks += 1;
        // Once the block is in the pool, empty: a backend panicking in the
        // flush of its fill (non-coherent types) leaves it there, to be
        // released as any empty block, not a memory object no pool holds.
        if context.fill_types() != 0 {
            if let Some(block) = self.blocks.get(key) {
                self.fill_new_block(context, &block.memory, block.mapped, size);
            }
        }
        Ok(key)
    }

    /// The debug name (`VK_EXT_debug_utils`) the allocator gives this
    /// pool's memory object number `serial`, a `"block"` or `"dedicated"`
    /// memory: `vk-suballoc <what> <type>/<serial>` in a default pool,
    /// `vk-suballoc pool "<pool>" <what> ...` in a named custom pool and
    /// `vk-suballoc custom pool <what> ...` in an unnamed one (serials count
    /// per pool, so the pool tells them apart). The pool's name is written
    /// as Rust's `{:?}` writes a string: quotes, backslashes and control
    /// characters in it are escaped, so the name's end stays plain.
    pub(super) fn memory_debug_name(&self, what: &str, serial: u32) -> String {
        let memory_type = self.memory_type;
        match &self.name {
            Some(pool) => format!("vk-suballoc pool {pool:?} {what} {memory_type}/{serial}"),
            None if self.custom => {
                format!("vk-suballoc custom pool {what} {memory_type}/{serial}")
            }
            None => format!("vk-suballoc {what} {memory_type}/{serial}"),
        }
    }
}
