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
//! checks the bytes it takes out of the free space ([`check_ring_allocation`](Allocator::check_ring_allocation)):
//! its own, and those from the old head up to them, its alignment
//! padding or the end of the ring it skips to wrap to its start (they are
//! its frame's until the frame is reclaimed, and stay `0xEF`). One that no
//! longer reads `0xEF` was written after its frame was collected, through
//! a pointer kept from a stale ring allocation or by the GPU, and is
//! counted and logged as the pools' checks do.
//!
//! Free ring space is checked twice more. When a chunk leaves its ring
//! (`destroy_upload_ring`, the allocator's drop), its free space then is
//! kept (`RetiredFree`) and checked as the chunk is freed, once its
//! frames are collected and no `ring_write` copies into it
//! ([`check_retired_chunk`](Allocator::check_retired_chunk)): its pool
//! refills the chunk's bytes with `0xEF` unchecked, as it does any
//! allocation's, which would erase a write there that no ring allocation
//! took again. A destroyed ring's chunk keeps its reclaim state
//! (`Rings::leaving`) until it is freed: its frames in flight when the
//! ring went are reclaimed as they are collected, their space filled as a
//! live ring's, and the check at the free covers its free space then (the
//! whole ring but the frame the ring went in, never sealed, and the
//! frames a `ring_write` held: they may hold the engine's data). At the
//! allocator's drop, a live ring's frames in flight are not collected,
//! and their space is not checked. And `check_corruption` reads every
//! live ring's free space and the free space of the destroyed rings'
//! chunks not freed yet
//! ([`damaged_ring_space`](Allocator::damaged_ring_space)). Both reads
//! share [`first_written_free`](Allocator::first_written_free).
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
//! allocation, the free space before it, from the old head: its padding
//! or skipped end, its own bytes and the free space after them) that lie
//! inside it entirely (the ring's last atom lies inside free space that
//! runs to the ring's end: its bytes past that end are the chunk's own,
//! [`whole_atoms`](Allocator::whole_atoms)). That keeps one invariant:
//! every atom wholly inside a chunk's free ring space holds the same
//! bytes in the host's view and in the device's (the `0xEF` fills), but
//! for a write after free. A reclaim fills its space and flushes every
//! atom it leaves wholly free (those it touches; the others were wholly
//! free already); an allocation only takes atoms out of the free space;
//! and `ring_write`'s widened flushes carry the host's `0xEF` over to the
//! device. So the check of an allocation reads the bytes it takes, and
//! the free bytes beside them in the atoms over them that were wholly
//! free, as the host sees them (a host write after free, never flushed,
//! which the invalidate would drop), invalidates those atoms, and reads
//! again (a GPU write after free), with no false report; its `0xDC` fill,
//! and `0xEF` again in the free bytes beside it (a write found there is
//! counted once, not again by the next check), is flushed over the same
//! atoms. A chunk that left its ring is checked so as it
//! is freed, over its free space then: no ring allocation lives in it
//! any more, and the invariant holds there (the reclaims of its frames
//! collected since it left fill and flush as a live ring's). Bytes in
//! an atom shared with a live allocation are checked as the host sees
//! them only, and their fills reach the GPU with the next flush of that
//! atom (`ring_write`, or a later reclaim). So a GPU write after free into
//! such bytes goes unseen: until that flush the device's copy of them is
//! not the fill but what they held before (an invalidate there would read
//! it as a write after free, and drop the live allocation's unflushed
//! host writes), and the flush overwrites it with the host's `0xEF`. A
//! GPU write into atoms wholly free is seen, and so is a host write
//! anywhere in the free space (the walk
//! `ring_fill::every_write_after_free_in_a_long_ring_workload_is_found_once`
//! checks both, and that each is counted once).
//!
//! The fills themselves write bytes (of the space reclaimed, of the
//! allocation handed out) that may share an atom with a live ring
//! allocation, whose `ring_write` on another thread may flush that atom
//! meanwhile; a driver that flushes by copying the host's bytes of the
//! atom (the fake device, drivers that emulate non-coherent memory) would
//! read bytes being filled, a data race. So in a non-coherent type those
//! fills are made under the lock of the chunk's pool, which every flush
//! of the chunk's memory holds ([`fill_beside_live`](Allocator::fill_beside_live)),
//! not under the chunk's turn (`ChunkPins::atoms`: taking it would make
//! `collect` and `ring_allocate` wait for a `ring_write`'s copy). The
//! GPU's view of those bytes may keep its old value until the atom is
//! flushed again once it is wholly free, before any invalidate of it: no
//! false report follows. (Bytes an engine writes through
//! `RingAllocation::mapped_ptr`, a raw pointer, are the engine's to keep
//! apart from its `ring_write`s.)
//!
//! The work runs under the rings' lock, which orders it with the reclaims
//! and allocations of the same bytes, taking the lock of the chunk's pool
//! for each flush and invalidate (rings before pools, the allocator's lock
//! order); the check of a chunk as it is freed runs with no lock held
//! but `collect`'s `releasing`. Lines to log are kept in a [`RingFill`]
//! and logged once the call has released its locks (those of
//! `check_corruption` and of a chunk's free go through `deferred_log`,
//! which those calls run inside), and a panic of the backend (in a flush
//! or invalidate) or of a logger is caught and goes on once the call's
//! work is done ([`FirstPanic`]).
//!
//! The checks of free ring space off the allocation path, as a chunk
//! that left its ring is freed and in `check_corruption`, are in
//! `ring_fill/free_space_checks.rs`.

use std::ops::Range;
use std::panic::{self, AssertUnwindSafe};

use super::place::MAX_TAIL_ROUNDING;
use super::Allocator;
use crate::device::MemoryDeviceExt;
use crate::frames::upload_ring::{wrapping, Reclaimed, RingChunk, RingState};
use crate::memory::deferred_log::Kept;
use crate::memory::first_panic::FirstPanic;
use crate::memory::mapping::MappedPtr;
use crate::memory::type_pool::debug_fill::{fill, first_changed, whole_atoms, FREED, NEW};
use crate::offset::LinearAllocation;
use crate::Allocation;

mod free_space_checks;

/// The debug work of a ring allocation: none ([`NoRingFill`]) or the
/// fills and checks ([`RingFill`]). `ring_allocate` is written once over
/// it, so that the path without debug fills carries none of it.
pub(super) trait RingDebug {
    /// Fills the space a reclaim gave back in `chunk`.
    fn reclaimed(&mut self, chunk: &RingChunk, space: Reclaimed);

    /// Checks and fills `placed`, just made in chunk `chunk` of `state`
    /// and handed to nobody yet, whose head was at `from` before it.
    fn placed(&mut self, state: &RingState, chunk: usize, placed: &LinearAllocation, from: u64);
}

/// No debug fills in any memory type.
pub(super) struct NoRingFill;

impl RingDebug for NoRingFill {
    #[inline(always)]
    fn reclaimed(&mut self, _: &RingChunk, _: Reclaimed) {}

    #[inline(always)]
    fn placed(&mut self, _: &RingState, _: usize, _: &LinearAllocation, _: u64) {}
}

/// The debug work of one call on upload rings: the lines it has to log
/// and the first panic it caught, both for [`finish`](Self::finish), once
/// the call has released its locks.
pub(super) struct RingFill<'a, D: MemoryDeviceExt<M>, M: Send> {
    allocator: &'a Allocator<D, M>,
    panics: FirstPanic,
    lines: Kept,
}

impl<'a, D: MemoryDeviceExt<M>, M: Send> RingFill<'a, D, M> {
    pub(super) fn new(allocator: &'a Allocator<D, M>) -> Self {
        Self {
            allocator,
            panics: FirstPanic::default(),
            lines: Kept::default(),
        }
    }

    /// Logs the lines, then goes on with the first panic caught, if any
    /// (a logger's own panic included: each line is logged all the same).
    /// Call it with no lock of the allocator held.
    pub(super) fn finish(self) {
        let Self {
            mut panics, lines, ..
        } = self;
        panics.run(|| lines.log());
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

    fn placed(&mut self, state: &RingState, chunk: usize, placed: &LinearAllocation, from: u64) {
        let Self {
            allocator,
            panics,
            lines,
        } = self;
        panics.run(|| allocator.check_ring_allocation(state, chunk, placed, from, lines));
    }
}

/// The intersection of two ranges (empty, at `a.start` or later, when
/// they do not meet).
fn intersect(a: &Range<u64>, b: &Range<u64>) -> Range<u64> {
    let start = a.start.max(b.start);
    start..a.end.min(b.end).max(start)
}

impl<D: MemoryDeviceExt<M>, M: Send> Allocator<D, M> {
    /// The `nonCoherentAtomSize` atoms of the memory of `chunk` (a ring
    /// chunk's allocation, of `capacity` bytes of ring space) that lie
    /// wholly inside `range` (ring offsets), as ring offsets. Empty when
    /// none does.
    ///
    /// The ring's last atom counts as whole inside a `range` that runs to
    /// the ring's end (the range then ends there, off an atom, and the
    /// sync widens it to the atom's end or the memory's): its bytes past
    /// the ring's end are the chunk's own, which no ring allocation holds.
    /// They are no other allocation's either: a chunk in a non-coherent
    /// type starts on an atom, and takes its block's bytes up to its
    /// alignment, the atom at least (`pool_request_padded`; Vulkan's atom
    /// is at most 256 bytes, under the 4 KiB that rounding stops at), or a
    /// run slot whose size is a multiple of it; `ring_write`'s widened
    /// flushes reach them too. Without it, the last partial atom of a
    /// ring whose size is not a multiple of the atom would never be
    /// synced: a GPU write after free there would go unseen, and the GPU
    /// would read there what a `ring_write` flushed last, not the fills.
    ///
    /// An atom past those 4 KiB (no conforming device's) may end past a
    /// block chunk's bytes, in the block's free bytes, where an invalidate
    /// would drop a host write after free before the pool's check finds
    /// it: there a ring's last partial atom is left out, read as the host
    /// sees it only, as the pools read a free range that starts inside an
    /// atom.
    fn whole_atoms(&self, chunk: &Allocation, range: Range<u64>, capacity: u64) -> Range<u64> {
        let atom = self.context.properties.device.non_coherent_atom_size;
        let base = chunk.offset();
        let open_end = if atom <= MAX_TAIL_ROUNDING {
            base + capacity
        } else {
            u64::MAX
        };
        let whole = whole_atoms(base + range.start..base + range.end, atom, open_end);
        whole.start - base..whole.end - base
    }

    /// The atoms of `chunk`'s memory that hold a byte of `range` (ring
    /// offsets), as ring offsets, from the chunk's start at the earliest.
    fn atoms_over(&self, chunk: &Allocation, range: Range<u64>) -> Range<u64> {
        let atom = self.context.properties.device.non_coherent_atom_size.max(1);
        let base = chunk.offset();
        let start = ((base + range.start) / atom * atom).max(base);
        let end = (base + range.end).next_multiple_of(atom);
        start - base..end - base
    }

    /// Fills the `len` bytes from `at` of `chunk`'s mapped ring space with
    /// `byte`: bytes that may share a `nonCoherentAtomSize` atom with a
    /// live ring allocation. In a non-coherent type, under the lock of the
    /// chunk's pool, which a [`ring_write`](Self::ring_write) into that
    /// neighbour holds over its flush (`Allocator::flush`): a driver that
    /// flushes by copying the host's bytes of the atom (the fake device,
    /// drivers that emulate non-coherent memory) must not read them while
    /// they are written, a data race. (A write's copy touches only its own
    /// allocation's bytes, never these.)
    ///
    /// # Safety
    /// As [`fill`]'s, but for such a flush: the bytes lie in the chunk's
    /// mapped ring space, and no ring allocation handed out holds them.
    unsafe fn fill_beside_live(&self, chunk: &Allocation, at: MappedPtr, len: u64, byte: u8) {
        if !self.context.is_non_coherent(chunk.memory_type()) {
            // SAFETY: the caller's contract; coherent memory is not flushed.
            unsafe { fill(at, len, byte) };
            return;
        }
        // SAFETY: the caller's contract; the flushes that read the atoms
        // the bytes share with live allocations take the pool's lock.
        let filled = self.with_pool(chunk, |_| unsafe { fill(at, len, byte) });
        if filled.is_err() {
            // No pool to lock (a ring chunk comes from its type's default
            // pool, which always is): nothing else flushes the bytes.
            // SAFETY: the caller's contract.
            unsafe { fill(at, len, byte) };
        }
    }

    /// Flushes (`flush`) or invalidates `range` of `chunk`'s ring space,
    /// whole atoms ([`whole_atoms`](Self::whole_atoms)) that hold no live
    /// ring allocation's byte (the callers' contract: the module's docs).
    /// A failure is kept as a warning: the fills may then differ between
    /// the two views, and a later check may report a write after free
    /// that did not happen (the line says so).
    fn sync_ring_space(
        &self,
        chunk: &Allocation,
        range: Range<u64>,
        flush: bool,
        lines: &mut Kept,
    ) {
        if range.is_empty() {
            return;
        }
        let Err(error) = self.flush_or_invalidate(chunk, range.clone(), flush) else {
            return;
        };
        let call = if flush { "flush" } else { "invalidate" };
        lines.push(log::Level::Warn, format!(
            "vk-suballoc: debug fill: the {call} of bytes {range:?} of an upload ring's chunk (memory {:?} from offset {}) failed ({error}); its fill patterns may not match between host and device, and a later check may report a write after free that did not happen",
            chunk.memory(),
            chunk.offset(),
        ));
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
                let mut lines = Kept::default();
                let atoms = self.whole_atoms(&chunk.allocation, 0..capacity, capacity);
                // Whole atoms of the chunk's own bytes, which no one uses.
                self.sync_ring_space(&chunk.allocation, atoms, true, &mut lines);
                lines.log();
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
    fn fill_reclaimed(&self, chunk: &RingChunk, space: Reclaimed, lines: &mut Kept) {
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
            // lock, so no new one takes them meanwhile. Its first and last
            // atoms may hold a live allocation's bytes, which a write may
            // flush meanwhile (`fill_beside_live`).
            unsafe {
                self.fill_beside_live(
                    &chunk.allocation,
                    mapped.add(piece.start),
                    piece.end - piece.start,
                    FREED,
                );
            }
        }
        if !self.context.is_non_coherent(chunk.allocation.memory_type()) {
            return;
        }
        // The chunk's free space now: it starts at the head.
        let memory = &chunk.allocation;
        for free in chunk.free_spans() {
            let whole = self.whole_atoms(memory, free.clone(), capacity);
            for piece in &pieces {
                let touched = intersect(piece, &free);
                if touched.is_empty() {
                    continue;
                }
                let atoms = intersect(&whole, &self.atoms_over(memory, touched));
                // Whole atoms of free space: no live ring allocation's byte.
                self.sync_ring_space(memory, atoms, true, lines);
            }
        }
    }

    /// For `placed`, a ring allocation just made in chunk `index` of
    /// `state` and handed to nobody yet, in a chunk with debug fills, whose
    /// head was at `from` before it: checks that the bytes it took out of
    /// the free space still read `0xEF` (its own, and those from `from` up
    /// to them: its alignment padding, or, when it wrapped to the ring's
    /// start, the end of the ring it skipped), then fills its own bytes
    /// with `0xDC`. The others stay `0xEF`, its frame's until the frame is
    /// reclaimed and they are filled again. A byte written since its frame
    /// was reclaimed is counted in
    /// [`corruptions_detected`](Self::corruptions_detected) and kept as a
    /// line to log.
    ///
    /// In a non-coherent type the check reads the bytes as the host sees
    /// them, with the free bytes beside them in the atoms over them that
    /// the free space held wholly before the allocation (from `from`: the
    /// bytes free now and those it took; they hold its bytes, its padding
    /// or skipped end, and free ones, no live ring allocation's), whose
    /// invalidate would drop a host write there; then invalidates those
    /// atoms and reads both again, as the device holds them. The new fill,
    /// and `0xEF` again in the free bytes beside the allocation (a write
    /// found there is counted by this check alone), is flushed over the
    /// same atoms.
    fn check_ring_allocation(
        &self,
        state: &RingState,
        index: usize,
        placed: &LinearAllocation,
        from: u64,
        lines: &mut Kept,
    ) {
        let Some(chunk) = state.chunks.get(index).filter(|chunk| chunk.fills) else {
            return;
        };
        let Some(mapped) = chunk.allocation.mapped else {
            return;
        };
        let memory = &chunk.allocation;
        let capacity = chunk.linear.capacity();
        let end = placed.offset + placed.size;
        debug_assert_eq!(
            chunk.linear.head(),
            end,
            "a ring allocation ends at the head"
        );
        // An allocation placed before the old head wrapped to offset 0.
        let taken = if placed.offset >= from {
            [from..end, 0..0]
        } else {
            [from..capacity, 0..end]
        };
        // SAFETY: the bytes the allocation took, inside the chunk's mapped
        // ring space: its own, handed to nobody yet, and padding or a
        // skipped end that no ring allocation holds; no other ring
        // allocation holds any of them (the linear allocator's invariant),
        // and none takes them under the rings' lock.
        let read = |range: &Range<u64>| unsafe {
            first_changed(
                mapped.add(range.start).0.as_ptr(),
                range.end - range.start,
                FREED,
            )
            .map(|at| range.start + at)
        };
        let mut changed = taken.iter().find_map(read);
        let mut atoms = [0..0, 0..0];
        if self.context.is_non_coherent(memory.memory_type()) {
            let taken_len: u64 = taken.iter().map(|range| range.end - range.start).sum();
            // The free space before the allocation, from the old head:
            // each part of `taken` lies in the part of the same rank.
            let free = capacity - chunk.linear.used() + taken_len;
            let free = wrapping(from, free, capacity);
            for ((atoms, taken), free) in atoms.iter_mut().zip(&taken).zip(free) {
                if !taken.is_empty() {
                    let whole = self.whole_atoms(memory, free, capacity);
                    *atoms = intersect(&whole, &self.atoms_over(memory, taken.clone()));
                }
            }
            if atoms.iter().any(|atoms| !atoms.is_empty()) {
                // The free bytes beside the allocation in those atoms are
                // read too (ring space: the atoms end at the ring's end at
                // the latest): as the host sees them, since the invalidate
                // would drop a host write there unseen, and once
                // invalidated, as the device holds them.
                changed = changed.or(atoms.iter().find_map(read));
                for atoms in &atoms {
                    // Whole atoms of the free space before the allocation.
                    self.sync_ring_space(memory, atoms.clone(), false, lines);
                }
                changed = changed
                    .or(taken.iter().find_map(read))
                    .or(atoms.iter().find_map(read));
            }
        }
        // SAFETY: the allocation's own bytes, as the check. Its first and
        // last atoms may hold the bytes of its live neighbours, which a
        // write may flush meanwhile (`fill_beside_live`).
        unsafe { self.fill_beside_live(memory, mapped.add(placed.offset), placed.size, NEW) };
        for (atoms, taken) in atoms.iter().zip(&taken) {
            // The free bytes beside the allocation in those atoms, filled
            // again: a write after free found there is counted once (the
            // flush below would otherwise carry a host write to the
            // device, for the next check to count again). They lie after
            // the part of `taken` of the same rank: its atoms start where
            // the free space does (`from`) or at the ring's start.
            debug_assert!(atoms.is_empty() || atoms.start >= taken.start);
            let beside = intersect(atoms, &(taken.end..u64::MAX));
            // SAFETY: free ring space in whole atoms that hold no live ring
            // allocation's byte, under the rings' lock.
            unsafe { fill(mapped.add(beside.start), beside.end - beside.start, FREED) };
            // The same atoms: the allocation's bytes, its padding or
            // skipped end, and free ones.
            self.sync_ring_space(memory, atoms.clone(), true, lines);
        }
        let Some(changed) = changed else {
            return;
        };
        self.context.count_corruption();
        let how = if (placed.offset..end).contains(&changed) {
            "took it"
        } else if !taken.iter().any(|range| range.contains(&changed)) {
            "found it free beside it, in a non-coherent atom it shares"
        } else if changed < placed.offset {
            "skipped it as alignment padding"
        } else {
            "skipped it, the end of the ring, to wrap to its start"
        };
        lines.push(log::Level::Error, format!(
            "vk-suballoc: memory written after it was freed: byte {} of memory {:?} was changed before a ring allocation of {} bytes at offset {} {how} (upload ring{}, chunk {index}, ring offset {}, memory type {}): written through a ring allocation of a collected frame, or by the GPU",
            memory.offset() + changed,
            memory.memory(),
            placed.size,
            memory.offset() + placed.offset,
            ring_label(state.name.as_deref()),
            placed.offset,
            memory.memory_type(),
        ));
    }
}

/// `" \"name\""` for a named ring, else empty: for log lines.
fn ring_label(name: Option<&str>) -> String {
    name.map(|name| format!(" \"{name}\"")).unwrap_or_default()
}
