//! Writes into ring allocations (`ring_write`, live, stale or past their
//! end, their bytes tagged for `check_rings`), and a ring filled across
//! frames and partly reclaimed before one more ring allocation.

use super::*;

impl Walk {
    pub(in super::super) fn ring_write(&mut self, pick: u16, value: u8, past: bool) {
        let lives: usize = self.rings.iter().map(|r| r.live.len()).sum();
        if lives == 0 {
            if let Some(stale) = self.stale_ring.first() {
                self.stale_ring_write(stale, value);
            }
            return;
        }
        let mut n = pick as usize % lives;
        let (r, j) = self
            .rings
            .iter()
            .enumerate()
            .find_map(|(r, ring)| {
                if n < ring.live.len() {
                    Some((r, n))
                } else {
                    n -= ring.live.len();
                    None
                }
            })
            .unwrap();
        let (allocation, tag) = &mut self.rings[r].live[j];
        let size = allocation.size();
        if past {
            let result = self.allocator.ring_write(allocation, size, &[value]);
            assert_eq!(
                result,
                Err(Error::RangeOutOfBounds {
                    start: size,
                    end: size + 1,
                    size
                })
            );
            if let Some(stale) = self
                .stale_ring
                .get(pick as usize % self.stale_ring.len().max(1))
            {
                self.stale_ring_write(stale, value);
            }
            return;
        }
        if allocation.mapped_ptr().is_none() {
            // GPU scratch in memory the host cannot see: no write, no flush.
            let refused = Err(Error::NotHostVisible);
            assert_eq!(self.allocator.ring_write(allocation, 0, &[value]), refused);
            assert_eq!(self.allocator.ring_flush(allocation, ..), refused);
            return;
        }
        let first = self.allocator.ring_write(allocation, 0, &[value]);
        let last = self.allocator.ring_write(allocation, size - 1, &[value]);
        // Lost device or not: a non-coherent ring's flush meets only the
        // device's out-of-memory errors, which the walk never injects
        // (`Walk::flush`).
        assert_eq!((first, last), (Ok(()), Ok(())), "ring_write");
        *tag = Some(value);
    }

    /// Fills live ring `pick` across `2 + frames % 4` frames (sealed as it
    /// goes, with a fence or a timeline value) with parts of what its
    /// newest chunk has free, the last part taking all that is left (so
    /// that a chunk not wrapped fills to exactly its capacity); then the
    /// GPU finishes the oldest `complete % 5` frames in flight and
    /// `collect` reclaims them; then one more ring allocation, of a size
    /// `then` picks from what the ring holds, meets the partly reclaimed
    /// ring (where it lands, or `UploadRingFull`'s free bytes, as the
    /// model says). Bits 2 and 3 of `frames` pick the call of each ring
    /// allocation: `ring_allocate`, `ring_allocate_mut`, or the two in
    /// turn (either first).
    pub(in super::super) fn ring_fill(
        &mut self,
        pick: u8,
        frames: u8,
        complete: u8,
        then: u8,
        align: u8,
        timeline: bool,
    ) {
        if self.rings.is_empty() {
            return;
        }
        let i = pick as usize % self.rings.len();
        let align = 1u64 << (align % 10);
        let parts = 2 + u64::from(frames % 4);
        let mutable = |n: u64| match (frames >> 2) % 4 {
            0 => false,
            1 => true,
            turn => (n + u64::from(turn)) % 2 == 1,
        };
        let free = |walk: &Self| {
            let chunk = walk.rings[i].chunks.last().expect("a ring has a chunk");
            (chunk.capacity, chunk.capacity - chunk.used())
        };
        let (capacity, room) = free(self);
        let share = (room / parts).max(1);
        for part in 0..parts {
            let size = if part + 1 == parts {
                free(self).1.max(1)
            } else {
                share
            };
            // A part that fails (a wrap's waste) leaves the rest to the
            // next frames.
            let align = if part == 0 { align } else { 1 };
            self.ring_allocate_in(i, size, align, mutable(part));
            if part + 1 < parts {
                self.end_frame(timeline);
            }
        }
        for _ in 0..complete % 5 {
            let oldest = (0..self.sealed.len()).find(|&f| !self.sealed[f].signalled);
            match oldest {
                Some(f) => self.signal_frame(f),
                None => break,
            }
        }
        self.collect(false);
        // What the reclaim left free, by the model (its oldest frame's
        // bytes, a part's, the whole ring, ...).
        let (_, free_now) = free(self);
        let size = match then % 8 {
            0 => capacity,
            1 => free_now,
            2 => free_now + 1,
            3 => share,
            4 => share + 1,
            5 => capacity - share,
            6 => free_now.saturating_sub(share),
            _ => capacity / 2 + 1,
        };
        self.ring_allocate_in(i, size.max(1), align, mutable(parts));
    }

    /// A write into `stale`, a ring allocation of a frame collected or of
    /// a ring destroyed, is refused as stale (as not host-visible in GPU
    /// scratch).
    fn stale_ring_write(&self, stale: &RingAllocation, value: u8) {
        let result = self.allocator.ring_write(stale, 0, &[value]);
        assert_eq!(
            result,
            unmapped_or(stale, Err(Error::StaleAllocation)),
            "{stale:?}"
        );
    }
}

/// What a `ring_write` into `a` (in range) gives: `NotHostVisible` in
/// memory the host cannot see, checked before its frame; else `otherwise`.
fn unmapped_or(a: &RingAllocation, otherwise: Result<(), Error>) -> Result<(), Error> {
    match a.mapped_ptr() {
        Some(_) => otherwise,
        None => Err(Error::NotHostVisible),
    }
}
