//! Write pins: how a [`ring_write`](crate::Allocator::ring_write) that
//! copies into a ring chunk with the rings' lock released (or a
//! [`ring_flush`](crate::Allocator::ring_flush), which only flushes) keeps a collect
//! from handing that frame's space to a later frame, or from freeing a
//! destroyed ring's chunk, while the copy and the flush go on. Each chunk
//! counts the writes copying into each of its live frames
//! ([`ChunkPins`]), and a write holds a [`WritePin`] for its copy. It is
//! apart from `upload_ring.rs` and `upload_ring/chunk.rs`, which carve
//! and reclaim the ring space, because it is the one lock-free protocol of the rings: its atomic
//! orderings and the writes' turns are argued here, in one place.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{RingChunk, RING_FRAMES};

/// Slots of [`ChunkPins`]: a chunk's live frames (its sealed, unreclaimed
/// ones, at most [`RING_FRAMES`], and its current one) are at most this
/// many consecutive frames, so no two of them share a slot.
const PIN_SLOTS: usize = RING_FRAMES as usize + 1;

/// How many [`ring_write`](crate::Allocator::ring_write) calls are copying
/// into each live frame of a chunk, with the rings' lock released: chunk
/// frame `f` counts in slot `f % PIN_SLOTS`.
///
/// A pin is taken only under the rings' lock, after the write's checks
/// found its frame live, and dropped (`WritePin`) once the copy and the
/// flush are over, with no lock held. So under the rings' lock a count
/// read as 0 stays 0 for every frame that is no longer handed out (a
/// reclaimed frame, a destroyed ring's chunk), and a count read as non-zero
/// says that a write may still be copying: the reclaim of that frame, or
/// the free of the chunk, waits (see `Allocator::ring_write`).
///
/// Orderings: the pin's increment is `Relaxed`, since the rings' lock,
/// under which it is taken and under which (or after which, for a
/// destroyed ring's chunk) the counts are read, orders it before any
/// later read. The unpin's decrement is `Release` and the reads are
/// `Acquire`: a reader that sees a count fall to 0 (the value of the last
/// decrement, which heads a release sequence through any later ones)
/// synchronises with every write that unpinned, so their copies and
/// flushes happen before the reader hands the bytes to a later frame or
/// frees the memory.
///
/// The writes into one chunk also take turns (`atoms`): a
/// [`RingAllocation`](super::RingAllocation) is `Copy` and `Sync`, so two threads may write the
/// same bytes at once, a data race once no lock keeps their copies apart;
/// and on non-coherent memory a flush covers whole `nonCoherentAtomSize`
/// atoms, which ring allocations packed at their own alignment share with
/// their neighbours, and a driver that carries out a flush by copying the
/// host's bytes (the fake device does; so do drivers that emulate
/// non-coherent memory) would read the bytes another write is copying into
/// the same atom.
#[derive(Debug)]
pub(crate) struct ChunkPins {
    counts: [AtomicU32; PIN_SLOTS],
    /// Held over the copy (and the flush) of a write.
    atoms: Mutex<()>,
}

impl Default for ChunkPins {
    fn default() -> Self {
        Self {
            counts: std::array::from_fn(|_| AtomicU32::new(0)),
            atoms: Mutex::new(()),
        }
    }
}

impl ChunkPins {
    fn slot(chunk_frame: u64) -> usize {
        // The remainder is below `PIN_SLOTS`, so it fits a `usize`.
        (chunk_frame % PIN_SLOTS as u64) as usize
    }

    /// Whether a write into chunk frame `chunk_frame` (a live frame) may
    /// still be copying.
    pub(crate) fn is_pinned(&self, chunk_frame: u64) -> bool {
        self.counts[Self::slot(chunk_frame)].load(Ordering::Acquire) != 0
    }

    /// Whether a write into any frame of the chunk may still be copying.
    pub(crate) fn any_pinned(&self) -> bool {
        self.counts
            .iter()
            .any(|count| count.load(Ordering::Acquire) != 0)
    }
}

/// One write's pin on a chunk frame, taken under the rings' lock; dropping
/// it (after the copy and the flush, or on their unwind) unpins.
#[derive(Debug)]
pub(crate) struct WritePin {
    pins: Arc<ChunkPins>,
    slot: usize,
}

impl WritePin {
    /// Waits for the other writes into the chunk to be over, and keeps
    /// new ones out while the guard lives (`ChunkPins`).
    pub(crate) fn take_turn(&self) -> MutexGuard<'_, ()> {
        // The mutex guards no data: a write that panicked left nothing to
        // repair.
        self.pins
            .atoms
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for WritePin {
    fn drop(&mut self) {
        // Release: the copy and the flush happen before a reclaimer's
        // Acquire read that sees the count this leaves (`ChunkPins`).
        self.pins.counts[self.slot].fetch_sub(1, Ordering::Release);
    }
}

impl RingChunk {
    /// Pins chunk frame `chunk_frame`, a live frame, for one write. Call
    /// it under the rings' lock only (`ChunkPins`).
    pub(crate) fn pin(&self, chunk_frame: u64) -> WritePin {
        let slot = ChunkPins::slot(chunk_frame);
        // Relaxed: the rings' lock, held here, orders it before every read
        // of the count (`ChunkPins`). It cannot overflow: each pin is a
        // write in progress on some thread.
        self.pins.counts[slot].fetch_add(1, Ordering::Relaxed);
        WritePin {
            pins: Arc::clone(&self.pins),
            slot,
        }
    }
}
