//! The walk's copies: `copy_to_allocation` and `copy_from_allocation` on
//! live allocations (mostly host-visible ones, on coherent and
//! non-coherent types alike), on the foreign allocation, in range and past
//! the end. A copy in writes a pattern that the host, "the GPU" (the fake
//! device's copy of non-coherent memory, which only a flush updates) and a
//! copy out then read back; a copy out reads what "the GPU" wrote (which
//! only an invalidate brings to the host on non-coherent memory); a
//! refused copy gets the exact error, in the order owner, range, host
//! access, and changes no byte on either side.

use vk_suballoc::device::fake::FakeDevice;
use vk_suballoc::{Allocation, Error};

use super::{FakeAllocator, Walk};

/// The most bytes one copy moves: allocations reach hundreds of MiB.
const MAX_COPY: u64 = 64 << 10;

/// What a copy is aimed at: a live allocation of the walk (its index), or
/// the foreign allocator's.
#[derive(Clone, Copy, Debug)]
enum Target {
    Live(usize),
    Foreign,
}

/// The host's bytes of `a` in `offset..offset + len`, as far as they
/// exist; none when it has no pointer.
fn host_bytes(allocator: &FakeAllocator, a: &Allocation, offset: u64, len: usize) -> Vec<u8> {
    let Ok(bytes) = allocator.mapped_slice(a) else {
        return Vec::new();
    };
    let start = offset.min(bytes.len() as u64) as usize;
    let end = start + len.min(bytes.len() - start);
    bytes[start..end].to_vec()
}

impl Walk {
    /// One copy in or out, or a GPU write read back with a copy out.
    pub(super) fn copy_access(&mut self) {
        let target = self.draw_copy_target();
        let (size, host, tag) = match target {
            Target::Live(i) => {
                let live = &self.live[i];
                let size = live.allocation.size();
                (size, live.allocation.mapped_ptr().is_some(), live.tag)
            }
            Target::Foreign => (self.foreign.allocation.size(), false, None),
        };
        let (offset, len) = self.draw_copy_range(size);
        let end = offset.saturating_add(len as u64);
        let expected = match target {
            Target::Foreign => Err(Error::ForeignAllocation),
            _ if end > size => Err(Error::RangeOutOfBounds {
                start: offset,
                end,
                size,
            }),
            _ if !host => Err(Error::NotHostVisible),
            _ => Ok(()),
        };
        let pattern = self.copy_pattern(offset, len, size, tag);
        match self.rng.below(3) {
            0 => self.copy_in(target, offset, &pattern, expected),
            1 if expected.is_ok() => self.gpu_write_copied_out(target, offset, &pattern),
            _ => self.copy_out(target, offset, len, tag, expected),
        }
    }

    /// Mostly a host-visible live allocation; now and then any live one,
    /// or the foreign allocation.
    fn draw_copy_target(&mut self) -> Target {
        let host: Vec<usize> = (0..self.live.len())
            .filter(|&i| self.live[i].tag.is_some())
            .collect();
        let live = self.live.len() as u64;
        match self.rng.below(16) {
            0 => Target::Foreign,
            1..=3 if live > 0 => Target::Live(self.rng.below(live) as usize),
            _ if !host.is_empty() => Target::Live(host[self.rng.below(host.len() as u64) as usize]),
            _ if live > 0 => Target::Live(self.rng.below(live) as usize),
            _ => Target::Foreign,
        }
    }

    /// A copy's offset and length in an allocation of `size` bytes: mostly
    /// in range (empty at times, up to the last byte at times); one time in
    /// eight past the end: from inside it, from beyond it (even with no
    /// byte), or with an end that overflows `u64`.
    fn draw_copy_range(&mut self, size: u64) -> (u64, usize) {
        let rng = &mut self.rng;
        let (offset, len) = match rng.below(8) {
            0 => match rng.below(3) {
                0 => {
                    let offset = size - rng.below(size.min(MAX_COPY) + 1);
                    (offset, size - offset + 1 + rng.below(64))
                }
                1 => (size + 1 + rng.below(1024), rng.below(16)),
                _ => (u64::MAX - rng.below(8), 1 + rng.below(16)),
            },
            1 => {
                let len = 1 + rng.below(size.min(MAX_COPY));
                (size - len, len)
            }
            _ => {
                let offset = rng.below(size + 1);
                (offset, rng.below((size - offset).min(MAX_COPY) + 1))
            }
        };
        (offset, len as usize)
    }

    /// `len` bytes of a pattern, new at each step, for `offset` of an
    /// allocation of `size` bytes; the walk's `tag` where they cover its
    /// first or last byte, which keep it.
    fn copy_pattern(&self, offset: u64, len: usize, size: u64, tag: Option<u8>) -> Vec<u8> {
        let seed = self.step as u8;
        (0..len as u64)
            .map(|k| match offset.checked_add(k) {
                Some(at) if at == 0 || at == size - 1 => tag.unwrap_or(0),
                _ => seed.wrapping_add((k as u8).wrapping_mul(31)) | 1,
            })
            .collect()
    }

    /// The allocator, the device and the allocation a copy is aimed at.
    fn aimed(&mut self, target: Target) -> (&FakeAllocator, &FakeDevice, &mut Allocation) {
        let a = match target {
            Target::Live(i) => &mut self.live[i].allocation,
            Target::Foreign => &mut self.foreign.allocation,
        };
        (&self.allocator, &self.device, a)
    }

    /// `copy_to_allocation` of `pattern` at `offset`: on success the host
    /// reads it, "the GPU" reads it (flushed, on non-coherent memory), and
    /// a copy out returns it; refused with `expected`, no byte changes.
    fn copy_in(
        &mut self,
        target: Target,
        offset: u64,
        pattern: &[u8],
        expected: Result<(), Error>,
    ) {
        let ctx = self.ctx();
        let len = pattern.len();
        let (allocator, device, a) = self.aimed(target);
        let before = host_bytes(allocator, a, offset, len);
        let result = allocator.copy_to_allocation(a, offset, pattern);
        assert_eq!(
            result, expected,
            "{ctx}: a copy of {len} bytes into {a:?} at {offset}"
        );
        let host = host_bytes(allocator, a, offset, len);
        if expected.is_err() {
            assert!(
                host == before,
                "{ctx}: a refused copy into {a:?} at {offset} changed its bytes"
            );
            return;
        }
        assert!(
            host == pattern,
            "{ctx}: the host's bytes of {a:?} at {offset}"
        );
        // SAFETY: no slice over the fake memory is alive across the read.
        let gpu = unsafe { device.read(a.memory(), a.offset() + offset, len) };
        assert!(
            gpu.as_deref() == Some(pattern),
            "{ctx}: the GPU does not see a copy into {a:?} at {offset}: not flushed"
        );
        let mut out = vec![0; len];
        let result = allocator.copy_from_allocation(a, offset, &mut out);
        assert_eq!(result, Ok(()), "{ctx}: a copy out of {a:?} at {offset}");
        assert!(
            out == pattern,
            "{ctx}: {a:?} at {offset} did not round-trip"
        );
    }

    /// "The GPU" writes `pattern` at `offset` of a host-visible live
    /// allocation; a copy out, which invalidates first, reads it back, and
    /// leaves the host seeing it.
    fn gpu_write_copied_out(&mut self, target: Target, offset: u64, pattern: &[u8]) {
        let ctx = self.ctx();
        let len = pattern.len();
        let (allocator, device, a) = self.aimed(target);
        // SAFETY: no slice over the fake memory is alive across the write.
        let written = unsafe { device.write(a.memory(), a.offset() + offset, pattern) };
        assert!(written, "{ctx}: the GPU cannot write {a:?} at {offset}");
        let mut out = vec![0; len];
        let result = allocator.copy_from_allocation(a, offset, &mut out);
        assert_eq!(result, Ok(()), "{ctx}: a copy out of {a:?} at {offset}");
        assert!(
            out == pattern,
            "{ctx}: a copy out of {a:?} at {offset} misses the GPU's bytes: not invalidated"
        );
        let host = host_bytes(allocator, a, offset, len);
        assert!(
            host == pattern,
            "{ctx}: the host's bytes of {a:?} at {offset}"
        );
    }

    /// `copy_from_allocation` of `len` bytes at `offset`: on success, the
    /// host's bytes there, with the walk's `tag` at the allocation's ends;
    /// refused with `expected`, the destination stays as it was.
    fn copy_out(
        &mut self,
        target: Target,
        offset: u64,
        len: usize,
        tag: Option<u8>,
        expected: Result<(), Error>,
    ) {
        let ctx = self.ctx();
        let (allocator, _, a) = self.aimed(target);
        let size = a.size();
        let mut out = vec![0xa5; len];
        let result = allocator.copy_from_allocation(a, offset, &mut out);
        assert_eq!(
            result, expected,
            "{ctx}: a copy of {len} bytes out of {a:?} at {offset}"
        );
        if expected.is_err() {
            assert!(
                out.iter().all(|&b| b == 0xa5),
                "{ctx}: a refused copy out of {a:?} wrote its destination"
            );
            return;
        }
        assert!(
            out == host_bytes(allocator, a, offset, len),
            "{ctx}: a copy out of {a:?} at {offset} differs from the host's bytes"
        );
        let tag = tag.unwrap_or_default();
        if offset == 0 && len > 0 {
            assert_eq!(out[0], tag, "{ctx}: the first byte of {a:?}");
        }
        if len > 0 && offset + len as u64 == size {
            assert_eq!(out[len - 1], tag, "{ctx}: the last byte of {a:?}");
        }
    }
}
