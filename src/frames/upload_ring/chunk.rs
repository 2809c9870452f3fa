//! A ring's chunks: [`RingChunk`], one buffer of a ring, its reclaims of
//! the space of collected frames and its retirement when its ring is
//! destroyed ([`RetiredChunk`], [`RetiredFree`]).

use std::ops::Range;
use std::sync::Arc;

use ash::vk;

use super::ChunkPins;
use crate::offset::LinearAllocator;
use crate::Allocation;

/// One buffer of a ring.
#[derive(Debug)]
pub(crate) struct RingChunk {
    pub(crate) allocation: Allocation,
    pub(crate) buffer: vk::Buffer,
    pub(crate) linear: LinearAllocator,
    /// The allocator frame that is the chunk's frame 0.
    pub(crate) first_frame: u64,
    /// The `ring_write`s copying into each of its frames now.
    pub(crate) pins: Arc<ChunkPins>,
    /// The chunk frame through which a reclaim is owed: one of the frames
    /// it covers was pinned when it came (`reclaim_through`).
    pub(crate) owed: Option<u64>,
    /// Whether its memory type has debug fills (`Config::debug_fill`):
    /// its free ring space reads `0xEF`, and its reclaims call their hook
    /// (`allocator/ring_fill.rs`). The one test a reclaim pays without.
    pub(crate) fills: bool,
    /// The device address of the buffer's first byte, read once when the
    /// chunk is made; `None` unless the ring's buffer usage has
    /// `SHADER_DEVICE_ADDRESS` (`RingAllocation::device_address`).
    pub(crate) device_address: Option<vk::DeviceAddress>,
}

/// Ring space of a chunk that a reclaim gave back: `len` bytes from
/// offset `start` of the ring, going on from its start when they pass its
/// end. Handed, with the chunk, to the hook of a reclaim in a chunk with
/// debug fills (`allocator/ring_fill.rs`), once the reclaim is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reclaimed {
    pub(crate) start: u64,
    pub(crate) len: u64,
}

/// A destroyed ring's chunk on its way to being freed: queued in the frame
/// current when its ring was destroyed, then, should a write still be
/// copying into it when that frame is collected, kept by the rings until a
/// later collect finds it unpinned.
#[derive(Debug)]
pub(crate) struct RetiredChunk {
    pub(crate) buffer: vk::Buffer,
    pub(crate) allocation: Allocation,
    pub(crate) pins: Arc<ChunkPins>,
    /// In a chunk with debug fills, its free ring space when it left its
    /// ring, checked as it is freed
    /// (`allocator/ring_fill/free_space_checks.rs`).
    pub(crate) free: Option<Box<RetiredFree>>,
}

/// The ring space of a chunk with debug fills that was free when the
/// chunk left its ring, and, once the chunk is about to be freed, that of
/// its frames collected since (`Rings::settle_leaving`): it reads `0xEF`
/// still when the chunk is freed, but for a write after free. The space
/// of the frame it left in, and of those a `ring_write` still held, is
/// not in it: it may hold the engine's data.
#[derive(Debug)]
pub(crate) struct RetiredFree {
    /// The free ring offsets: the span from the head, and its part from
    /// the ring's start when it wraps ([`RingChunk::free_spans`]).
    pub(crate) spans: [Range<u64>; 2],
    /// The size of its ring space (`LinearAllocator::capacity`).
    pub(crate) capacity: u64,
    /// Its ring's name, for the log line.
    pub(crate) ring: Option<Box<str>>,
    /// Its index among its ring's chunks, for the log line.
    pub(crate) index: usize,
}

/// `len` bytes of a ring of `capacity` bytes from offset `start`, going
/// on from offset 0 when they pass its end: the part up to the end, and
/// the part from 0 (empty when they do not wrap).
pub(crate) fn wrapping(start: u64, len: u64, capacity: u64) -> [Range<u64>; 2] {
    let end = start + len;
    [start..end.min(capacity), 0..end.saturating_sub(capacity)]
}

impl RingChunk {
    /// What is left of it once its ring (named `ring`, of which it is
    /// chunk `index`) is destroyed: no pin is taken on it any more
    /// (`ring_write` no longer finds it). With debug fills, its free ring
    /// space now, to check as it is freed, and its reclaim state, to go on
    /// filling the space of its frames in flight as they are collected
    /// (`Rings::leaving`): its memory handle in it is a copy, never freed,
    /// that lives no longer than the chunk (`Rings::settle_leaving`).
    pub(crate) fn retire(
        self,
        ring: Option<&str>,
        index: usize,
    ) -> (Box<RetiredChunk>, Option<RingChunk>) {
        let free = self.fills.then(|| {
            Box::new(RetiredFree {
                spans: self.free_spans(),
                capacity: self.linear.capacity(),
                ring: ring.map(Into::into),
                index,
            })
        });
        let leaving = self.fills.then(|| RingChunk {
            allocation: self.allocation.host_view(),
            buffer: self.buffer,
            linear: self.linear,
            first_frame: self.first_frame,
            pins: Arc::clone(&self.pins),
            owed: self.owed,
            fills: true,
            device_address: self.device_address,
        });
        let retired = Box::new(RetiredChunk {
            buffer: self.buffer,
            allocation: self.allocation,
            pins: self.pins,
            free,
        });
        (retired, leaving)
    }

    /// Its free ring space, as ring offsets: from the head, as many bytes
    /// as no frame holds (`LinearAllocator::head`), the part up to the
    /// ring's end and the part from its start (empty when they do not
    /// wrap). Space a collected frame gave back but a `ring_write` still
    /// holds (`owed`) is held still.
    pub(crate) fn free_spans(&self) -> [Range<u64>; 2] {
        let capacity = self.linear.capacity();
        wrapping(self.linear.head(), capacity - self.linear.used(), capacity)
    }
}

impl RingChunk {
    /// Gives back the space of chunk frames `<= chunk_frame`, and of those
    /// owed by an earlier call, oldest first, up to the first pinned one:
    /// that one and the rest stay owed (`owed`), to a later call (`retry`
    /// or another reclaim). Returns whether a reclaim is still owed. In a
    /// chunk with debug fills, the space given back goes to `on_reclaim`
    /// last, with the chunk's state complete (a panic there leaves nothing
    /// half done).
    ///
    /// # Time complexity
    /// O(frames reclaimed + 1), and `on_reclaim`'s.
    pub(crate) fn reclaim_through(
        &mut self,
        chunk_frame: u64,
        on_reclaim: &mut impl FnMut(&RingChunk, Reclaimed),
    ) -> bool {
        let target = self.owed.map_or(chunk_frame, |owed| owed.max(chunk_frame));
        self.owed = None;
        let current = self.linear.current_frame();
        // Only sealed frames are reclaimed.
        let Some(last_sealed) = current.checked_sub(1) else {
            return false;
        };
        let end = target.min(last_sealed);
        let oldest = current - self.linear.frames_in_flight() as u64;
        let mut frame = oldest;
        while frame <= end && !self.pins.is_pinned(frame) {
            frame += 1;
        }
        let mut reclaimed = None;
        if frame > oldest {
            // The bytes in use are the `used` ones before the head
            // (`LinearAllocator::head`), and a reclaim gives back the
            // oldest of them: from the first, as many as `used` drops.
            let before = self.fills.then(|| (self.linear.head(), self.linear.used()));
            self.linear.reclaim_through(frame - 1);
            if let Some((head, used)) = before {
                let capacity = self.linear.capacity();
                reclaimed = Some(Reclaimed {
                    // `head <= capacity` and `used <= capacity`.
                    start: (head + capacity - used) % capacity.max(1),
                    len: used - self.linear.used(),
                });
            }
        }
        if frame <= end {
            self.owed = Some(target);
        }
        if let Some(reclaimed) = reclaimed {
            on_reclaim(self, reclaimed);
        }
        self.owed.is_some()
    }

    /// [`reclaim_through`](Self::reclaim_through) for allocator frame
    /// `frame`: a chunk made after it retries what it owes only.
    pub(crate) fn reclaim_through_frame(
        &mut self,
        frame: u64,
        on_reclaim: &mut impl FnMut(&RingChunk, Reclaimed),
    ) -> bool {
        match frame.checked_sub(self.first_frame) {
            Some(chunk_frame) => self.reclaim_through(chunk_frame, on_reclaim),
            None => self.retry(on_reclaim),
        }
    }

    /// Retries a reclaim owed since a write pinned a frame of it. Returns
    /// whether one is still owed.
    pub(crate) fn retry(&mut self, on_reclaim: &mut impl FnMut(&RingChunk, Reclaimed)) -> bool {
        match self.owed {
            Some(owed) => self.reclaim_through(owed, on_reclaim),
            None => false,
        }
    }
}
