//! The upload rings' shared state, [`Rings`]: every ring of the allocator
//! (its chunks, their frames' bump allocators and pins), the allocator
//! frame that ring allocations are made in, the oldest frame not yet
//! collected (ring allocations of older frames are stale), whether a
//! reclaim is owed to a write that held it up, the chunks of destroyed
//! rings that a write still copies into, and, with debug fills, the
//! reclaim state of destroyed rings' chunks not freed yet.
//!
//! # Locking
//!
//! `Rings` lives in the allocator's `rings` mutex, lock 2 of the order in
//! the allocator's module docs ("Locks"): taken after `releasing` and
//! `frames`, before `custom` and any pool. Every method here runs under it.
//! It is released while a new chunk is made and while `ring_write` copies
//! and flushes; a pin counted in the chunk, taken under the lock, holds
//! back the reclaim of the frame written ([`Rings::retry_owed`] retries it)
//! and the free of a destroyed ring's chunk ([`Rings::sort_ring_chunks`]).
//! The rings' methods are `upload_rings.rs`'s; the frame methods that
//! reclaim ring space as frames are collected are `frames.rs`'s.

use std::sync::Arc;

use crate::frames::upload_ring::{ChunkPins, Reclaimed, RetiredChunk, RingChunk, RingState};
use crate::frames::Deferred;
use crate::memory::slab::Slab;

/// The upload rings of an allocator and the frame they allocate in.
#[derive(Debug, Default)]
pub(crate) struct Rings {
    pub(crate) rings: Slab<RingState>,
    pub(crate) current_frame: u64,
    /// The oldest allocator frame not collected: ring allocations of older
    /// frames are stale, also where a write still copying into one keeps
    /// its space from being reclaimed yet.
    pub(super) next_uncollected: u64,
    /// Whether a chunk owes a reclaim that a write copying into one of its
    /// frames held up (`RingChunk::reclaim_through`).
    owed: bool,
    /// Destroyed rings' chunks whose frame was collected while a write
    /// still copied into them: freed by a later collect.
    pub(super) retired: Vec<RetiredChunk>,
    /// The reclaim state of the destroyed rings' chunks with debug fills
    /// not freed yet (queued in their frame, or in `retired`): their
    /// frames in flight when the ring went are reclaimed as they are
    /// collected, their space filled with `0xEF` as a live ring's, so that
    /// the check at their free covers it
    /// (`allocator/ring_fill/free_space_checks.rs`). Their
    /// current frame, the one the ring went in, is never sealed: its space
    /// stays the engine's. Each entry's memory handle is a copy of its
    /// queued chunk's, matched by its pins, and dropped before that chunk
    /// is freed ([`settle_leaving`](Self::settle_leaving)). Empty without
    /// debug fills.
    pub(super) leaving: Vec<RingChunk>,
}

impl Rings {
    /// Collects allocator frames `<= frame`: their ring allocations are
    /// stale from now on, and their space comes back but where a write
    /// still copies into it (owed, `retry_owed`).
    ///
    /// `on_reclaim` gets the space given back in chunks with debug fills
    /// (`ring_fill.rs`).
    pub(super) fn rings_reclaim_through(
        &mut self,
        frame: u64,
        on_reclaim: &mut impl FnMut(&RingChunk, Reclaimed),
    ) {
        self.next_uncollected = self.next_uncollected.max(frame.saturating_add(1));
        let mut owed = false;
        for ring in self.rings.values_mut() {
            owed |= ring.reclaim_through(frame, on_reclaim);
        }
        for chunk in &mut self.leaving {
            owed |= chunk.reclaim_through_frame(frame, on_reclaim);
        }
        self.owed = owed;
    }

    /// Reclaims the ring space writes held up, where they are over
    /// (`on_reclaim` as in [`rings_reclaim_through`](Self::rings_reclaim_through)).
    ///
    /// # Time complexity
    /// O(1) when none is owed, else O(chunks + frames reclaimed).
    #[inline]
    pub(super) fn retry_owed(&mut self, on_reclaim: &mut impl FnMut(&RingChunk, Reclaimed)) {
        if self.owed {
            let mut owed = false;
            for ring in self.rings.values_mut() {
                owed |= ring.retry_owed(on_reclaim);
            }
            for chunk in &mut self.leaving {
                owed |= chunk.retry(on_reclaim);
            }
            self.owed = owed;
        }
    }

    /// Sorts the destroyed rings' chunks among the collected `items`: one
    /// a write still copies into goes to `retired`, and those of
    /// `retired` no write copies into any more go to `items`, to be
    /// freed ([`settle_leaving`](Self::settle_leaving)). Returns `(kept
    /// back, freed from retired)`.
    ///
    /// A chunk out of its ring takes no new pin (`ring_write` looks its
    /// ring up under this lock), so a count read as 0 here stays 0, and the
    /// `Acquire` read of it makes the writes' copies and flushes happen
    /// before the free (`ChunkPins`).
    ///
    /// # Time complexity
    /// O(items + chunks in `retired`), plus
    /// [`settle_leaving`](Self::settle_leaving)'s.
    pub(super) fn sort_ring_chunks(&mut self, items: &mut Vec<Deferred>) -> (usize, usize) {
        // One pass: the items to free move to the front in their order, the
        // pinned chunks gather behind them and leave for `retired`.
        let mut to_free = 0;
        for index in 0..items.len() {
            let pinned =
                matches!(&items[index], Deferred::RingChunk(chunk) if chunk.pins.any_pinned());
            if !pinned {
                items.swap(to_free, index);
                to_free += 1;
            }
        }
        let kept = items.len() - to_free;
        for item in items.drain(to_free..) {
            if let Deferred::RingChunk(chunk) = item {
                self.retired.push(*chunk);
            }
        }
        let before = self.retired.len();
        let mut index = 0;
        while index < self.retired.len() {
            if self.retired[index].pins.any_pinned() {
                index += 1;
            } else {
                items.push(Deferred::RingChunk(Box::new(
                    self.retired.swap_remove(index),
                )));
            }
        }
        self.settle_leaving(items);
        (kept, before - self.retired.len())
    }

    /// The index in [`leaving`](Self::leaving) of the destroyed ring's
    /// chunk whose pins are `pins`, if it has an entry.
    ///
    /// # Time complexity
    /// O(entries).
    pub(super) fn leaving_index(&self, pins: &Arc<ChunkPins>) -> Option<usize> {
        self.leaving
            .iter()
            .position(|entry| Arc::ptr_eq(&entry.pins, pins))
    }

    /// Before the free of the destroyed rings' chunks among `items`: drops
    /// the [`leaving`](Self::leaving) entry of each (its memory handle, a
    /// copy, must not outlive the chunk), once its free space, grown by
    /// the reclaims of its frames collected since its ring went, is the
    /// space its check reads (`RetiredFree`). Space a write held back
    /// (owed) is left out, as in a live ring.
    ///
    /// # Time complexity
    /// O(1) without debug fills (nothing leaving), else O(items × entries).
    pub(super) fn settle_leaving(&mut self, items: &mut [Deferred]) {
        if self.leaving.is_empty() {
            return;
        }
        for item in items {
            let Deferred::RingChunk(chunk) = item else {
                continue;
            };
            let Some(free) = chunk.free.as_deref_mut() else {
                continue;
            };
            if let Some(index) = self.leaving_index(&chunk.pins) {
                free.spans = self.leaving.swap_remove(index).free_spans();
            }
        }
    }
}
