//! Debug fills (`Config::debug_fill`, VMA's
//! `VMA_DEBUG_INITIALIZE_ALLOCATIONS`) and the writes after free they
//! reveal.
//!
//! In blocks of `HOST_VISIBLE | HOST_COHERENT` memory types (always
//! persistently mapped, `mapping.rs`), every byte no live allocation holds
//! reads [`FREED`]: a block is filled with it when it is made, and the
//! bytes an allocation holds in its block (its offset-allocator range, or
//! its run slot: [`held_bytes`](TypePool::held_bytes)) when it is freed.
//! A new allocation's requested bytes are filled with [`NEW`], so that a
//! read of memory never written stands out, as a read of freed memory does.
//!
//! VMA stops there. Here the bytes an allocation is about to hold are
//! first checked to read [`FREED`] still: one that does not was written
//! after its memory was freed, by the host through a pointer kept from the
//! old allocation or by the GPU, and is logged and counted as a corruption.
//! [`Allocator::check_corruption`](crate::Allocator::check_corruption)
//! checks every free range and free run slot on demand
//! ([`damaged_free_ranges`](TypePool::damaged_free_ranges)), and an empty
//! block is checked whole when it is released
//! ([`check_released_block`](TypePool::check_released_block)): a write
//! into memory that no allocation took again before its block went is
//! caught too.
//!
//! Non-coherent types are left out, as for margins (`corruption.rs`): a
//! fill there would need a flush, and a check an invalidate, of whole
//! atoms, which take in the neighbours' unflushed host writes. Dedicated
//! memory gets [`NEW`] when it is made, and nothing when it is freed: the
//! memory object goes away.

use ash::vk;

use super::{Location, Placement, TypePool};
use crate::memory::block::Block;
use crate::memory::context::MemoryContext;
use crate::memory::mapping::MappedPtr;

/// The byte freed memory holds: VMA's `VMA_ALLOCATION_FILL_PATTERN_DESTROYED`.
pub(crate) const FREED: u8 = 0xEF;

/// The byte a new allocation's memory holds: VMA's
/// `VMA_ALLOCATION_FILL_PATTERN_CREATED`.
pub(crate) const NEW: u8 = 0xDC;

/// Fills the `len` bytes from `mapped` with `byte` (a `memset`).
///
/// # Safety
/// The `len` bytes from `mapped` are mapped, writable, and belong to no
/// live allocation but one the caller has not handed out yet (or is
/// freeing): nobody else may access them meanwhile.
#[cold]
#[inline(never)]
pub(crate) unsafe fn fill(mapped: MappedPtr, len: u64, byte: u8) {
    // SAFETY: the caller's contract; `write_bytes` needs no alignment for
    // `u8`.
    unsafe { std::ptr::write_bytes(mapped.0.as_ptr(), byte, len as usize) };
}

/// The offset, from `start`, of the first of its `len` bytes that is not
/// `byte`; `None` when all are. The bytes are compared with themselves one
/// byte on (one `memcmp`: all are equal when each equals the one before,
/// and the first is `byte`): blocks are read whole when they are released,
/// and a byte-by-byte loop took most of the fake-device API walk's time in
/// unoptimised test builds. Plain reads, not volatile ones: the bytes are
/// free, so nobody writes them meanwhile but a bug (a GPU write racing the
/// check is the write after free looked for, seen or not).
///
/// # Safety
/// The `len` bytes from `start` are mapped and readable, and nobody
/// writes them while this runs: free memory, or an allocation not handed
/// out yet.
unsafe fn first_changed(start: *const u8, len: u64, byte: u8) -> Option<u64> {
    if len == 0 {
        return None;
    }
    // SAFETY: the caller's contract: `len` readable bytes, free memory
    // that no one writes while the slice lives (above).
    let bytes = unsafe { std::slice::from_raw_parts(start, len as usize) };
    if bytes[0] == byte && bytes[1..] == bytes[..bytes.len() - 1] {
        return None;
    }
    let at = bytes.iter().position(|&read| read != byte);
    at.map(|at| at as u64)
}

/// A free range, or a free run slot, of a block, in which something wrote
/// after it was freed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WrittenFree {
    /// Its block.
    pub(crate) memory: vk::DeviceMemory,
    /// Its offset in its block.
    pub(crate) offset: u64,
    /// Its size.
    pub(crate) size: u64,
    /// The offset in the block of its first byte that is not [`FREED`].
    pub(crate) first_changed: u64,
}

impl<M> TypePool<M> {
    /// Fills a new block, of `size` bytes mapped at `mapped`, with
    /// [`FREED`] when its memory type has debug fills. Out of line:
    /// `create_block` calls it for every block.
    #[cold]
    #[inline(never)]
    pub(super) fn fill_new_block<D>(
        &self,
        context: &MemoryContext<D>,
        mapped: Option<MappedPtr>,
        size: u64,
    ) {
        if let Some(mapped) = mapped.filter(|_| context.fills(self.memory_type)) {
            // SAFETY: the block was just made and mapped whole (`size`
            // bytes from `mapped`); it is in no pool's list yet, so no
            // allocation holds any of its bytes.
            unsafe { fill(mapped, size, FREED) };
        }
    }

    /// The debug work on `placement`, an allocation of `size` requested
    /// bytes just placed in a block of a memory type with corruption
    /// detection or debug fills, handed to nobody yet: the check and fill
    /// of its bytes ([`fill_placed`](Self::fill_placed)), whose line about
    /// a write after free it returns, then the pattern over its margin
    /// ([`guard_margin`](Self::guard_margin)).
    #[cold]
    #[inline(never)]
    pub(crate) fn on_placed<D>(
        &mut self,
        context: &MemoryContext<D>,
        placement: &Placement,
        size: u64,
    ) -> Option<String> {
        let line = if context.fills(self.memory_type) {
            self.fill_placed(context, placement, size)
        } else {
            None
        };
        if context.detects_corruption(self.memory_type) {
            self.guard_margin(placement, size, context.config.debug_margin);
        }
        line
    }

    /// Where the live allocation at `location` lies in its mapped block,
    /// and the bytes it holds there; `None` for dedicated memory, unmapped
    /// blocks and anything not live.
    fn held_span(&self, location: Location) -> Option<(MappedPtr, u64)> {
        match location {
            Location::Block { block, range } => {
                let block = self.blocks.get(block)?;
                let held = block.ranges.get(range)?;
                Some((block.mapped?.add(held.offset), held.size))
            }
            Location::Slot {
                run,
                slot,
                generation,
            } => {
                let run = self.runs.live(run, slot, generation)?;
                let start = run.mapped?.add(u64::from(slot) * run.slot_size);
                Some((start, run.slot_size))
            }
            Location::Dedicated(_) => None,
        }
    }

    /// For `placement`, an allocation of `size` requested bytes just
    /// placed in a block of a memory type with debug fills and handed to
    /// nobody yet: checks that the bytes it holds still read [`FREED`],
    /// then fills its `size` bytes with [`NEW`]. A byte written since
    /// those bytes were freed is counted in `context` and returned as the
    /// line for the caller to log with `log::error!` once the pool's lock
    /// is released.
    fn fill_placed<D>(
        &self,
        context: &MemoryContext<D>,
        placement: &Placement,
        size: u64,
    ) -> Option<String> {
        let (mapped, held) = self.held_span(placement.location)?;
        // SAFETY: the `held` bytes from `mapped` are the allocation's in
        // its persistently mapped block, which lives while the allocation
        // does; it is handed to nobody yet.
        let changed = unsafe { first_changed(mapped.0.as_ptr(), held, FREED) };
        // SAFETY: `size <= held` (the placed size covers the request), in
        // the same bytes; the allocation is handed to nobody yet.
        unsafe { fill(mapped, size.min(held), NEW) };
        let changed = changed?;
        context.count_corruption();
        Some(format!(
            "vk-suballoc: memory written after it was freed: byte {} of memory {:?} was changed before an allocation of {} bytes took it at offset {} (memory type {}, {} bytes held{})",
            placement.offset + changed,
            placement.memory,
            size,
            placement.offset,
            self.memory_type,
            held,
            self.pool_label()
        ))
    }

    /// Fills the bytes the live allocation at `location` holds in its
    /// block with [`FREED`], before its free ([`free`](Self::free)).
    ///
    /// # Safety
    /// The allocation is being freed: neither its owner nor the GPU uses
    /// it any more.
    pub(super) unsafe fn fill_freed(&self, location: Location) {
        if let Some((mapped, held)) = self.held_span(location) {
            // SAFETY: the allocation's bytes in its mapped block, which
            // nobody uses any more (the caller's contract).
            unsafe { fill(mapped, held, FREED) };
        }
    }

    /// Before the release of `block`, an empty block of a memory type with
    /// debug fills: checks that every byte of it still reads [`FREED`]. A
    /// byte written after it was freed, in memory that no allocation took
    /// again before its block went, is counted in `context` and returned
    /// as the line for the caller to log once the block is released.
    /// Blocks still holding allocations (leaked, at the allocator's drop)
    /// and unmapped ones are not checked.
    ///
    /// # Time complexity
    /// O(block size).
    #[cold]
    #[inline(never)]
    pub(super) fn check_released_block<D>(
        &self,
        context: &MemoryContext<D>,
        block: &Block<M>,
    ) -> Option<String> {
        let mapped = block.mapped?;
        if !block.ranges.is_empty() {
            return None;
        }
        // SAFETY: the block is mapped whole (`size` bytes from `mapped`)
        // until the caller releases it, and holds no allocation.
        let changed = unsafe { first_changed(mapped.0.as_ptr(), block.size, FREED) }?;
        context.count_corruption();
        Some(format!(
            "vk-suballoc: memory written after it was freed: byte {changed} of memory {:?} was changed before its empty block of {} bytes was released (memory type {}{})",
            block.raw,
            block.size,
            self.memory_type,
            self.pool_label()
        ))
    }

    /// Every free range and free run slot, in this pool's mapped blocks,
    /// in which a byte no longer reads [`FREED`]; and how many were
    /// checked. Only for pools of memory types with debug fills.
    ///
    /// # Time complexity
    /// O(free bytes in the pool's blocks).
    pub(crate) fn damaged_free_ranges(&self) -> (u64, Vec<WrittenFree>) {
        let mut checked = 0;
        let mut damaged = Vec::new();
        let mut check = |memory: vk::DeviceMemory, mapped: MappedPtr, offset: u64, size: u64| {
            checked += 1;
            // SAFETY: a free range (or slot) of a live, mapped block: `size`
            // bytes from `offset` are inside it, and no allocation holds
            // them.
            let changed = unsafe { first_changed(mapped.add(offset).0.as_ptr(), size, FREED) };
            if let Some(changed) = changed {
                damaged.push(WrittenFree {
                    memory,
                    offset,
                    size,
                    first_changed: offset + changed,
                });
            }
        };
        for (_, block) in self.blocks.iter() {
            let Some(mapped) = block.mapped else { continue };
            for free in block.ranges.free_ranges() {
                check(block.raw, mapped, free.offset, free.size);
            }
        }
        for (_, run) in self.runs.iter() {
            let Some(block) = self.blocks.get(run.block) else {
                continue;
            };
            let Some(mapped) = block.mapped else { continue };
            for (_, live, offset) in run.slots() {
                if !live {
                    check(block.raw, mapped, offset, run.slot_size);
                }
            }
        }
        (checked, damaged)
    }
}

#[cfg(test)]
mod tests {
    use super::first_changed;

    /// The first changed byte is found wherever it lies: in the unaligned
    /// head, in a word, in the tail; and none in an untouched range, of
    /// any length and alignment.
    #[test]
    fn the_first_changed_byte_is_found_anywhere() {
        let mut bytes = [0xEFu8; 80];
        for start in 0..9 {
            for len in 0..(80 - start) {
                // SAFETY: `start + len <= 80` bytes of the vector.
                let none = unsafe { first_changed(bytes.as_ptr().add(start), len as u64, 0xEF) };
                assert_eq!(none, None, "start {start}, len {len}");
                for at in 0..len {
                    bytes[start + at] = 0;
                    if at + 1 < len {
                        bytes[start + at + 1] = 0;
                    }
                    // SAFETY: as above.
                    let found =
                        unsafe { first_changed(bytes.as_ptr().add(start), len as u64, 0xEF) };
                    assert_eq!(found, Some(at as u64), "start {start}, len {len}, at {at}");
                    bytes.fill(0xEF);
                }
            }
        }
    }
}
