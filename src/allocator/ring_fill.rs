//! Debug fills in upload rings (`Config::debug_fill`): the ring space of a
//! chunk that no ring allocation holds reads `0xEF`, and a ring
//! allocation's bytes are checked to read it still when they are handed
//! out, then filled with `0xDC`, as the pools do for their blocks
//! (`memory/type_pool/debug_fill.rs`).
//!
//! A chunk is one allocation of its pool (filled `0xDC` by the pool when
//! the ring takes it); its ring space is filled with `0xEF` once it is
//! made ([`fill_new_chunk`](Allocator::fill_new_chunk)), and the space of
//! each frame again when the frame is reclaimed
//! ([`fill_reclaimed`](Allocator::fill_reclaimed)), where a reclaim waits
//! for the `ring_write`s copying into it (`ChunkPins`), so that no write
//! the engine may still make lands after the fill but one through a ring
//! allocation of a collected frame: the bug looked for. `ring_allocate`
//! checks the bytes it hands out ([`check_ring_allocation`](Allocator::check_ring_allocation)):
//! one that no longer reads `0xEF` was written after its frame was
//! collected, through a pointer kept from a stale ring allocation or by
//! the GPU, and is counted and logged as the pools' checks do.
//!
//! # Non-coherent rings
//!
//! Ring allocations are packed at their own alignment, not at
//! `nonCoherentAtomSize` (`UploadRingDesc::usage`), so an atom may hold
//! bytes of two ring allocations, or of one and of free space. A flush or
//! invalidate of such an atom would reach the live allocation's bytes: an
//! invalidate would drop the engine's writes there not yet flushed (a
//! write through `RingAllocation::mapped_ptr`), and a flush, made while a
//! `ring_write` on another thread copies into them, would have a driver
//! that flushes by copying (the fake device, drivers that emulate
//! non-coherent memory) read bytes being written. So the debug work syncs
//! only whole atoms that no live ring allocation holds a byte of: the
//! atoms of the free ring space (after a reclaim, all of it; at an
//! allocation, the new allocation's bytes and the free space after them)
//! that lie inside it entirely. That keeps one invariant: every atom
//! wholly inside a chunk's free ring space holds the same bytes in the
//! host's view and in the device's (the `0xEF` fills), but for a write
//! after free. A reclaim fills its space and flushes every atom it leaves
//! wholly free (those it touches; the others were wholly free already); an
//! allocation only takes atoms out of the free space; and `ring_write`'s
//! widened flushes carry the host's `0xEF` over to the device. So the check
//! of an allocation reads its bytes as the host sees them (a host write
//! after free, never flushed), invalidates the atoms over them that were
//! wholly free, and reads again (a GPU write after free), with no false
//! report; its `0xDC` fill is flushed over the same atoms. Bytes in an
//! atom shared with a live allocation (or running past the chunk's end)
//! are checked as the host sees them only, and their fills reach the GPU
//! with the next flush of that atom (`ring_write`, or a later reclaim).
//!
//! What this leaves open: the fills themselves write bytes (of the space
//! reclaimed, of the allocation handed out) that may share an atom with a
//! live ring allocation, with no turn taken (`ChunkPins::atoms`: taking it
//! would make `collect` and `ring_allocate` wait for a `ring_write`'s
//! copy). A `ring_write` into that live neighbour on another thread may
//! flush the shared atom meanwhile; a driver that flushes by copying
//! (the fake device) then reads bytes being filled, as it reads bytes
//! an engine writes through `RingAllocation::mapped_ptr` next to a
//! `ring_write`. The GPU's view of those bytes may keep its old value
//! until the atom is flushed again once it is wholly free, before any
//! invalidate of it: no false report follows. A real driver's flush is a
//! cache write-back, which such a write does not disturb.
//!
//! The work runs under the rings' lock, which orders it with the reclaims
//! and allocations of the same bytes, taking the lock of the chunk's pool
//! for each flush and invalidate (rings before pools, the allocator's lock
//! order). Lines to log are kept in a [`RingFill`] and logged once the
//! call has released its locks, and a panic of the backend (in a flush or
//! invalidate) or of a logger is caught and goes on once the call's work
//! is done ([`FirstPanic`]).

use std::ops::Range;
use std::panic::{self, AssertUnwindSafe};

use super::{lock, Allocator};
use crate::device::MemoryDeviceExt;
use crate::frames::upload_ring::{Reclaimed, RingChunk, RingState};
use crate::memory::first_panic::FirstPanic;
use crate::memory::type_pool::debug_fill::{fill, first_changed, FREED, NEW};
use crate::memory::type_pool::WrittenFree;
use crate::offset::LinearAllocation;

/// The debug work of a ring allocation: none ([`NoRingFill`]) or the
/// fills and checks ([`RingFill`]). `ring_allocate` is written once over
/// it, so that the path without debug fills carries none of it.
pub(super) trait RingDebug {
    /// Fills the space a reclaim gave back in `chunk`.
    fn reclaimed(&mut self, chunk: &RingChunk, space: Reclaimed);

    /// Checks and fills `placed`, just made in chunk `chunk` of `state`
    /// and handed to nobody yet.
    fn placed(&mut self, state: &RingState, chunk: usize, placed: &LinearAllocation);
}

/// No debug fills in any memory type.
pub(super) struct NoRingFill;

impl RingDebug for NoRingFill {
    #[inline(always)]
    fn reclaimed(&mut self, _: &RingChunk, _: Reclaimed) {}

    #[inline(always)]
    fn placed(&mut self, _: &RingState, _: usize, _: &LinearAllocation) {}
}

/// A line for the log, kept until the call's locks are released.
enum Line {
    /// A write after free (`log::error!`).
    Error(String),
    /// A flush or invalidate the driver failed (`log::warn!`).
    Warn(String),
}

/// The debug work of one call on upload rings: the lines it has to log
/// and the first panic it caught, both for [`finish`](Self::finish), once
/// the call has released its locks.
pub(super) struct RingFill<'a, D: MemoryDeviceExt<M>, M: Send> {
    allocator: &'a Allocator<D, M>,
    panics: FirstPanic,
    lines: Vec<Line>,
}

impl<'a, D: MemoryDeviceExt<M>, M: Send> RingFill<'a, D, M> {
    pub(super) fn new(allocator: &'a Allocator<D, M>) -> Self {
        Self {
            allocator,
            panics: FirstPanic::default(),
            lines: Vec::new(),
        }
    }

    /// Logs the lines, then goes on with the first panic caught, if any
    /// (a logger's own panic included: each line is logged all the same).
    /// Call it with no lock of the allocator held.
    pub(super) fn finish(self) {
        let Self {
            mut panics, lines, ..
        } = self;
        for line in lines {
            panics.run(|| match line {
                Line::Error(line) => log::error!("{line}"),
                Line::Warn(line) => log::warn!("{line}"),
            });
        }
        panics.resume();
    }
}

impl<D: MemoryDeviceExt<M>, M: Send> RingDebug for RingFill<'_, D, M> {
    fn reclaimed(&mut self, chunk: &RingChunk, space: Reclaimed) {
        let Self {
            allocator,
            panics,
            lines,
        } = self;
        panics.run(|| allocator.fill_reclaimed(chunk, space, lines));
    }

    fn placed(&mut self, state: &RingState, chunk: usize, placed: &LinearAllocation) {
        let Self {
            allocator,
            panics,
            lines,
        } = self;
        panics.run(|| allocator.check_ring_allocation(state, chunk, placed, lines));
    }
}

/// `len` bytes of a ring of `capacity` bytes from offset `start`, going
/// on from offset 0 when they pass its end: the part up to the end, and
/// the part from 0 (empty when they do not wrap).
fn wrapping(start: u64, len: u64, capacity: u64) -> [Range<u64>; 2] {
    let end = start + len;
    [start..end.min(capacity), 0..end.saturating_sub(capacity)]
}

/// The intersection of two ranges (empty, at `a.start` or later, when
/// they do not meet).
fn intersect(a: &Range<u64>, b: &Range<u64>) -> Range<u64> {
    let start = a.start.max(b.start);
    start..a.end.min(b.end).max(start)
}

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// The `nonCoherentAtomSize` atoms of `chunk`'s memory that lie
    /// wholly inside `range` (ring offsets), as ring offsets. Empty when
    /// none does.
    fn whole_atoms(&self, chunk: &RingChunk, range: Range<u64>) -> Range<u64> {
        let atom = self.context.properties.device.non_coherent_atom_size.max(1);
        let base = chunk.allocation.offset();
        let start = (base + range.start).next_multiple_of(atom);
        let end = ((base + range.end) / atom * atom).max(start);
        start - base..end - base
    }

    /// The atoms of `chunk`'s memory that hold a byte of `range` (ring
    /// offsets), as ring offsets, from the chunk's start at the earliest.
    fn atoms_over(&self, chunk: &RingChunk, range: Range<u64>) -> Range<u64> {
        let atom = self.context.properties.device.non_coherent_atom_size.max(1);
        let base = chunk.allocation.offset();
        let start = ((base + range.start) / atom * atom).max(base);
        let end = (base + range.end).next_multiple_of(atom);
        start - base..end - base
    }

    /// Flushes (`flush`) or invalidates `range` of `chunk`'s ring space,
    /// whole atoms ([`whole_atoms`](Self::whole_atoms)) that hold no live
    /// ring allocation's byte (the callers' contract: the module's docs).
    /// A failure is kept as a warning: the fills may then differ between
    /// the two views, and a later check may report a write after free
    /// that did not happen (the line says so).
    fn sync_ring_space(
        &self,
        chunk: &RingChunk,
        range: Range<u64>,
        flush: bool,
        lines: &mut Vec<Line>,
    ) {
        if range.is_empty() {
            return;
        }
        let Err(error) = self.flush_or_invalidate(&chunk.allocation, range.clone(), flush) else {
            return;
        };
        let call = if flush { "flush" } else { "invalidate" };
        lines.push(Line::Warn(format!(
            "vk-suballoc: debug fill: the {call} of bytes {range:?} of an upload ring's chunk (memory {:?} from offset {}) failed ({error}); its fill patterns may not match between host and device, and a later check may report a write after free that did not happen",
            chunk.allocation.memory(),
            chunk.allocation.offset(),
        )));
    }

    /// Fills the ring space of `chunk`, a new chunk of a memory type with
    /// debug fills, with `0xEF`, and in a non-coherent type flushes its
    /// whole atoms; then marks the chunk as filled. A backend panicking in
    /// the flush, or a logger on its failure, frees the chunk (made for
    /// nobody yet) before the panic goes on. No lock of the allocator is
    /// held.
    #[cold]
    #[inline(never)]
    pub(super) fn fill_new_chunk(&self, mut chunk: RingChunk) -> RingChunk {
        let filled = panic::catch_unwind(AssertUnwindSafe(|| {
            let Some(mapped) = chunk.allocation.mapped else {
                return;
            };
            let capacity = chunk.linear.capacity();
            // SAFETY: the ring space is the first `capacity` bytes of the
            // chunk's allocation (its buffer's size), persistently mapped
            // while the allocation lives, and the chunk is in no ring yet:
            // nobody else reads or writes them.
            unsafe { fill(mapped, capacity, FREED) };
            if self.context.is_non_coherent(chunk.allocation.memory_type()) {
                let mut lines = Vec::new();
                let atoms = self.whole_atoms(&chunk, 0..capacity);
                // Whole atoms of the chunk's own bytes, which no one uses.
                self.sync_ring_space(&chunk, atoms, true, &mut lines);
                for line in lines {
                    let (Line::Warn(line) | Line::Error(line)) = line;
                    log::warn!("{line}");
                }
            }
        }));
        if let Err(payload) = filled {
            self.discard_ring_chunk(chunk);
            panic::resume_unwind(payload);
        }
        chunk.fills = true;
        chunk
    }

    /// Fills the ring space a reclaim of `chunk` (a chunk with debug
    /// fills) gave back with `0xEF`, and in a non-coherent type flushes
    /// the atoms over it that the chunk's free space now holds wholly.
    /// Under the rings' lock.
    fn fill_reclaimed(&self, chunk: &RingChunk, space: Reclaimed, lines: &mut Vec<Line>) {
        let Some(mapped) = chunk.allocation.mapped else {
            return;
        };
        let capacity = chunk.linear.capacity();
        let pieces = wrapping(space.start, space.len, capacity);
        for piece in pieces.iter().filter(|piece| !piece.is_empty()) {
            // SAFETY: ring space of the chunk, inside its mapped allocation,
            // that a reclaim gave back: its frames are collected and no
            // `ring_write` copies into them (the reclaim found them
            // unpinned, and a pin is only taken on a live frame), so no ring
            // allocation may use these bytes any more; under the rings'
            // lock, so no new one takes them meanwhile.
            unsafe { fill(mapped.add(piece.start), piece.end - piece.start, FREED) };
        }
        if !self.context.is_non_coherent(chunk.allocation.memory_type()) {
            return;
        }
        // The chunk's free space now: it starts at the head.
        let free = capacity - chunk.linear.used();
        for free in wrapping(chunk.linear.head(), free, capacity) {
            let whole = self.whole_atoms(chunk, free.clone());
            for piece in &pieces {
                let touched = intersect(piece, &free);
                if touched.is_empty() {
                    continue;
                }
                let atoms = intersect(&whole, &self.atoms_over(chunk, touched));
                // Whole atoms of free space: no live ring allocation's byte.
                self.sync_ring_space(chunk, atoms, true, lines);
            }
        }
    }

    /// For `placed`, a ring allocation just made in chunk `index` of
    /// `state` and handed to nobody yet, in a chunk with debug fills:
    /// checks that its bytes still read `0xEF`, then fills them with
    /// `0xDC`. A byte written since its frame was reclaimed is counted in
    /// [`corruptions_detected`](Self::corruptions_detected) and kept as a
    /// line to log.
    ///
    /// In a non-coherent type the check reads the bytes as the host sees
    /// them, then invalidates the atoms over them that the free space held
    /// wholly before they were taken (the allocation's bytes and the free
    /// ones after it: the allocation ends at the chunk's head, where its
    /// free space starts) and reads them again, as the device holds them;
    /// the new fill is flushed over the same atoms.
    fn check_ring_allocation(
        &self,
        state: &RingState,
        index: usize,
        placed: &LinearAllocation,
        lines: &mut Vec<Line>,
    ) {
        let Some(chunk) = state.chunks.get(index).filter(|chunk| chunk.fills) else {
            return;
        };
        let Some(mapped) = chunk.allocation.mapped else {
            return;
        };
        let start = mapped.add(placed.offset);
        let end = placed.offset + placed.size;
        // SAFETY: the allocation's bytes, inside the chunk's mapped ring
        // space; handed to nobody yet, and no other ring allocation holds
        // them (the linear allocator's invariant).
        let mut changed = unsafe { first_changed(start.0.as_ptr(), placed.size, FREED) };
        let mut atoms = 0..0;
        if self.context.is_non_coherent(chunk.allocation.memory_type()) {
            let (head, capacity) = (chunk.linear.head(), chunk.linear.capacity());
            debug_assert_eq!(head, end, "a ring allocation ends at the head");
            let free_end = (head + (capacity - chunk.linear.used())).min(capacity);
            let unheld = self.whole_atoms(chunk, placed.offset..free_end.max(end));
            atoms = intersect(&unheld, &self.atoms_over(chunk, placed.offset..end));
            if !atoms.is_empty() {
                // Whole atoms of the allocation's bytes and free ones: no
                // live ring allocation's byte.
                self.sync_ring_space(chunk, atoms.clone(), false, lines);
                // SAFETY: as the first check.
                let device = unsafe { first_changed(start.0.as_ptr(), placed.size, FREED) };
                changed = changed.or(device);
            }
        }
        // SAFETY: as the first check.
        unsafe { fill(start, placed.size, NEW) };
        // The same atoms: the allocation's bytes, and free ones.
        self.sync_ring_space(chunk, atoms, true, lines);
        let Some(changed) = changed else {
            return;
        };
        self.context.count_corruption();
        let name = state
            .name
            .as_deref()
            .map(|name| format!(" \"{name}\""))
            .unwrap_or_default();
        lines.push(Line::Error(format!(
            "vk-suballoc: memory written after it was freed: byte {} of memory {:?} was changed before a ring allocation of {} bytes took it at offset {} (upload ring{name}, chunk {index}, ring offset {}, memory type {}): written through a ring allocation of a collected frame, or by the GPU",
            chunk.allocation.offset() + placed.offset + changed,
            chunk.allocation.memory(),
            placed.size,
            chunk.allocation.offset() + placed.offset,
            placed.offset,
            chunk.allocation.memory_type(),
        )));
    }

    /// The free ring space of every upload ring's chunks in the memory
    /// types of `types` that have debug fills, in which a byte no longer
    /// reads `0xEF`, with its memory type; and how many free spans were
    /// checked (one or two per chunk: the free space after the head, and
    /// its part from the ring's start when it wraps). For
    /// [`check_corruption`](Self::check_corruption). Space a collect gave
    /// back but a `ring_write` still holds (`ChunkPins`) is not free yet,
    /// and not checked.
    ///
    /// In a non-coherent type a span found clean as the host sees it is
    /// read again once its whole atoms are invalidated (they hold no live
    /// ring allocation's byte: the module's docs); its partial atoms, as the
    /// host sees them only. A failed invalidate is logged with
    /// `log::warn!` once the rings' lock is released.
    ///
    /// # Time complexity
    /// O(free ring bytes in those types), under the rings' lock; at most
    /// one invalidate per span in a non-coherent type.
    pub(super) fn damaged_ring_space(&self, types: u32) -> (u64, Vec<(u32, WrittenFree)>) {
        let mut checked = 0;
        let mut damaged = Vec::new();
        let mut lines = Vec::new();
        let rings = lock(&self.rings);
        let chunks = rings.rings.iter().flat_map(|(_, ring)| &ring.chunks);
        for chunk in chunks {
            let memory_type = chunk.allocation.memory_type();
            if !chunk.fills || types & 1u32.wrapping_shl(memory_type) == 0 {
                continue;
            }
            let Some(mapped) = chunk.allocation.mapped else {
                continue;
            };
            let non_coherent = self.context.is_non_coherent(memory_type);
            let base = chunk.allocation.offset();
            let capacity = chunk.linear.capacity();
            let free = capacity - chunk.linear.used();
            for span in wrapping(chunk.linear.head(), free, capacity) {
                if span.is_empty() {
                    continue;
                }
                checked += 1;
                // SAFETY: free ring space of the chunk, inside its mapped
                // allocation: no ring allocation holds it, and none takes it
                // while the rings' lock is held.
                let read = |range: Range<u64>| unsafe {
                    first_changed(
                        mapped.add(range.start).0.as_ptr(),
                        range.end - range.start,
                        FREED,
                    )
                    .map(|at| range.start + at)
                };
                let mut changed = read(span.clone());
                if non_coherent && changed.is_none() {
                    let whole = self.whole_atoms(chunk, span.clone());
                    if !whole.is_empty() {
                        // Whole atoms of free space: no live ring
                        // allocation's byte.
                        self.sync_ring_space(chunk, whole.clone(), false, &mut lines);
                        changed = read(whole);
                    }
                }
                if let Some(at) = changed {
                    let written = WrittenFree {
                        memory: chunk.allocation.memory(),
                        offset: base + span.start,
                        size: span.end - span.start,
                        first_changed: base + at,
                    };
                    damaged.push((memory_type, written));
                }
            }
        }
        drop(rings);
        for line in lines {
            let (Line::Warn(line) | Line::Error(line)) = line;
            log::warn!("{line}");
        }
        (checked, damaged)
    }
}
