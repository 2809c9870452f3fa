//! Refusals remembered per heap: the fewest bytes the driver refused a
//! memory object of, so that a full heap is not asked again for every
//! size it refused by each request that needs new memory.
//!
//! A request that needs new memory in a memory type tries a new block,
//! its halvings down to 1/64 of the preferred size, and dedicated memory
//! of its own size (`type_pool/new_block.rs`, `type_pool/allocate.rs`):
//! up to 8 `vkAllocateMemory` calls (a remainder block below 1/64 is a
//! ninth, sized below the refusal remembered: below), each of which a
//! full heap refuses with `VK_ERROR_OUT_OF_DEVICE_MEMORY`, and as many
//! again for each other memory type of the heap. A refused call can be slow, and an engine
//! near the limit of its VRAM without `VK_EXT_memory_budget` made them
//! all again at every request. So each heap remembers the fewest bytes
//! the driver refused there, and an attempt of that size or more is
//! answered with the same refusal without a call (its error, as the
//! call's, [`Error::OutOfDeviceMemory`](crate::Error::OutOfDeviceMemory),
//! and the warn-once lines as they were), but for the attempts that
//! always ask the driver (`MemoryRequest::skip_if_refused` is false for
//! them), in each memory type a request tries:
//! - its last attempt: dedicated memory when it comes after the blocks,
//!   else the least block of its ladder (in a default pool the smallest
//!   halving of the preferred size that holds it, below 1/64 too; in a
//!   custom pool no smaller than 1/64, or its one fixed size). So no
//!   request fails without the driver having been asked.
//! - its dedicated memory, also when it comes first (memory the driver
//!   prefers dedicated, a request larger than half a block): of the
//!   request's own size, the least it can take in the type. Skipped as
//!   not the last attempt, a request of 150 MiB would not take 200 MiB
//!   that another process freed, as its one call would ask for a 256 MiB
//!   block.
//!
//! From a heap with no refusal remembered, a request makes the calls it
//! made before: the sizes it tries only shrink, so its own refusals skip
//! none of them; but where it tries dedicated memory first and then
//! several block sizes (memory the driver prefers dedicated), the driver
//! has just refused it fewer bytes, and of those blocks only the smallest
//! is asked for.
//!
//! The heap forgets the refusal (the driver is asked for every size
//! again) when:
//! - this allocator frees a memory object in the heap
//!   ([`MemoryContext::free_memory`]: a block released, by `trim`, a
//!   defragmentation, a destroyed pool or a request that releases kept
//!   empty blocks, dedicated memory freed, memory the allocator could not
//!   map);
//! - a memory object of at least the refused size is made in the heap
//!   (one of fewer bytes, say the smallest block of a request, disproves
//!   nothing: the larger sizes stay skipped);
//! - a frame ends (`Allocator::end_frame`, `end_frame_timeline`,
//!   `collect_idle`): memory
//!   other processes free shows then, as it does in the budgets, which
//!   are read again at the next check. Before that, a request's one call
//!   takes such memory at once.
//!
//! A budget reading that changed needs no rule of its own. The figures
//! are read again after a frame ends, which forgets the refusal; after 30
//! memory objects were made or freed (`budget_cache.rs`), of which only
//! a free in the heap or memory of the refused size or more there forgets
//! it (objects of fewer bytes, or in other heaps, do not: nor does the
//! driver's refusal of that size change with them); for a request the
//! estimate finds over budget, which makes no call; and for `budgets()`,
//! `stats()` and the dumps, which make no memory.
//!
//! Only `VK_ERROR_OUT_OF_DEVICE_MEMORY` is remembered: it is the refusal
//! smaller sizes and other memory types are tried after. The host's own
//! want of memory (`VK_ERROR_OUT_OF_HOST_MEMORY`) leaves the request only
//! existing blocks (no other memory object is asked for), so nothing
//! repeats it.
//!
//! A refusal of exportable memory (a custom pool's `PoolDesc::export`)
//! is not remembered: drivers may refuse exportable memory for reasons
//! of its own (a cap on exportable objects, an external-memory path short
//! of room) while plain memory is still there, and a remembered refusal
//! would send every request of the heap down to its smallest block. The
//! other way round holds: a heap that refused plain memory is not asked
//! for as much exportable memory either.
//!
//! A default pool's remainder block (`type_pool/new_block.rs`), below
//! 1/64 of the preferred size, is sized below the refusal remembered:
//! where the driver refused 4 MiB, it asks for 2 MiB once, and after a
//! refusal of that, the next request asks for 1 MiB, so that a heap the
//! driver has a little room left in is found out one call per request,
//! not a probe of every size. Once the driver refused a request's own
//! dedicated memory, no remainder block is smaller: a full heap costs one
//! such call after it forgot its refusal, none after.
//!
//! Off the allocation path: written only as memory objects are made and
//! freed, under the heap's turn (`heap_turns`), so that a refusal and a
//! free of the heap's memory are never recorded out of order; relaxed
//! atomics, as the warn-once bits beside them. (The remainder block's size
//! reads it without the turn: a value changed meanwhile changes only that
//! size.)

use std::sync::atomic::{AtomicU64, Ordering};

use super::MemoryContext;

/// A heap's remembered refusal when there is none: no attempt is that
/// large.
pub(super) const NONE_REFUSED: u64 = u64::MAX;

impl<D> MemoryContext<D> {
    /// Where `heap`'s refusal is remembered: the fewest bytes the driver
    /// refused there since it was last refreshed, [`NONE_REFUSED`] when
    /// none; `None` for a heap the device does not list.
    fn refused_in(&self, heap: u32) -> Option<&AtomicU64> {
        self.refused.get(heap as usize)
    }

    /// The fewest bytes the driver refused in `heap` when `size` bytes
    /// are that many or more: an attempt of `size` bytes that may be
    /// skipped is, with that refusal as its answer.
    pub(super) fn remembered_refusal(&self, heap: u32, size: u64) -> Option<u64> {
        let refused = self.refused_in(heap)?.load(Ordering::Relaxed);
        (size >= refused).then_some(refused)
    }

    /// The fewest bytes the driver refused in `memory_type`'s heap since
    /// it was last refreshed, [`NONE_REFUSED`] (`u64::MAX`) when none: a
    /// remainder block is sized below it (`type_pool/new_block.rs`).
    /// Read under the memory type's pool lock, not the heap's turn: a
    /// refusal recorded or forgotten meanwhile by another memory type of
    /// the heap only changes the size that block is tried at.
    pub(crate) fn refused_bytes(&self, memory_type: u32) -> u64 {
        self.refused_in(self.heap_of(memory_type))
            .map_or(NONE_REFUSED, |refused| refused.load(Ordering::Relaxed))
    }

    /// The driver refused `size` bytes in `heap` for want of device
    /// memory. Under the heap's turn.
    pub(super) fn remember_refusal(&self, heap: u32, size: u64) {
        if let Some(refused) = self.refused_in(heap) {
            refused.fetch_min(size, Ordering::Relaxed);
        }
    }

    /// A memory object of `size` bytes was made in `heap`: a refusal of
    /// as many bytes or fewer is forgotten. A load, and a store only when
    /// it forgets. Under the heap's turn.
    pub(super) fn made_in_heap(&self, heap: u32, size: u64) {
        if let Some(refused) = self.refused_in(heap) {
            if refused.load(Ordering::Relaxed) <= size {
                refused.store(NONE_REFUSED, Ordering::Relaxed);
            }
        }
    }

    /// A memory object in `heap` was freed: its refusal is forgotten. A
    /// load, and a store only when one was remembered. Under the heap's
    /// turn.
    pub(super) fn freed_in_heap(&self, heap: u32) {
        if let Some(refused) = self.refused_in(heap) {
            forget(refused);
        }
    }

    /// A frame ended: every heap forgets its refusal, as other processes
    /// may have freed memory meanwhile.
    pub(crate) fn forget_refusals(&self) {
        self.refused.iter().for_each(forget);
    }
}

/// Forgets a heap's refusal: a load, and a store only when one was
/// remembered.
fn forget(refused: &AtomicU64) {
    if refused.load(Ordering::Relaxed) != NONE_REFUSED {
        refused.store(NONE_REFUSED, Ordering::Relaxed);
    }
}
