//! Debug fills (`Config::debug_fill`, VMA's
//! `VMA_DEBUG_INITIALIZE_ALLOCATIONS`) and the writes after free they
//! reveal.
//!
//! In blocks of `HOST_VISIBLE` memory types (always persistently mapped,
//! `mapping.rs`), every byte no live allocation holds reads [`FREED`]: a
//! block is filled with it when it is made, and the bytes an allocation
//! holds in its block (its offset-allocator range, or its run slot:
//! [`held_span`](TypePool::held_span)) when it is freed. A new
//! allocation's requested bytes are filled with [`NEW`], so that a read of
//! memory never written stands out, as a read of freed memory does.
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
//! In non-coherent types the host and the GPU see the memory through two
//! views that only `vkFlushMappedMemoryRanges` (host to GPU) and
//! `vkInvalidateMappedMemoryRanges` (GPU to host) bring together, a whole
//! `nonCoherentAtomSize` atom at a time. Every fill is flushed (VMA does
//! the same), and every check reads the host's view, where a host write
//! after free waits unflushed, then invalidates and reads again, for a GPU
//! write after free. Both would be unsound if an atom were shared with a
//! live allocation: a flush would overwrite the GPU's writes to it that
//! its owner has not invalidated yet, an invalidate would drop its owner's
//! unflushed host writes. None is: in a non-coherent type every allocation
//! starts on an atom (`pool_request_padded` folds the atom into the
//! alignment; a run slot's size and its run's start are multiples of it,
//! `runs.rs`; ring chunks, custom pools' allocations and defragmentation
//! destinations are placed the same way), so the atoms over an
//! allocation's held bytes reach at most the free bytes up to the next
//! boundary, where the next allocation starts. Free ranges start where the
//! allocation before them ends. After a buffer or linear image that is an
//! atom boundary too (its size is rounded to its alignment, the atom
//! folded in, up to the 4 KiB of `MAX_TAIL_ROUNDING`; Vulkan's atoms are
//! 256 bytes at most); after an optimal image or a resource of unknown
//! kind, whose size is rounded to the `bufferImageGranularity` page
//! instead, it is not when that page is smaller than the atom. Free
//! ranges' checks invalidate only the whole atoms inside them, and read
//! the rest as the host sees it. A GPU write after free into that rest,
//! the free bytes in a live allocation's last atom, goes unseen: no check
//! may invalidate them while the allocation lives, and its free flushes
//! the host's [`FREED`] over them. The check of a new allocation reads
//! its last atom whole, free bytes past it included, and fills those
//! again when the GPU wrote there, so that the write is counted once.
//! Margins (`corruption.rs`) stay coherent-only: their check would have
//! to invalidate the live allocation's own last atom.
//!
//! Dedicated memory gets [`NEW`] when it is made (flushed in a
//! non-coherent type), and nothing when it is freed: the memory object
//! goes away. An upload ring's chunk is one allocation here; the ring
//! allocations inside it are filled and checked by the rings
//! (`allocator/ring_fill.rs`).
//!
//! This file holds the patterns, the byte-level fill and scan the rings
//! share, and the fills and checks along an allocation's and a block's
//! life; `non_coherent_sync` flushes and invalidates them in non-coherent
//! types, and `free_memory_check` checks all free memory on demand.

use std::backtrace::Backtrace;
use std::ops::Range;
use std::sync::Arc;

use super::allocation_log::log_allocation;
use super::{Location, Placement, TypePool};
use crate::device::MemoryDeviceExt;
use crate::memory::block::Block;
use crate::memory::context::MemoryContext;
use crate::memory::mapping::{atom_range, MappedPtr};

mod free_memory_check;
mod non_coherent_sync;
#[cfg(test)]
mod tests;

pub(crate) use free_memory_check::WrittenFree;
use non_coherent_sync::sync;

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
    for piece in pieces(len, PIECE) {
        // SAFETY: the caller's contract (the piece lies in the `len`
        // bytes); `write_bytes` needs no alignment for `u8`, and the
        // piece's length fits `usize` and `isize` (`PIECE`).
        unsafe {
            let at = mapped.add(piece.start).0.as_ptr();
            std::ptr::write_bytes(at, byte, (piece.end - piece.start) as usize);
        }
    }
}

/// The most bytes [`fill`] and [`first_changed`] touch through one
/// pointer range or slice: 1 GiB. A slice spans at most `isize::MAX`
/// bytes (`slice::from_raw_parts`), and a 32-bit host may map a block of
/// more than 2 GiB whole, so a block is filled and read in pieces no
/// larger than this, which every host's `isize` holds.
const PIECE: u64 = 1 << 30;

/// `0..len` cut into consecutive non-empty ranges of at most `piece`
/// bytes, in order (none when `len` is 0).
fn pieces(len: u64, piece: u64) -> impl Iterator<Item = Range<u64>> {
    (0..len.div_ceil(piece)).map(move |i| {
        let start = i * piece;
        start..start + (len - start).min(piece)
    })
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
pub(crate) unsafe fn first_changed(start: *const u8, len: u64, byte: u8) -> Option<u64> {
    // SAFETY: the caller's contract.
    unsafe { first_changed_in_pieces(start, len, byte, PIECE) }
}

/// [`first_changed`], reading the bytes as slices of at most `piece`
/// bytes (`PIECE`; smaller in the unit tests, to cross piece ends).
///
/// # Safety
/// As [`first_changed`]'s; `piece` is at most `isize::MAX`.
unsafe fn first_changed_in_pieces(start: *const u8, len: u64, byte: u8, piece: u64) -> Option<u64> {
    pieces(len, piece).find_map(|range| {
        // SAFETY: the caller's contract: the piece's bytes are among the
        // `len` readable ones, free memory that no one writes while the
        // slice lives (above); its length fits `usize` and `isize`.
        let bytes = unsafe {
            let at = start.wrapping_add(range.start as usize);
            std::slice::from_raw_parts(at, (range.end - range.start) as usize)
        };
        if bytes[0] == byte && bytes[1..] == bytes[..bytes.len() - 1] {
            return None;
        }
        let at = bytes.iter().position(|&read| read != byte)?;
        Some(range.start + at as u64)
    })
}

/// Where the bytes a live allocation holds lie: its memory object, the
/// object's size and mapping, and the held bytes' offset and size in it.
struct HeldSpan<'p, M> {
    memory: &'p M,
    memory_size: u64,
    mapped: MappedPtr,
    offset: u64,
    held: u64,
}

/// The whole atoms of `atom` bytes inside `range`: a range's partial
/// atoms at either end are left out, but for a last one that ends at
/// `open_end`, past which the atom's bytes are nobody's (the end of a
/// memory object, where a flush or invalidate may end; or of an upload
/// ring's space, whose chunk holds the rest of that atom). Empty when no
/// whole atom lies inside.
pub(crate) fn whole_atoms(range: Range<u64>, atom: u64, open_end: u64) -> Range<u64> {
    let atom = atom.max(1);
    let start = range.start.next_multiple_of(atom);
    let end = if range.end == open_end {
        range.end
    } else {
        range.end / atom * atom
    };
    start..end.max(start)
}

impl<M> TypePool<M> {
    /// Fills a new block, `memory` of `size` bytes mapped at `mapped`,
    /// with [`FREED`] when its memory type has debug fills, and flushes it
    /// whole in a non-coherent type. Out of line: `create_block` calls it
    /// for every block once some memory type has debug fills.
    #[cold]
    #[inline(never)]
    pub(super) fn fill_new_block<D: MemoryDeviceExt<M>>(
        &self,
        context: &MemoryContext<D>,
        memory: &M,
        mapped: Option<MappedPtr>,
        size: u64,
    ) {
        let Some(mapped) = mapped.filter(|_| context.fills(self.memory_type)) else {
            return;
        };
        // SAFETY: the block was just made and mapped whole (`size` bytes
        // from `mapped`), and added to this pool empty: no allocation holds
        // any of its bytes, and the caller holds the pool (`create_block`,
        // under its lock or with exclusive access), so none is placed
        // there meanwhile.
        unsafe { fill(mapped, size, FREED) };
        if context.is_non_coherent(self.memory_type) {
            // SAFETY: as above: the whole block, which no allocation holds
            // and no GPU work uses yet; the pool is held.
            unsafe { sync(context, memory, size, 0..size, true) };
        }
    }

    /// The debug work on `placement`, an allocation of `size` requested
    /// bytes just placed in a block (or dedicated memory) of a memory type
    /// with corruption detection, debug fills or backtraces, handed to
    /// nobody yet: `backtrace`, the call's, when backtraces are recorded
    /// ([`record_backtrace`](Self::record_backtrace)), its line in the log
    /// (`Config::log_allocations`, `allocation_log.rs`), the check and fill
    /// of its bytes ([`fill_placed`](Self::fill_placed)), whose line about
    /// a write after free it returns, then the pattern over its margin
    /// ([`guard_margin`](Self::guard_margin)).
    #[cold]
    #[inline(never)]
    pub(crate) fn on_placed<D: MemoryDeviceExt<M>>(
        &mut self,
        context: &MemoryContext<D>,
        placement: &Placement,
        size: u64,
        backtrace: Option<Arc<Backtrace>>,
    ) -> Option<String> {
        self.record_backtrace(placement.location, backtrace);
        if context.logs_allocations() {
            log_allocation(self.allocation_line("made", placement.location, size));
        }
        if let Location::Dedicated(_) = placement.location {
            if context.fills(self.memory_type) {
                self.fill_dedicated(context, placement.location, size);
            }
            return None;
        }
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

    /// Fills the `size` bytes of the new dedicated memory at `location`
    /// with [`NEW`], and flushes them in a non-coherent type.
    fn fill_dedicated<D: MemoryDeviceExt<M>>(
        &self,
        context: &MemoryContext<D>,
        location: Location,
        size: u64,
    ) {
        let Location::Dedicated(key) = location else {
            return;
        };
        let Some(dedicated) = self.dedicated.get(key) else {
            return;
        };
        let Some(mapped) = dedicated.mapped else {
            return;
        };
        let size = size.min(dedicated.size);
        // SAFETY: the allocation's bytes of its dedicated memory, mapped
        // whole while it lives; it is handed to nobody yet.
        unsafe { fill(mapped, size, NEW) };
        if context.is_non_coherent(self.memory_type) {
            // SAFETY: the memory is the new allocation's own, handed to
            // nobody yet; under the pool's lock.
            unsafe { sync(context, &dedicated.memory, dedicated.size, 0..size, true) };
        }
    }

    /// Where the live allocation at `location` lies in its mapped block,
    /// and the bytes it holds there; `None` for dedicated memory, unmapped
    /// blocks and anything not live.
    fn held_span(&self, location: Location) -> Option<HeldSpan<'_, M>> {
        let (block, offset, held) = self.held_in_block(location)?;
        Some(HeldSpan {
            memory: &block.memory,
            memory_size: block.size,
            mapped: block.mapped?,
            offset,
            held,
        })
    }

    /// For `placement`, an allocation of `size` requested bytes just
    /// placed in a block of a memory type with debug fills and handed to
    /// nobody yet: checks that the bytes it holds still read [`FREED`],
    /// then fills its `size` bytes with [`NEW`]. A byte written since
    /// those bytes were freed is counted in `context` and returned as the
    /// line for the caller to log with `log::error!` once the pool's lock
    /// is released.
    ///
    /// In a non-coherent type the bytes checked are the held ones widened
    /// to whole atoms, first as the host sees them (a host write after
    /// free, unflushed), then, once invalidated, as the device holds them
    /// (a GPU write after free); the new fill is flushed. The widened
    /// range holds no live allocation's byte, so the invalidate drops
    /// nobody's unflushed writes: the held bytes start on an atom (every
    /// allocation in a non-coherent type is aligned to `nonCoherentAtomSize`,
    /// `pool_request_padded`, run slots included: `runs.rs`), and the bytes
    /// past their end up to the next atom boundary are free, since the next
    /// allocation starts on a boundary too.
    fn fill_placed<D: MemoryDeviceExt<M>>(
        &self,
        context: &MemoryContext<D>,
        placement: &Placement,
        size: u64,
    ) -> Option<String> {
        let span = self.held_span(placement.location)?;
        let changed = self.first_written(context, &span);
        let start = span.mapped.add(span.offset);
        // SAFETY: `size <= held` (the placed size covers the request), in
        // the allocation's bytes of its persistently mapped block; it is
        // handed to nobody yet.
        unsafe { fill(start, size.min(span.held), NEW) };
        if self.syncs_span(context, &span) {
            let range = span.offset..span.offset + size.min(span.held);
            // SAFETY: the allocation's bytes, handed to nobody yet, and
            // free ones up to the atom boundary (above).
            unsafe { sync(context, span.memory, span.memory_size, range, true) };
        }
        let changed = changed?;
        context.count_corruption();
        Some(format!(
            "vk-suballoc: memory written after it was freed: byte {} of memory {:?} was changed before an allocation of {} bytes took it at offset {} (memory type {}, {} bytes held{})",
            placement.offset + changed,
            placement.memory,
            size,
            placement.offset,
            self.memory_type,
            span.held,
            self.pool_label()
        ))
    }

    /// The offset, from its start, of the first byte of `span` (a live
    /// allocation handed to nobody yet) that no longer reads [`FREED`]:
    /// the check of [`fill_placed`](Self::fill_placed). In a non-coherent
    /// type the bytes checked are the held ones widened to whole atoms
    /// (free bytes past them), first as the host sees them, then, once
    /// invalidated, as the device holds them; a GPU write found in those
    /// free bytes is filled over and flushed
    /// ([`refill_past_held`](Self::refill_past_held)), so that this check
    /// alone counts it.
    fn first_written<D: MemoryDeviceExt<M>>(
        &self,
        context: &MemoryContext<D>,
        span: &HeldSpan<'_, M>,
    ) -> Option<u64> {
        let non_coherent = self.syncs_span(context, span);
        let checked = if non_coherent {
            let atom = context.properties.device.non_coherent_atom_size;
            let widened = atom_range(span.offset..span.offset + span.held, atom, span.memory_size);
            widened.end - span.offset
        } else {
            span.held
        };
        let start = span.mapped.add(span.offset);
        // SAFETY: the `checked` bytes from `start` are the allocation's in
        // its persistently mapped block, which lives while the allocation
        // does, and the free bytes after them up to the atom boundary; the
        // allocation is handed to nobody yet, and nobody holds the free
        // bytes.
        let changed = unsafe { first_changed(start.0.as_ptr(), checked, FREED) };
        if !non_coherent {
            return changed;
        }
        let range = span.offset..span.offset + checked;
        // SAFETY: atom-aligned already; the allocation's bytes, handed to
        // nobody yet, and free bytes (above); under the pool's lock.
        unsafe { sync(context, span.memory, span.memory_size, range, false) };
        // SAFETY: as the first check.
        let device = unsafe { first_changed(start.0.as_ptr(), checked, FREED) };
        if checked > span.held {
            self.refill_past_held(context, span, checked);
        }
        changed.or(device)
    }

    /// After [`first_written`](Self::first_written) read and invalidated
    /// the `checked` bytes of `span`, more than it holds (its last atom
    /// reaches past them: atoms larger than `MAX_TAIL_ROUNDING`): fills
    /// the free bytes past the held ones with [`FREED`] again, and
    /// flushes them, when a GPU write after free left a changed byte
    /// there. This check counts it; left in both views (the invalidate
    /// brought it into the host's), it was reported again in the free
    /// range after the allocation and counted again by the next check
    /// that read it. A host write there needs nothing: the invalidate
    /// dropped it.
    fn refill_past_held<D: MemoryDeviceExt<M>>(
        &self,
        context: &MemoryContext<D>,
        span: &HeldSpan<'_, M>,
        checked: u64,
    ) {
        let past = span.offset + span.held;
        let len = checked - span.held;
        let start = span.mapped.add(past);
        // SAFETY: free bytes up to the atom boundary, after the
        // allocation's in its mapped block (`first_written`).
        if unsafe { first_changed(start.0.as_ptr(), len, FREED) }.is_none() {
            return;
        }
        // SAFETY: as above; nobody holds them.
        unsafe { fill(start, len, FREED) };
        // SAFETY: the free bytes, and the allocation's own in the same
        // atom, handed to nobody yet and just invalidated (both views
        // agree there); under the pool's lock.
        unsafe {
            sync(
                context,
                span.memory,
                span.memory_size,
                past..past + len,
                true,
            )
        };
    }

    /// Before a defragmentation plan undoes `placement`, a destination it
    /// placed and then gave up in the same call, under the pool's lock,
    /// because its source block's other allocations did not all fit
    /// (`plan_defragmentation`): checks, as [`fill_placed`](Self::fill_placed)
    /// does, that the bytes it holds still read [`FREED`]. It was handed to
    /// nobody, nor checked or filled, so nothing wrote there since those
    /// bytes were freed but a write after free: counted in `context` and
    /// returned as the line to log once the pool's lock is released. Its
    /// free then fills them again, which without this check erased the
    /// write unseen.
    ///
    /// A destination handed out with the plan is another matter: it was
    /// checked as it was placed, and the engine's copy may have written
    /// it before the move is given up ([`give_up_move`](crate::Allocator::give_up_move)),
    /// so its free fills it unchecked.
    #[cold]
    #[inline(never)]
    pub(super) fn check_undone<D: MemoryDeviceExt<M>>(
        &self,
        context: &MemoryContext<D>,
        placement: &Placement,
    ) -> Option<String> {
        let span = self.held_span(placement.location)?;
        let changed = self.first_written(context, &span)?;
        context.count_corruption();
        Some(format!(
            "vk-suballoc: memory written after it was freed: byte {} of memory {:?} was changed before a defragmentation plan placed a move there, at offset {}, and gave it up (memory type {}, {} bytes held{})",
            placement.offset + changed,
            placement.memory,
            placement.offset,
            self.memory_type,
            span.held,
            self.pool_label()
        ))
    }

    /// Fills the bytes the live allocation at `location` holds in its
    /// block with [`FREED`], before its free ([`free`](Self::free)); in a
    /// non-coherent type, flushes them, widened to whole atoms (the bytes
    /// past their end up to the atom boundary are free: see
    /// [`fill_placed`](Self::fill_placed)).
    ///
    /// # Safety
    /// The allocation is being freed: neither its owner nor the GPU uses
    /// it any more.
    pub(super) unsafe fn fill_freed<D: MemoryDeviceExt<M>>(
        &self,
        context: &MemoryContext<D>,
        location: Location,
    ) {
        let Some(span) = self.held_span(location) else {
            return;
        };
        // SAFETY: the allocation's bytes in its mapped block, which nobody
        // uses any more (the caller's contract).
        unsafe { fill(span.mapped.add(span.offset), span.held, FREED) };
        if self.syncs_span(context, &span) {
            let range = span.offset..span.offset + span.held;
            // SAFETY: the allocation's bytes, which nobody uses any more,
            // and free ones; under the pool's lock.
            unsafe { sync(context, span.memory, span.memory_size, range, true) };
        }
    }

    /// Before the release of `block`, an empty block of a memory type with
    /// debug fills: checks that every byte of it still reads [`FREED`]
    /// (in a non-coherent type, as the host sees it, then, once the whole
    /// block is invalidated, as the device holds it). A byte written after
    /// it was freed, in memory that no allocation took again before its
    /// block went, is counted in `context` and returned as the line for
    /// the caller to log once the block is released. Blocks still holding
    /// allocations (leaked, at the allocator's drop) and unmapped ones are
    /// not checked.
    ///
    /// # Time complexity
    /// O(block size).
    #[cold]
    #[inline(never)]
    pub(super) fn check_released_block<D: MemoryDeviceExt<M>>(
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
        let mut changed = unsafe { first_changed(mapped.0.as_ptr(), block.size, FREED) };
        if changed.is_none() && context.is_non_coherent(self.memory_type) {
            // SAFETY: the block holds no allocation (above); it is out of
            // the pool's lists, under its lock.
            unsafe { sync(context, &block.memory, block.size, 0..block.size, false) };
            // SAFETY: as above.
            changed = unsafe { first_changed(mapped.0.as_ptr(), block.size, FREED) };
        }
        let changed = changed?;
        context.count_corruption();
        Some(format!(
            "vk-suballoc: memory written after it was freed: byte {changed} of memory {:?} was changed before its empty block of {} bytes was released (memory type {}{})",
            block.raw,
            block.size,
            self.memory_type,
            self.pool_label()
        ))
    }
}
