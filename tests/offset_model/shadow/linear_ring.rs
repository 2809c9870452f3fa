//! The shadow of the linear ring: one operation on a [`LinearAllocator`]
//! (`LinearOp`), and `LinearShadow`, which replays it on the ring and on a
//! model of the ring as a cyclic interval of used bytes with the live
//! ranges of every unreclaimed frame. Apart from the offset core's shadow
//! because the ring frees by frame, not by allocation, so its model and
//! its checks are its own; the two share only the overlap and input
//! checks kept in `shadow.rs`.

use std::collections::{BTreeMap, VecDeque};

use vk_suballoc::offset::{LinearAllocation, LinearAllocator, OffsetError};

use super::{align_up, bad_input_error, insert_disjoint};

/// One operation on a [`LinearAllocator`].
#[derive(Clone, Copy, Debug)]
pub enum LinearOp {
    /// `allocate(size, align)`, taken as given.
    Allocate { size: u64, align: u64 },
    /// `finish_frame()`.
    FinishFrame,
    /// `reclaim_through(f)`, `f` chosen by `target % 8` from the oldest
    /// sealed frame (the current one when none is sealed), `oldest`: for
    /// 0 a frame before it, `target / 8 % oldest`, so that nothing is
    /// released (none is before frame 0, and every call releases a sealed
    /// frame 0: `f` is 0 then); for 1 to 6 `oldest + target % 8 - 1`, the
    /// oldest frames up to that many, sealed or not; for 7 `u64::MAX`.
    /// Every outcome and the edges of the index: a frame long reclaimed,
    /// the one just before the oldest, each frame in flight, the current
    /// one, later ones and the last index.
    Reclaim { target: u64 },
}

/// A [`LinearAllocator`] and its model: the ring as a cyclic interval of used
/// bytes `[head - used, head)`, and the live ranges of every unreclaimed frame.
pub struct LinearShadow {
    pub ring: LinearAllocator,
    capacity: u64,
    max_frames: usize,
    current_frame: u64,
    /// Sealed frames, oldest first: (index, bytes consumed up to its seal).
    sealed: VecDeque<(u64, u64)>,
    /// Bytes consumed since creation (allocations, alignment and wrap skips).
    consumed: u64,
    /// Bytes given back since creation.
    reclaimed: u64,
    /// Where the next allocation is looked for.
    head: u64,
    peak_used: u64,
    allocations: u64,
    failed: u64,
    /// offset -> (size, frame): allocations of frames not yet reclaimed.
    live: BTreeMap<u64, (u64, u64)>,
}

impl LinearShadow {
    pub fn new(capacity: u64, max_frames_in_flight: u32) -> Self {
        let this = Self {
            ring: LinearAllocator::new(capacity, max_frames_in_flight).expect("valid ring"),
            capacity,
            max_frames: max_frames_in_flight.max(1) as usize,
            current_frame: 0,
            sealed: VecDeque::new(),
            consumed: 0,
            reclaimed: 0,
            head: 0,
            peak_used: 0,
            allocations: 0,
            failed: 0,
            live: BTreeMap::new(),
        };
        this.check();
        this
    }

    fn used(&self) -> u64 {
        self.consumed - self.reclaimed
    }

    pub fn apply(&mut self, op: LinearOp) {
        match op {
            LinearOp::Allocate { size, align } => self.allocate(size, align),
            LinearOp::FinishFrame => {
                let result = self.ring.finish_frame();
                if self.sealed.len() == self.max_frames {
                    assert_eq!(
                        result,
                        Err(OffsetError::TooManyFramesInFlight(self.max_frames as u32))
                    );
                } else {
                    assert_eq!(result, Ok(self.current_frame));
                    self.sealed.push_back((self.current_frame, self.consumed));
                    self.current_frame += 1;
                }
            }
            LinearOp::Reclaim { target } => {
                let oldest = self.sealed.front().map_or(self.current_frame, |f| f.0);
                let through = match target % 8 {
                    0 => (target / 8).checked_rem(oldest).unwrap_or(0),
                    7 => u64::MAX,
                    ahead => oldest + (ahead - 1),
                };
                let mut released = 0;
                while let Some(&(frame, end)) = self.sealed.front() {
                    if frame > through {
                        break;
                    }
                    self.sealed.pop_front();
                    self.reclaimed = end;
                    self.live.retain(|_, &mut (_, f)| f != frame);
                    released += 1;
                }
                if self.used() == 0 {
                    self.head = 0;
                }
                assert_eq!(self.ring.reclaim_through(through), released);
            }
        }
        self.check();
    }

    fn allocate(&mut self, size: u64, align: u64) {
        let result = self.ring.allocate(size, align);
        if let Some(error) = bad_input_error(size, align) {
            assert_eq!(result.err(), Some(error));
            return;
        }
        if size > self.capacity {
            self.failed += 1;
            assert_eq!(
                result,
                Err(OffsetError::SizeExceedsCapacity {
                    size,
                    capacity: self.capacity
                })
            );
            return;
        }
        // The free bytes form one cyclic interval starting at the head. A
        // placement fits when it lies inside it: right after the head (aligned)
        // before the end of the buffer, or, when the free interval wraps, at 0
        // after skipping the rest of the buffer.
        let free = self.capacity - self.used();
        let free_end = self.head + free; // may exceed the capacity (wraps)
        let in_place = align_up(self.head, align).filter(|&a| a + size <= self.capacity);
        let placement = match in_place {
            Some(start) if start + size <= free_end => Some((start, start + size - self.head)),
            Some(_) => None,
            None if free_end >= self.capacity && size <= free_end - self.capacity => {
                Some((0, self.capacity - self.head + size))
            }
            None => None,
        };
        match (result, placement) {
            (Ok(allocation), Some((offset, consumed))) => {
                assert_eq!(
                    allocation,
                    LinearAllocation {
                        offset,
                        size,
                        frame: self.current_frame
                    }
                );
                insert_disjoint(&mut self.live, offset, size, self.current_frame);
                self.consumed += consumed;
                self.head = offset + size;
                self.peak_used = self.peak_used.max(self.used());
                self.allocations += 1;
            }
            (Err(error), None) => {
                self.failed += 1;
                let expected = if free < size {
                    OffsetError::OutOfSpace { size, free }
                } else {
                    OffsetError::TooFragmented { size, align, free }
                };
                assert_eq!(error, expected);
            }
            (result, placement) => panic!(
                "ring allocate({size}, {align}) returned {result:?}, model expects {placement:?} \
                 (head {}, used {})",
                self.head,
                self.used()
            ),
        }
    }

    pub fn check(&self) {
        let ring = &self.ring;
        assert_eq!(ring.used(), self.used());
        assert_eq!(ring.peak_used(), self.peak_used);
        assert_eq!(ring.capacity(), self.capacity);
        assert_eq!(ring.current_frame(), self.current_frame);
        assert_eq!(ring.frames_in_flight(), self.sealed.len());
        assert_eq!(ring.allocations(), self.allocations);
        assert_eq!(ring.failed_allocations(), self.failed);
        let live_bytes: u64 = self.live.values().map(|&(size, _)| size).sum();
        assert!(live_bytes <= self.used() && self.used() <= self.capacity);
    }

    /// Seals the current frame, reclaims everything, and checks that the
    /// whole ring is one usable range again.
    pub fn finish(mut self) {
        if self.sealed.len() == self.max_frames {
            self.apply(LinearOp::Reclaim { target: 1 });
        }
        self.apply(LinearOp::FinishFrame);
        // Through `u64::MAX`: every sealed frame at once.
        self.apply(LinearOp::Reclaim { target: 7 });
        assert!(self.sealed.is_empty());
        assert_eq!(self.ring.used(), 0);
        assert!(self.live.is_empty());
        if self.capacity > 0 {
            let whole = self.ring.allocate(self.capacity, 1).expect("whole ring");
            assert_eq!(whole.offset, 0);
        }
    }
}
