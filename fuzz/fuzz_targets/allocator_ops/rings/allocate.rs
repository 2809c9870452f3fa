//! Ring allocations of the walk: a ring picked (live or destroyed), a
//! size and alignment drawn, through `ring_allocate` or
//! `ring_allocate_mut`, each checked against the model of the ring's
//! chunks (where it lands, a new chunk when the ring grows, the free
//! bytes `UploadRingFull` reports, its device address).

use super::*;

impl Walk {
    /// Whether a ring allocation was made (through `ring_allocate_mut`
    /// with `mutable`).
    pub(in super::super) fn ring_allocate(
        &mut self,
        pick: u8,
        size_log2: u8,
        size_bits: u16,
        align: u8,
        mutable: bool,
    ) -> bool {
        let Some(picked) = self.ring_pick(pick) else {
            return false;
        };
        // Also fractions of the ring (live or not), so that it fills.
        let chunk_size = match picked {
            Ok(i) => self.rings[i].chunk_size,
            Err(_) => 1,
        };
        let size = match size_log2 % 32 {
            0 => 0,
            1 => u64::MAX,
            2 => 1 << 50,
            n @ 3..12 => (chunk_size >> (n - 3)).saturating_add(u64::from(size_bits % 8)),
            n => (u64::from(size_bits) >> (n % 16)).max(1),
        };
        let align = match align {
            0..200 => 1 << (align % 13),
            200..220 => 0,
            n => u64::from(n) * 3,
        };
        match picked {
            Err(dead) => {
                let result = if mutable {
                    self.allocator.ring_allocate_mut(dead, size, align)
                } else {
                    self.allocator.ring_allocate(dead, size, align)
                };
                assert_eq!(result, Err(Error::StaleAllocation), "a destroyed ring");
                false
            }
            Ok(i) => self.ring_allocate_in(i, size, align, mutable),
        }
    }

    /// Whether a ring allocation of `size` bytes at `align` was made in
    /// live ring `i` (checked against the model of its chunks), through
    /// `ring_allocate_mut` with `mutable` (the same placements and errors
    /// as `ring_allocate`).
    pub(in super::super) fn ring_allocate_in(
        &mut self,
        i: usize,
        size: u64,
        align: u64,
        mutable: bool,
    ) -> bool {
        if self.rings[i].live.len() >= MAX_RING_LIVE {
            return false;
        }
        let before = tally(&self.allocator.stats());
        let device = self.before();
        let ring = self.rings[i].ring;
        let result = if mutable {
            self.allocator.ring_allocate_mut(ring, size, align)
        } else {
            self.allocator.ring_allocate(ring, size, align)
        };
        let flaw = if size == 0 {
            Some(Error::ZeroSize)
        } else if !align.is_power_of_two() {
            Some(Error::AlignmentNotPowerOfTwo(align))
        } else {
            None
        };
        let model = &self.rings[i];
        let capacity = model.chunks.iter().map(|c| c.capacity).max().unwrap_or(0);
        // The newest chunk with room; else the free bytes of the oldest
        // (a ring that does not grow has one).
        let mut predicted = Err(0);
        if flaw.is_none() {
            for (c, chunk) in model.chunks.iter().enumerate().rev() {
                predicted = chunk.place(size, align).map(|(o, t)| (c, o, t));
                if predicted.is_ok() {
                    break;
                }
            }
        }
        let allocation = match (result, flaw) {
            (Ok(a), Some(flaw)) => panic!("{a:?}, not {flaw:?}"),
            (Err(error), Some(flaw)) => {
                assert_eq!(error, flaw);
                return false;
            }
            (Err(error), None) => {
                let ok = match &error {
                    Error::DeviceLost if !self.lost => false,
                    _ if model.grow => {
                        self.check_driver_asked(&error, &device.counters, &(size, align));
                        self.memory_error_ok(&error, &device)
                    }
                    Error::UploadRingTooSmall {
                        size: s,
                        capacity: c,
                    } => (*s, *c) == (size, capacity) && size > capacity,
                    // Space held by frames not collected; an empty ring
                    // has room for anything its chunk holds.
                    Error::UploadRingFull { size: s, free } => {
                        *s == size
                            && size <= capacity
                            && !model.live.is_empty()
                            && predicted == Err(*free)
                    }
                    _ => false,
                };
                assert!(
                    ok,
                    "ring_allocate{}({size}, {align}) on a ring of {capacity} (grow {}, {} \
                     live): {error:?}, the model {predicted:?}",
                    if mutable { "_mut" } else { "" },
                    model.grow,
                    model.live.len()
                );
                // A ring with room grows for nothing.
                assert!(predicted.is_err(), "{error:?}, the model {predicted:?}");
                if let Error::UploadRingTooSmall { .. } | Error::UploadRingFull { .. } = error {
                    assert_eq!(tally(&self.allocator.stats()), before);
                }
                assert!(self.device.live_allocations().len() <= device.objects);
                return false;
            }
            (Ok(a), None) => a,
        };
        assert_eq!(allocation.size(), size, "{allocation:?}");
        assert_eq!(allocation.frame(), self.next_frame, "{allocation:?}");
        assert_eq!(
            allocation.buffer_offset() % align,
            0,
            "{allocation:?} not at {align}"
        );
        let known = self.rings[i]
            .chunks
            .iter()
            .position(|c| c.buffer == Some(allocation.buffer()));
        let c = match known {
            Some(c) => {
                assert_eq!(
                    tally(&self.allocator.stats()),
                    before,
                    "a chunk made in vain"
                );
                c
            }
            None => {
                // The first allocation in a chunk: the one not placed yet
                // (made with the ring) or a new one (the ring grew).
                let grown = tally(&self.allocator.stats()) != before;
                if grown {
                    assert!(self.rings[i].grow, "a ring that does not grow grew");
                    let capacity = self.rings[i].chunk_size.max(size);
                    let (buffer_usage, host_access) =
                        (self.rings[i].buffer_usage, self.rings[i].host_access);
                    let chunk = self.new_chunk(&before, capacity, buffer_usage, host_access);
                    self.rings[i].chunks.push(chunk);
                    self.rings[i].chunks.len() - 1
                } else {
                    let unplaced = self.rings[i].chunks.iter().position(|c| c.buffer.is_none());
                    unplaced.unwrap_or_else(|| panic!("{allocation:?} in an unknown chunk"))
                }
            }
        };
        let placed = match predicted {
            Ok((pc, offset, taken)) => {
                assert_eq!(
                    (c, allocation.buffer_offset()),
                    (pc, offset),
                    "{allocation:?}: the model has chunk {pc} at {offset}"
                );
                taken
            }
            Err(_) => {
                assert_eq!(c + 1, self.rings[i].chunks.len(), "{allocation:?}: no room");
                assert_eq!(
                    allocation.buffer_offset(),
                    0,
                    "{allocation:?} in a new chunk"
                );
                size
            }
        };
        let frame = self.next_frame;
        // A chunk starts at its buffer's alignment and at its ring's
        // min_alignment, 256 by default for a device-address ring
        // (`UploadRingDesc::min_alignment`).
        let ring = &self.rings[i];
        let buffer_alignment = self.layout.buffer_requirements.alignment(ring.buffer_usage);
        let least = match ring.min_alignment {
            0 if ring.device_address => 256,
            asked => asked.max(1),
        };
        let asks = ring.host_access || !self.config.strict_host_access;
        let chunk = &mut self.rings[i].chunks[c];
        assert!(
            allocation.buffer_offset() + size <= chunk.capacity,
            "{allocation:?} past its chunk of {}",
            chunk.capacity
        );
        chunk.head = allocation.buffer_offset() + size;
        chunk.used.push((frame, placed));
        // Mapped exactly in memory the host sees, but with
        // `strict_host_access` only for a ring the host writes or reads.
        let props = self.layout.memory_types[chunk.held.memory_type as usize].props;
        assert_eq!(
            allocation.mapped_ptr().is_some(),
            props.contains(Props::HOST_VISIBLE) && asks,
            "{allocation:?}"
        );
        let offset = allocation.memory_offset() - allocation.buffer_offset();
        if chunk.buffer.is_none() {
            let memory = allocation.memory();
            let info = self.device.live_allocations();
            let info = info.iter().find(|m| m.memory == memory);
            let info = info.unwrap_or_else(|| panic!("{allocation:?} in no memory"));
            assert_eq!(info.memory_type, chunk.held.memory_type, "{allocation:?}");
            chunk.buffer = Some(allocation.buffer());
            chunk.held.memory = memory;
            chunk.held.offset = offset;
            assert_eq!(
                offset % least,
                0,
                "{allocation:?}: off its ring's min_alignment"
            );
            assert_eq!(
                offset % buffer_alignment,
                0,
                "{allocation:?}: off its buffer's alignment"
            );
            if chunk.held.dedicated {
                assert_eq!(offset, 0);
            }
        } else {
            assert_eq!(
                (chunk.held.memory, chunk.held.offset),
                (allocation.memory(), offset)
            );
        }
        // Its chunk's buffer address (its memory's, at the buffer's
        // offset there) and its offset in the buffer, exactly when the
        // ring's buffers take device addresses.
        let address = self.rings[i].device_address.then(|| {
            let memory = self.device.memory_address(allocation.memory());
            let memory = memory.unwrap_or_else(|| panic!("{allocation:?}: no memory address"));
            memory + allocation.memory_offset()
        });
        assert_eq!(
            allocation.device_address(),
            address,
            "{allocation:?}: its device address"
        );
        self.rings[i].live.push((allocation, None));
        true
    }
}
