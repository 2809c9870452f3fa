//! Corruption detection in allocations' debug margins (VMA's
//! `VMA_DEBUG_DETECT_CORRUPTION`).
//!
//! With `Config::debug_margin`, every allocation in a block is followed by
//! at least that many bytes that no other allocation overlaps: the bytes it
//! takes in its block (its offset-allocator range, or its run slot) are
//! chosen for its size plus the margin (`place/pool_request.rs`). A write
//! past the end of a buffer then lands in its own margin instead of a
//! neighbour.
//!
//! With `Config::detect_corruption` too, in blocks of `HOST_VISIBLE |
//! HOST_COHERENT` memory types (always persistently mapped, `mapping.rs`),
//! each allocation's tail, from its end to the end of the bytes it takes
//! (the margin, and the rounding of its size to its alignment or size
//! class), is filled with a magic word when it is allocated, and checked
//! when it is freed or on demand ([`damaged_margins`](TypePool::damaged_margins)).
//! The pool remembers each guarded allocation (its offset, requested size
//! and pointer) in a table kept only for those types, so the default path
//! pays nothing but one test of a bit mask per allocation and per free.
//!
//! Only writes *after* an allocation are caught: nothing guards the bytes
//! before it (an underrun lands in the previous allocation's margin, and is
//! reported as that allocation's). Non-coherent types are left out, as in
//! VMA: reading a margin there would need an invalidate of the atoms around
//! it, which drops the allocation's own unflushed host writes.

use std::collections::HashMap;

use ash::vk::{self, Handle};

use super::{Location, Placement, TypePool};
use crate::memory::context::MemoryContext;
use crate::memory::mapping::MappedPtr;

/// The word written over margins: VMA's `VMA_CORRUPTION_DETECTION_MAGIC_VALUE`.
pub(crate) const MAGIC: u32 = 0x7F84_E666;

/// A live allocation whose tail holds the pattern.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Guarded {
    /// Its block.
    pub(crate) memory: vk::DeviceMemory,
    /// Its offset in its block.
    pub(crate) offset: u64,
    /// Its requested size: the pattern starts there.
    pub(crate) size: u64,
    /// Bytes of pattern after it: the margin at least.
    pub(crate) tail: u64,
    /// The mapped pointer of its first byte.
    mapped: MappedPtr,
}

/// The guarded allocations of one pool, by location.
pub(crate) type GuardTable = HashMap<Location, Guarded>;

/// Fills `len` bytes from `start` with [`MAGIC`] repeated (little-endian),
/// one byte write at a time, so that neither end needs alignment (the
/// last word cut short when `len` is not a multiple of 4).
///
/// # Safety
/// The `len` bytes from `start` are mapped, writable, and belong to no
/// allocation but the one guarded (its margin and size rounding).
unsafe fn write_pattern(start: *mut u8, len: u64) {
    let bytes = MAGIC.to_le_bytes();
    for i in 0..len as usize {
        // SAFETY: `i < len`, inside the range the caller vouches for; a
        // byte write needs no alignment.
        unsafe { start.add(i).write_volatile(bytes[i % 4]) };
    }
}

/// Whether the `len` bytes from `start` still hold the pattern
/// [`write_pattern`] wrote.
///
/// # Safety
/// The `len` bytes from `start` are mapped and readable.
unsafe fn pattern_intact(start: *const u8, len: u64) -> bool {
    let bytes = MAGIC.to_le_bytes();
    (0..len as usize).all(|i| {
        // SAFETY: `i < len`, inside the range the caller vouches for.
        unsafe { start.add(i).read_volatile() == bytes[i % 4] }
    })
}

impl Guarded {
    /// Whether its tail still holds the pattern.
    ///
    /// # Safety
    /// The allocation is live, so its block is mapped.
    unsafe fn intact(&self) -> bool {
        let start = self.mapped.add(self.size).0.as_ptr();
        // SAFETY: the tail lies inside the bytes the allocation takes in
        // its block (`guard_margin`), mapped while the allocation lives.
        unsafe { pattern_intact(start, self.tail) }
    }
}

impl<M> TypePool<M> {
    /// Fills the tail of `placement`, an allocation of `size` requested
    /// bytes just placed, with the pattern, and guards it: its free, and
    /// [`damaged_margins`](Self::damaged_margins), check it. `margin` is
    /// `Config::debug_margin`. Dedicated and unmapped memory are left alone.
    /// Out of line: only pools of types with detection call it.
    #[cold]
    #[inline(never)]
    pub(crate) fn guard_margin(&mut self, placement: &Placement, size: u64, margin: u64) {
        let Some(mapped) = placement.mapped else {
            return;
        };
        let Some(held) = self.held_bytes(placement.location) else {
            return;
        };
        // The tail: the margin, and the rounding of the size
        // (place/pool_request.rs asked for at least size + margin bytes).
        let tail = held.saturating_sub(size);
        debug_assert!(tail >= margin);
        let start = mapped.add(size).0.as_ptr();
        // SAFETY: the pool's block (or run slot) holds `held` bytes from
        // `mapped`, a persistently mapped host-visible block; the `tail`
        // bytes after the allocation's own are in that range, which no
        // other allocation overlaps, and the allocation was handed to
        // nobody yet.
        unsafe { write_pattern(start, tail) };
        self.guarded.insert(
            placement.location,
            Guarded {
                memory: placement.memory,
                offset: placement.offset,
                size,
                tail,
                mapped,
            },
        );
    }

    /// The bytes the live allocation at `location` takes in its block:
    /// its offset-allocator range, or its run's slot size. `None` for
    /// dedicated memory and anything not live.
    pub(super) fn held_bytes(&self, location: Location) -> Option<u64> {
        self.held_in_block(location).map(|(_, _, held)| held)
    }

    /// Before the free of the allocation at `location`, in a memory type
    /// with detection on ([`free`](Self::free)): checks its margin when it
    /// is guarded and forgets it. A damaged margin is counted in `context`
    /// and returned as the line for the caller to log with `log::error!`
    /// (name, memory type, memory object, offset, size) once the
    /// allocation is freed.
    pub(super) fn check_margin_on_free<D>(
        &mut self,
        context: &MemoryContext<D>,
        location: Location,
    ) -> Option<String> {
        let guarded = self.guarded.remove(&location)?;
        // SAFETY: `||` reads the margin only when the allocation is live.
        if !self.is_live(location) || unsafe { guarded.intact() } {
            return None;
        }
        context.count_corruption();
        Some(format!(
            "vk-suballoc: memory corruption after allocation {:?}: its {}-byte margin was written over (memory type {}, memory {:#x}, offset {}, size {}{})",
            self.name_at(location).unwrap_or("unnamed"),
            guarded.tail,
            self.memory_type,
            guarded.memory.as_raw(),
            guarded.offset,
            guarded.size,
            self.pool_label()
        ))
    }

    /// Every guarded live allocation whose margin is damaged, with its
    /// name; and how many were checked. Forgets guarded allocations no
    /// longer live (none, unless one was freed past the checks).
    pub(crate) fn damaged_margins(&mut self) -> (u64, Vec<(Guarded, Option<&str>)>) {
        let stale: Vec<Location> = self
            .guarded
            .keys()
            .copied()
            .filter(|&location| !self.is_live(location))
            .collect();
        for location in stale {
            self.guarded.remove(&location);
        }
        let damaged = self
            .guarded
            .iter()
            // SAFETY: every entry left is live.
            .filter(|(_, guarded)| !unsafe { guarded.intact() })
            .map(|(&location, &guarded)| (guarded, self.name_at(location)))
            .collect();
        (self.guarded.len() as u64, damaged)
    }

    /// `" in custom pool \"name\""` for a custom pool, else empty: for
    /// log lines.
    pub(super) fn pool_label(&self) -> String {
        match (&self.name, self.custom) {
            (Some(name), _) => format!(" in custom pool {name:?}"),
            (None, true) => " in a custom pool".to_owned(),
            (None, false) => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{pattern_intact, write_pattern, MAGIC};

    /// The pattern reads back intact over any length, and any one byte
    /// changed in it, the last of a cut-short word included, is seen.
    #[test]
    fn every_changed_byte_of_the_pattern_is_seen() {
        for len in [0usize, 1, 3, 4, 5, 16, 31] {
            let mut bytes = vec![0u8; len + 8];
            // SAFETY: `len` bytes from offset 4 are inside the vector.
            unsafe { write_pattern(bytes.as_mut_ptr().add(4), len as u64) };
            assert_eq!(&bytes[..4], &[0; 4]);
            assert_eq!(&bytes[len + 4..], &[0; 4]);
            // SAFETY: as above.
            assert!(unsafe { pattern_intact(bytes.as_ptr().add(4), len as u64) });
            for at in 0..len {
                bytes[4 + at] ^= 0x10;
                // SAFETY: as above.
                let intact = unsafe { pattern_intact(bytes.as_ptr().add(4), len as u64) };
                assert!(!intact, "len {len}, byte {at}");
                bytes[4 + at] ^= 0x10;
            }
        }
        let mut word = [0u8; 4];
        // SAFETY: four bytes.
        unsafe { write_pattern(word.as_mut_ptr(), 4) };
        assert_eq!(u32::from_le_bytes(word), MAGIC);
    }
}
