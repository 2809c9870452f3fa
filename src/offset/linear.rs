//! [`LinearAllocator`]: a ring of per-frame transient allocations.
//!
//! Per-frame data (staging copies, uniforms, dynamic vertices) lives for one
//! frame and dies all at once when the GPU has finished that frame. A ring
//! serves it best: allocation bumps a head pointer; a frame is *sealed* when
//! its commands are submitted, and *reclaimed* when its fence has signalled,
//! which moves the tail past everything the frame allocated. The ring never
//! wraps over bytes of a frame that has not been reclaimed: a request that does
//! not fit fails with a typed error instead.

use super::OffsetError;

/// One transient range from a [`LinearAllocator`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LinearAllocation {
    /// First byte; a multiple of the requested alignment.
    pub offset: u64,
    /// Exactly the requested size.
    pub size: u64,
    /// The frame this range belongs to; it is reclaimed with that frame.
    pub frame: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct SealedFrame {
    index: u64,
    /// The ring's `consumed` counter when the frame was sealed.
    end: u64,
}

/// A ring allocator with O(1) aligned bump allocation and whole-frame
/// reclamation in frame order. No method panics, whatever its arguments.
///
/// # Example
/// ```
/// use vk_suballoc::offset::LinearAllocator;
///
/// let mut ring = LinearAllocator::new(1 << 20, 3)?;
/// let uniforms = ring.allocate(256, 256)?;       // frame 0
/// let frame = ring.finish_frame()?;              // submit frame 0
/// assert_eq!(frame, uniforms.frame);
/// ring.reclaim_through(frame);                   // its fence signalled
/// assert_eq!(ring.used(), 0);
/// # Ok::<(), vk_suballoc::offset::OffsetError>(())
/// ```
#[derive(Clone, Debug)]
pub struct LinearAllocator {
    capacity: u64,
    /// Physical offset where the next allocation is looked for.
    head: u64,
    /// Bytes handed out since creation, wasted alignment and wrap bytes
    /// included, modulo 2^64: it wraps after 2^16 frames of a whole
    /// `MAX_CAPACITY` ring, so it is only ever compared with and subtracted
    /// from `reclaimed` with wrapping arithmetic.
    consumed: u64,
    /// Bytes given back since creation, modulo 2^64 (see `consumed`).
    reclaimed: u64,
    current_frame: u64,
    /// Sealed, unreclaimed frames: a fixed ring of `max_frames_in_flight`.
    sealed: Box<[SealedFrame]>,
    oldest_sealed: usize,
    sealed_count: usize,
    peak_used: u64,
    allocations: u64,
    failed_allocations: u64,
}

impl LinearAllocator {
    /// Creates a ring of `capacity` bytes that holds up to
    /// `max_frames_in_flight` sealed frames (at least 1: a ring needs one
    /// sealed frame to be of any use, so 0 counts as 1).
    ///
    /// # Errors
    /// [`OffsetError::CapacityTooLarge`] above
    /// [`MAX_CAPACITY`](super::MAX_CAPACITY);
    /// [`OffsetError::OutOfHostMemory`] when the host cannot allocate the
    /// frame table (16 bytes per frame in flight).
    ///
    /// # Time complexity
    /// O(`max_frames_in_flight`): the frame table is allocated whole.
    pub fn new(capacity: u64, max_frames_in_flight: u32) -> Result<Self, OffsetError> {
        if capacity > super::MAX_CAPACITY {
            return Err(OffsetError::CapacityTooLarge {
                requested: capacity,
                max: super::MAX_CAPACITY,
            });
        }
        let frames = max_frames_in_flight.max(1) as usize;
        let mut sealed = Vec::new();
        sealed
            .try_reserve_exact(frames)
            .map_err(|_| OffsetError::OutOfHostMemory)?;
        sealed.resize(frames, SealedFrame::default());
        Ok(Self {
            capacity,
            head: 0,
            consumed: 0,
            reclaimed: 0,
            current_frame: 0,
            sealed: sealed.into_boxed_slice(),
            oldest_sealed: 0,
            sealed_count: 0,
            peak_used: 0,
            allocations: 0,
            failed_allocations: 0,
        })
    }

    /// Allocates `size` bytes at a multiple of `align` in the current frame.
    ///
    /// # Errors
    /// [`OffsetError::ZeroSize`], [`OffsetError::AlignmentNotPowerOfTwo`],
    /// [`OffsetError::SizeExceedsCapacity`]; [`OffsetError::OutOfSpace`] when
    /// frames in flight hold too much of the ring, and
    /// [`OffsetError::TooFragmented`] when enough bytes are free but no free
    /// piece holds the aligned request (it would have to wrap, or its
    /// alignment moves it past the piece's end). On error nothing changes but
    /// [`failed_allocations`](Self::failed_allocations), which counts every
    /// error but a zero size and an alignment that is not a power of two.
    ///
    /// # Time complexity
    /// O(1), no loop.
    #[inline]
    pub fn allocate(&mut self, size: u64, align: u64) -> Result<LinearAllocation, OffsetError> {
        if size == 0 {
            return Err(OffsetError::ZeroSize);
        }
        if !align.is_power_of_two() {
            return Err(OffsetError::AlignmentNotPowerOfTwo(align));
        }
        if size > self.capacity {
            self.failed_allocations += 1;
            return Err(OffsetError::SizeExceedsCapacity {
                size,
                capacity: self.capacity,
            });
        }
        let used = self.used();
        // Place after the head if it fits before the end; else wrap to 0 and
        // count the skipped tail as consumed (it is reclaimed with this frame).
        // No overflow: `head <= capacity < 2^48` and `align <= 2^63`.
        let aligned = (self.head + (align - 1)) & !(align - 1);
        let (offset, consumed) = if aligned <= self.capacity - size {
            (aligned, aligned - self.head + size)
        } else {
            (0, self.capacity - self.head + size)
        };
        if used + consumed > self.capacity {
            self.failed_allocations += 1;
            let free = self.capacity - used;
            return Err(if free < size {
                OffsetError::OutOfSpace { size, free }
            } else {
                OffsetError::TooFragmented { size, align, free }
            });
        }
        self.consumed = self.consumed.wrapping_add(consumed);
        self.head = offset + size;
        self.peak_used = self.peak_used.max(used + consumed);
        self.allocations += 1;
        Ok(LinearAllocation {
            offset,
            size,
            frame: self.current_frame,
        })
    }

    /// Seals the current frame (its commands were submitted) and starts the
    /// next one. Returns the sealed frame's index: pass it to
    /// [`reclaim_through`](Self::reclaim_through) once its fence signals.
    ///
    /// # Errors
    /// [`OffsetError::TooManyFramesInFlight`] when `max_frames_in_flight`
    /// frames are sealed and unreclaimed; nothing changes then.
    ///
    /// # Time complexity
    /// O(1).
    pub fn finish_frame(&mut self) -> Result<u64, OffsetError> {
        if self.sealed_count == self.sealed.len() {
            return Err(OffsetError::TooManyFramesInFlight(self.sealed.len() as u32));
        }
        let slot = (self.oldest_sealed + self.sealed_count) % self.sealed.len();
        self.sealed[slot] = SealedFrame {
            index: self.current_frame,
            end: self.consumed,
        };
        self.sealed_count += 1;
        self.current_frame += 1;
        Ok(self.current_frame - 1)
    }

    /// Releases every sealed frame whose index is `<= frame`, oldest first.
    /// Returns how many frames were released. Frames not yet sealed are never
    /// released.
    ///
    /// # Time complexity
    /// O(frames released).
    pub fn reclaim_through(&mut self, frame: u64) -> usize {
        let mut released = 0;
        while self.sealed_count > 0 && self.sealed[self.oldest_sealed].index <= frame {
            self.reclaimed = self.sealed[self.oldest_sealed].end;
            self.oldest_sealed = (self.oldest_sealed + 1) % self.sealed.len();
            self.sealed_count -= 1;
            released += 1;
        }
        if self.consumed == self.reclaimed {
            // Empty ring: restart at offset 0 so the next frames need no wrap.
            self.head = 0;
        }
        released
    }

    /// The offset where the next allocation is looked for. The bytes in
    /// use ([`used`](Self::used) of them) are the ones just before it,
    /// going back past offset 0 to the end of the ring when they wrap; the
    /// free ones start at it and wrap the same way. The upload rings' debug
    /// fills read it (`allocator/ring_fill.rs`).
    pub(crate) fn head(&self) -> u64 {
        self.head
    }

    /// Bytes held by sealed and current frames (alignment and wrap waste included).
    pub fn used(&self) -> u64 {
        self.consumed.wrapping_sub(self.reclaimed)
    }

    /// The largest [`used`](Self::used) seen.
    pub fn peak_used(&self) -> u64 {
        self.peak_used
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Index of the frame that allocations go to now.
    pub fn current_frame(&self) -> u64 {
        self.current_frame
    }

    /// Sealed frames not yet reclaimed.
    pub fn frames_in_flight(&self) -> usize {
        self.sealed_count
    }

    /// Successful allocations since creation.
    pub fn allocations(&self) -> u64 {
        self.allocations
    }

    /// Allocations since creation that failed for lack of space or were
    /// larger than the ring (invalid sizes and alignments are not counted,
    /// as in [`Counters::failed_allocations`](super::Counters::failed_allocations)).
    pub fn failed_allocations(&self) -> u64 {
        self.failed_allocations
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_only_over_reclaimed_frames() {
        let mut ring = LinearAllocator::new(100, 4).unwrap();
        let a = ring.allocate(40, 1).unwrap();
        assert_eq!(a.offset, 0);
        let f0 = ring.finish_frame().unwrap();
        let b = ring.allocate(40, 1).unwrap();
        assert_eq!(b.offset, 40);
        // 30 bytes would have to wrap over frame 0, which is in flight.
        assert_eq!(
            ring.allocate(30, 1),
            Err(OffsetError::OutOfSpace { size: 30, free: 20 })
        );
        ring.reclaim_through(f0);
        let c = ring.allocate(30, 1).unwrap();
        assert_eq!(c.offset, 0);
        assert_eq!(ring.used(), 20 + 40 + 30);
    }

    #[test]
    fn free_bytes_in_two_pieces_are_too_fragmented() {
        let mut ring = LinearAllocator::new(100, 4).unwrap();
        ring.allocate(30, 1).unwrap();
        let f0 = ring.finish_frame().unwrap();
        ring.allocate(40, 1).unwrap();
        ring.finish_frame().unwrap();
        ring.reclaim_through(f0);
        // 70..100 and 0..30 are free: 60 bytes, but no 35 in one piece.
        assert_eq!(
            ring.allocate(35, 1),
            Err(OffsetError::TooFragmented {
                size: 35,
                align: 1,
                free: 60
            })
        );
        assert_eq!(ring.allocate(30, 1).unwrap().offset, 70);
    }

    #[test]
    fn alignment_is_honoured_and_counted() {
        let mut ring = LinearAllocator::new(1024, 2).unwrap();
        ring.allocate(3, 1).unwrap();
        let a = ring.allocate(10, 256).unwrap();
        assert_eq!(a.offset, 256);
        assert_eq!(ring.used(), 266);
        assert_eq!(
            ring.allocate(8, 3),
            Err(OffsetError::AlignmentNotPowerOfTwo(3))
        );
        assert_eq!(ring.allocate(0, 1), Err(OffsetError::ZeroSize));
        // Invalid requests are not counted as failures; requests that do
        // not fit, or exceed the ring, are.
        assert_eq!(ring.failed_allocations(), 0);
        // 266 bytes are held, so 758 are free: fewer than 1000.
        assert_eq!(
            ring.allocate(1000, 1),
            Err(OffsetError::OutOfSpace {
                size: 1000,
                free: 758
            })
        );
        assert_eq!(
            ring.allocate(1025, 1),
            Err(OffsetError::SizeExceedsCapacity {
                size: 1025,
                capacity: 1024
            })
        );
        assert_eq!(ring.failed_allocations(), 2);
        // Neither failure changed the ring.
        assert_eq!((ring.used(), ring.allocations()), (266, 2));
    }

    /// The ring counts bytes since creation; 2^16 + 1 frames of a whole
    /// `MAX_CAPACITY` ring hand out more than 2^64 of them, which must not
    /// panic (debug builds check overflow) nor confuse `used`.
    #[test]
    fn byte_counts_past_u64_max_keep_the_ring_working() {
        let capacity = super::super::MAX_CAPACITY;
        let mut ring = LinearAllocator::new(capacity, 1).unwrap();
        let rounds = if cfg!(miri) { 4 } else { (1u64 << 16) + 1 };
        for _ in 0..rounds {
            assert_eq!(ring.allocate(capacity, 1).map(|a| a.offset), Ok(0));
            assert_eq!(ring.used(), capacity);
            let frame = ring.finish_frame().unwrap();
            assert_eq!(ring.reclaim_through(frame), 1);
            assert_eq!(ring.used(), 0);
        }
        // Partly used across the wrap of the counters: still exact.
        ring.allocate(10, 1).unwrap();
        assert_eq!(ring.used(), 10);
        assert_eq!(ring.peak_used(), capacity);
        assert_eq!(ring.allocations(), rounds + 1);
    }

    /// The bytes in use are the `used` ones before the head, wrapping past
    /// offset 0 (what the upload rings' debug fills rely on to find the
    /// space a reclaim gives back): every live allocation lies in them,
    /// over a pseudo-random run of allocations, seals and reclaims that
    /// wraps the ring many times.
    #[test]
    fn live_allocations_lie_in_the_used_bytes_before_the_head() {
        let capacity = 1000;
        let mut ring = LinearAllocator::new(capacity, 4).unwrap();
        let mut live: Vec<LinearAllocation> = Vec::new();
        let mut state = 12345u64;
        let mut next = |n: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        let steps = if cfg!(miri) { 200 } else { 5000 };
        for _ in 0..steps {
            match next(4) {
                0 | 1 => {
                    if let Ok(a) = ring.allocate(1 + next(300), 1 << next(6)) {
                        live.push(a);
                    }
                }
                2 => {
                    let _ = ring.finish_frame();
                }
                _ => {
                    let frame = ring.current_frame().saturating_sub(1 + next(2));
                    ring.reclaim_through(frame);
                    let oldest = ring.current_frame() - ring.frames_in_flight() as u64;
                    live.retain(|a| a.frame >= oldest);
                }
            }
            let tail = (ring.head() + capacity - ring.used()) % capacity;
            for a in &live {
                // The allocation's start, counted from the tail, plus its
                // size, stays within the used bytes.
                let from_tail = (a.offset + capacity - tail) % capacity;
                let inside = from_tail + a.size <= ring.used() || ring.used() == capacity;
                assert!(inside, "{a:?}: head {}, used {}", ring.head(), ring.used());
            }
        }
    }

    #[test]
    fn too_many_frames_in_flight_is_an_error() {
        let mut ring = LinearAllocator::new(64, 2).unwrap();
        ring.finish_frame().unwrap();
        ring.finish_frame().unwrap();
        assert_eq!(
            ring.finish_frame(),
            Err(OffsetError::TooManyFramesInFlight(2))
        );
        assert_eq!(ring.reclaim_through(0), 1);
        assert_eq!(ring.finish_frame(), Ok(2));
    }
}
