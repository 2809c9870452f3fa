//! Non-coherent memory made visible: a host "cache" in front of every mapping
//! of a fake type that is `HOST_VISIBLE` but not `HOST_COHERENT`.
//!
//! Lavapipe's memory is coherent, so on its own a missing
//! `vkFlushMappedMemoryRanges` or `vkInvalidateMappedMemoryRanges` changes
//! nothing and no test could catch one. For such fake types the layer hands
//! the application a pointer to a private copy of the mapped range (the
//! "cache") instead of the driver's pointer:
//!
//! - mapping fills the cache from device memory;
//! - a flush copies the flushed bytes from the cache to device memory, which
//!   is where the GPU reads them: each `nonCoherentAtomSize` set of bytes
//!   (counted from the start of the memory object) of the range that the
//!   host wrote a byte of, whole, and no other ("those bytes must not be
//!   flushed", `vkFlushMappedMemoryRanges`), so a flush over bytes only the
//!   GPU wrote keeps them, and a GPU byte in an atom the host wrote is
//!   overwritten with the cache's stale one, as a dirty cache line is
//!   written back whole;
//! - an invalidate copies device memory (what the GPU wrote) into the cache;
//! - unmapping and freeing drop the cache without writing it back, as
//!   `vkUnmapMemory` does not flush.
//!
//! So host writes reach the GPU only through a flush, and GPU writes reach
//! the host only through an invalidate, as on a GPU whose host cache is never
//! written back or refilled on its own. The cache is at least as strict as
//! real hardware, which may also write back or refill lines at any time.
//!
//! The layer cannot see the host's writes, so an atom counts as written
//! when a byte of it differs from what the cache last took from or gave to
//! device memory (a "clean" copy): a host write of the value a byte
//! already had goes unseen, and its atom unflushed. So that such a write
//! is never one of an application's ordinary fills, new memory of these
//! types starts out holding [`fill_fresh_memory`]'s pattern, in which no
//! two neighbouring bytes are equal, rather than what the driver's memory
//! held before: lavapipe hands out freed memory again uncleared, and a
//! test filling a buffer with the value an earlier test had left at that
//! place saw its flush dropped and the GPU's older bytes come back.
//!
//! The cache's first byte lies at the same offset within a 4 KiB page as the
//! driver's pointer, so the application's pointer keeps every alignment the
//! driver's has up to a page, `minMemoryMapAlignment` included.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Mutex;

use ash::vk;
use ash::vk::Handle;

use crate::memory_accounting::lock;

/// The alignment of the driver's pointer that the cache keeps: a page, the
/// largest `minMemoryMapAlignment` drivers report.
const PAGE: usize = 4096;

/// The bytes new memory of a non-coherent fake type starts out with,
/// repeated: [`fill_fresh_memory`].
static FRESH_PATTERN: [u8; PAGE] = fresh_pattern();

/// A page of bytes from a fixed pseudo-random sequence (SplitMix64's
/// mixer over the byte's index), in which no byte equals the one before it,
/// nor the last byte the first (the page repeats): a write of one value
/// over two or more neighbouring bytes always changes one of them.
const fn fresh_pattern() -> [u8; PAGE] {
    let mut bytes = [0u8; PAGE];
    let mut i = 0;
    while i < PAGE {
        let mut z = (i as u64)
            .wrapping_add(1)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let mut byte = z as u8;
        // Stepped past the byte before it and, for the last, the first.
        while (i > 0 && byte == bytes[i - 1]) || (i == PAGE - 1 && byte == bytes[0]) {
            byte = byte.wrapping_add(1);
        }
        bytes[i] = byte;
        i += 1;
    }
    bytes
}

/// Writes the fresh-memory pattern over `len` bytes at `device`, the
/// driver's pointer to the start of a new memory object of a non-coherent
/// fake type, before the application can see it: byte `o` of the memory
/// gets `FRESH_PATTERN[o % 4096]`. The contents of new memory are not
/// defined, so any bytes will do; these make a host write of one value
/// over an atom (two or more bytes) always differ from the "clean" copy a
/// later mapping takes, so its flush writes it back.
///
/// # Safety
/// `device` is valid for writes of `len` bytes, which nothing else reads
/// or writes during the call.
pub unsafe fn fill_fresh_memory(device: *mut u8, len: usize) {
    let mut done = 0;
    while done < len {
        let chunk = PAGE.min(len - done);
        // SAFETY: `done + chunk <= len` bytes from `device` are writable
        // (the contract); the pattern is the layer's own static.
        unsafe { std::ptr::copy_nonoverlapping(FRESH_PATTERN.as_ptr(), device.add(done), chunk) };
        done += chunk;
    }
}

/// One cached mapping.
#[derive(Debug)]
struct CachedMapping {
    /// The driver's pointer to byte `offset` of the memory object (the
    /// mapping outlives the entry: both end together).
    device: *mut u8,
    /// Offset of the mapping in the memory object.
    offset: u64,
    /// The layer's allocation (a leaked `Box<[u8]>`, freed on drop) that
    /// holds the bytes the application sees, `start..start + len` of it.
    /// A raw pointer, not a `Box`: the application reads and writes these
    /// bytes through the pointer it was given while the entry lives, and a
    /// `Box` claims unique access, so each move of the entry (into the
    /// map, on its growth) would invalidate that pointer (Miri reports it).
    storage: *mut [u8],
    /// Index in `storage` of the mapping's first byte: at the driver
    /// pointer's offset within a page.
    start: usize,
    /// Bytes mapped.
    len: usize,
    /// The mapped bytes as the cache last took them from or gave them to
    /// device memory: a byte of the cache that differs was written by the
    /// host since. The layer's alone (the application never sees it).
    clean: Vec<u8>,
    /// `nonCoherentAtomSize` as the layer reports it (at least 1).
    atom: u64,
}

// SAFETY: the entry owns `storage` (a plain byte allocation, freed only by
// its `Drop`) and `device` points into the driver's mapping; the bytes
// behind both are shared with the application, which synchronises its host
// accesses with the flushes and invalidates the layer forwards, on any
// thread (the host access rules of mapped memory). Nothing in the entry is
// tied to a thread.
unsafe impl Send for CachedMapping {}

impl Drop for CachedMapping {
    fn drop(&mut self) {
        // SAFETY: `storage` came from `Box::into_raw` and is freed only
        // here; the application's pointer into it is invalid once the
        // memory is unmapped or freed, which is when the entry goes.
        drop(unsafe { Box::from_raw(self.storage) });
    }
}

impl CachedMapping {
    /// The pointer to the first byte the application sees.
    fn cache(&self) -> *mut u8 {
        // SAFETY: `start + len` lies within `storage` (`map` makes it
        // `len + PAGE` bytes long, `start < PAGE`).
        unsafe { self.storage.cast::<u8>().add(self.start) }
    }

    /// The part of `[offset, offset + size)` (in the memory object,
    /// `VK_WHOLE_SIZE` reaching the end of the mapping) that this mapping
    /// covers, as a range of cache indices.
    fn overlap(&self, offset: u64, size: u64) -> Option<Range<usize>> {
        let map_end = self.offset + self.len as u64;
        let end = if size == vk::WHOLE_SIZE {
            map_end
        } else {
            offset.saturating_add(size).min(map_end)
        };
        let start = offset.max(self.offset);
        (start < end).then(|| (start - self.offset) as usize..(end - self.offset) as usize)
    }

    /// Writes back the atoms of `bytes` (cache indices) that the host
    /// wrote a byte of, whole, and marks them clean.
    ///
    /// # Safety
    /// The driver's mapping is still mapped; `bytes` lies within the mapping.
    unsafe fn flush(&mut self, bytes: Range<usize>) {
        let (device, cache) = (self.device, self.cache());
        for atom in atoms(self.offset, self.atom, bytes) {
            // SAFETY: the atom lies within the cache (the contract); read
            // through a fresh shared slice, not kept past this statement.
            let now = unsafe { std::slice::from_raw_parts(cache.add(atom.start), atom.len()) };
            if now == &self.clean[atom.clone()] {
                continue;
            }
            self.clean[atom.clone()].copy_from_slice(now);
            // SAFETY: the driver's mapping holds the atom's bytes too; the
            // copies do not overlap (`clean` is the layer's own).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.clean[atom.clone()].as_ptr(),
                    device.add(atom.start),
                    atom.len(),
                );
            }
        }
    }

    /// Refills `bytes` (cache indices) from device memory, and marks them
    /// clean.
    ///
    /// # Safety
    /// The driver's mapping is still mapped; `bytes` lies within the mapping.
    unsafe fn invalidate(&mut self, bytes: Range<usize>) {
        let (device, cache) = (self.device, self.cache());
        // SAFETY: both hold the bytes (the contract); `clean` is the layer's
        // own, so neither copy overlaps. Raw pointers for the cache: the
        // application may be using other bytes of it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                device.add(bytes.start),
                self.clean[bytes.clone()].as_mut_ptr(),
                bytes.len(),
            );
            std::ptr::copy_nonoverlapping(
                self.clean[bytes.clone()].as_ptr(),
                cache.add(bytes.start),
                bytes.len(),
            );
        }
    }
}

/// `bytes` (indices in a mapping at `offset` of its memory object) cut at
/// the boundaries of the memory object's atoms of `atom` (non-zero) bytes,
/// in order.
fn atoms(offset: u64, atom: u64, bytes: Range<usize>) -> impl Iterator<Item = Range<usize>> {
    let mut start = bytes.start;
    std::iter::from_fn(move || {
        if start >= bytes.end {
            return None;
        }
        let in_memory = offset + start as u64;
        let atom_end = (in_memory / atom + 1).saturating_mul(atom);
        let end = usize::try_from(atom_end - offset)
            .unwrap_or(usize::MAX)
            .min(bytes.end);
        let cut = start..end;
        start = end;
        Some(cut)
    })
}

/// The cached mappings of one device.
#[derive(Debug, Default)]
pub struct HostCache {
    mappings: Mutex<HashMap<u64, CachedMapping>>,
}

impl HostCache {
    /// Puts a cache in front of the driver's mapping of `size` bytes (not
    /// `VK_WHOLE_SIZE`) at `offset` of `memory`, filled from it; returns the
    /// pointer the application gets. Flushes write back whole atoms of
    /// `atom` bytes (`nonCoherentAtomSize`; 0 is taken as 1).
    ///
    /// # Safety
    /// `device` is the driver's pointer to that mapping, valid for reads of
    /// `size` bytes until [`forget`](Self::forget) (called as the memory is
    /// unmapped or freed).
    pub unsafe fn map(
        &self,
        memory: vk::DeviceMemory,
        device: *mut u8,
        offset: u64,
        size: u64,
        atom: u64,
    ) -> *mut u8 {
        let len = size as usize;
        let storage = Box::into_raw(vec![0u8; len + PAGE].into_boxed_slice());
        let base = storage.cast::<u8>() as usize;
        let start = (device as usize).wrapping_sub(base) % PAGE;
        let mut mapping = CachedMapping {
            device,
            offset,
            storage,
            start,
            len,
            clean: vec![0; len],
            atom: atom.max(1),
        };
        let pointer = mapping.cache();
        // SAFETY: `device` is valid for `size` bytes by the contract; the
        // cache and `clean` hold `len` bytes each and are new.
        unsafe {
            std::ptr::copy_nonoverlapping(device, mapping.clean.as_mut_ptr(), len);
            std::ptr::copy_nonoverlapping(device, pointer, len);
        }
        lock(&self.mappings).insert(memory.as_raw(), mapping);
        pointer
    }

    /// Whether `memory` has a cache, that is, is mapped through one.
    pub fn is_mapped(&self, memory: vk::DeviceMemory) -> bool {
        lock(&self.mappings).contains_key(&memory.as_raw())
    }

    /// Drops the cache of `memory` (unmapped or freed); nothing is written back.
    pub fn forget(&self, memory: vk::DeviceMemory) {
        lock(&self.mappings).remove(&memory.as_raw());
    }

    /// `vkFlushMappedMemoryRanges`: copies the flushed bytes of cached
    /// mappings to device memory.
    ///
    /// # Safety
    /// Every cached mapping is still mapped by the driver.
    pub unsafe fn flush(&self, ranges: &[vk::MappedMemoryRange<'_>]) {
        // SAFETY: the contract.
        unsafe { self.copy(ranges, Direction::ToDevice) }
    }

    /// `vkInvalidateMappedMemoryRanges`: refills the invalidated bytes of
    /// cached mappings from device memory.
    ///
    /// # Safety
    /// Every cached mapping is still mapped by the driver.
    pub unsafe fn invalidate(&self, ranges: &[vk::MappedMemoryRange<'_>]) {
        // SAFETY: the contract.
        unsafe { self.copy(ranges, Direction::FromDevice) }
    }

    /// Copies the bytes of `ranges` that cached mappings cover, between
    /// each cache and device memory.
    ///
    /// # Safety
    /// Every cached mapping is still mapped by the driver.
    unsafe fn copy(&self, ranges: &[vk::MappedMemoryRange<'_>], direction: Direction) {
        let mut mappings = lock(&self.mappings);
        for range in ranges {
            let Some(mapping) = mappings.get_mut(&range.memory.as_raw()) else {
                continue;
            };
            let Some(bytes) = mapping.overlap(range.offset, range.size) else {
                continue;
            };
            // SAFETY: `bytes` lies within the mapping, which the driver's
            // mapping (still mapped, the contract) and the cache both cover.
            unsafe {
                match direction {
                    Direction::ToDevice => mapping.flush(bytes),
                    Direction::FromDevice => mapping.invalidate(bytes),
                }
            }
        }
    }
}

/// Which way [`HostCache::copy`] moves bytes.
#[derive(Clone, Copy, Debug)]
enum Direction {
    /// Cache to device memory: a flush.
    ToDevice,
    /// Device memory to cache: an invalidate.
    FromDevice,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests' `nonCoherentAtomSize`.
    const ATOM: u64 = 64;

    fn range(memory: vk::DeviceMemory, offset: u64, size: u64) -> vk::MappedMemoryRange<'static> {
        vk::MappedMemoryRange::default()
            .memory(memory)
            .offset(offset)
            .size(size)
    }

    /// Reads `len` bytes at `at`.
    ///
    /// # Safety
    /// `at` is valid for reads of `len` bytes.
    unsafe fn bytes(at: *const u8, len: usize) -> Vec<u8> {
        // SAFETY: the contract.
        unsafe { std::slice::from_raw_parts(at, len) }.to_vec()
    }

    /// No byte of the fresh-memory pattern equals its neighbour, across the
    /// page's repeat too, and the fill lays the pattern by offset in the
    /// memory, over a length that is not a whole number of pages.
    #[test]
    fn fresh_memory_has_no_two_equal_neighbours() {
        // One repeat of the page under Miri (it interprets each byte's
        // checks: three pages took 31 s there), three natively.
        let pages = if cfg!(miri) { 1 } else { 3 };
        let len = pages * PAGE + 1000;
        let mut memory = vec![0u8; len];
        // SAFETY: `len` writable bytes of the test's own.
        unsafe { fill_fresh_memory(memory.as_mut_ptr(), len) };
        for (offset, pair) in memory.windows(2).enumerate() {
            assert_ne!(pair[0], pair[1], "bytes {offset} and {}", offset + 1);
        }
        assert!(memory
            .iter()
            .enumerate()
            .all(|(o, &b)| b == FRESH_PATTERN[o % PAGE]));
        let distinct = FRESH_PATTERN
            .iter()
            .collect::<std::collections::HashSet<_>>()
            .len();
        assert_eq!(distinct, 256, "every byte value appears");
    }

    /// The application and the "GPU" reach the cache and the device bytes
    /// through raw pointers only, as a C application and a driver do while
    /// the layer holds the cache (run it under Miri: a reference held
    /// across the layer's calls would be the test's own aliasing error).
    #[test]
    fn host_writes_need_a_flush_and_device_writes_an_invalidate() {
        let memory = vk::DeviceMemory::from_raw(7);
        let device_bytes = Box::into_raw(vec![1u8; 256].into_boxed_slice()).cast::<u8>();
        let cache = HostCache::default();
        // SAFETY: `device_bytes` holds 256 bytes and outlives the mapping
        // (forgotten below, then freed); the cache holds 192 bytes from
        // `host`, mapped from offset 64: cache index i is memory offset
        // 64 + i.
        unsafe {
            let host = cache.map(memory, device_bytes.add(64), 64, 192, 16);
            assert_eq!(bytes(host, 192), [1; 192]);
            host.write_bytes(2, 64);
            assert_eq!(
                device_bytes.add(64).read(),
                1,
                "written back without a flush"
            );
            cache.flush(&[range(memory, 96, 16)]);
            assert_eq!(bytes(device_bytes.add(64), 32), [1; 32]);
            assert_eq!(bytes(device_bytes.add(96), 16), [2; 16]);
            assert_eq!(bytes(device_bytes.add(112), 16), [1; 16]);
            device_bytes.add(200).write(3);
            assert_eq!(host.add(136).read(), 1, "refilled without an invalidate");
            cache.invalidate(&[range(memory, 128, vk::WHOLE_SIZE)]);
            assert_eq!(host.add(136).read(), 3);
            assert_eq!(host.read(), 2, "bytes outside the invalidated range kept");
            host.write(4);
            cache.flush(&[range(memory, 64, 1)]);
            assert_eq!(device_bytes.add(64).read(), 4);
            cache.forget(memory);
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                device_bytes,
                256,
            )));
        }
    }

    /// A flush writes back the atoms (`nonCoherentAtomSize` bytes from the
    /// start of the memory object) the host wrote a byte of, whole, and
    /// leaves the others alone ("those bytes must not be flushed",
    /// vkFlushMappedMemoryRanges): a flush over bytes the GPU wrote and the
    /// host did not keeps the GPU's bytes, while a GPU byte in an atom the
    /// host wrote is overwritten by the cache's stale one, as a dirty cache
    /// line is written back whole.
    #[test]
    fn a_flush_writes_back_only_the_atoms_the_host_wrote() {
        let memory = vk::DeviceMemory::from_raw(3);
        let device_bytes = Box::into_raw(vec![1u8; 256].into_boxed_slice()).cast::<u8>();
        let cache = HostCache::default();
        // SAFETY: `device_bytes` holds 256 bytes and outlives the mapping
        // (forgotten below, then freed); the cache holds 256 bytes from
        // `host`, mapped from offset 0.
        unsafe {
            let host = cache.map(memory, device_bytes, 0, 256, ATOM);
            // The GPU writes a byte of two atoms; the host one of the first.
            device_bytes.add(20).write(3);
            device_bytes.add(200).write(3);
            host.add(10).write(2);
            cache.flush(&[range(memory, 0, vk::WHOLE_SIZE)]);
            assert_eq!(device_bytes.add(10).read(), 2, "the host's write");
            assert_eq!(
                device_bytes.add(20).read(),
                1,
                "the rest of a written atom is written back too"
            );
            assert_eq!(
                device_bytes.add(200).read(),
                3,
                "an atom the host did not write was flushed over the GPU's write"
            );
            // Flushed atoms are clean again: the GPU's next write survives
            // a flush after a host write elsewhere.
            device_bytes.add(30).write(5);
            host.add(100).write(2);
            cache.flush(&[range(memory, 0, vk::WHOLE_SIZE)]);
            assert_eq!(bytes(device_bytes.add(30), 1), [5]);
            assert_eq!(bytes(device_bytes.add(100), 1), [2]);
            // An invalidated atom is clean: flushing it keeps the GPU's bytes.
            device_bytes.add(140).write(6);
            cache.invalidate(&[range(memory, 128, 64)]);
            device_bytes.add(141).write(7);
            cache.flush(&[range(memory, 128, 64)]);
            assert_eq!(bytes(device_bytes.add(140), 2), [6, 7]);
            cache.forget(memory);
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                device_bytes,
                256,
            )));
        }
    }

    /// Atoms are counted from the start of the memory object, not of the
    /// mapping (here at its byte 100).
    #[test]
    fn atoms_are_cut_at_the_memory_objects_boundaries() {
        let cuts: Vec<Range<usize>> = atoms(100, ATOM, 0..200).collect();
        assert_eq!(cuts, [0..28, 28..92, 92..156, 156..200]);
        let cuts: Vec<Range<usize>> = atoms(100, ATOM, 30..40).collect();
        assert_eq!(cuts, vec![30..40]);
    }

    #[test]
    fn ranges_outside_a_mapping_or_of_other_memory_copy_nothing() {
        let memory = vk::DeviceMemory::from_raw(1);
        let mut device_bytes = vec![0u8; 128];
        let cache = HostCache::default();
        // SAFETY: `device_bytes` outlives the mapping.
        let host = unsafe { cache.map(memory, device_bytes.as_mut_ptr(), 0, 64, ATOM) };
        // SAFETY: the cache is 64 bytes long.
        unsafe { std::slice::from_raw_parts_mut(host, 64) }.fill(9);
        // SAFETY: still mapped.
        unsafe {
            cache.flush(&[
                range(memory, 64, 64),
                range(vk::DeviceMemory::from_raw(2), 0, 64),
            ]);
        }
        assert!(device_bytes.iter().all(|&b| b == 0));
        cache.forget(memory);
    }
}
