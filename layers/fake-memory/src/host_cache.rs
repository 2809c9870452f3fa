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
//!   is where the GPU reads them;
//! - an invalidate copies device memory (what the GPU wrote) into the cache;
//! - unmapping and freeing drop the cache without writing it back, as
//!   `vkUnmapMemory` does not flush.
//!
//! So host writes reach the GPU only through a flush, and GPU writes reach
//! the host only through an invalidate, as on a GPU whose host cache is never
//! written back or refilled on its own. The cache is at least as strict as
//! real hardware, which may also write back or refill lines at any time.
//!
//! The cache's first byte lies at the same offset within a 4 KiB page as the
//! driver's pointer, so the application's pointer keeps every alignment the
//! driver's has up to a page, `minMemoryMapAlignment` included.

use std::collections::HashMap;
use std::sync::Mutex;

use ash::vk;
use ash::vk::Handle;

use crate::memory_accounting::lock;

/// The alignment of the driver's pointer that the cache keeps: a page, the
/// largest `minMemoryMapAlignment` drivers report.
const PAGE: usize = 4096;

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
    fn overlap(&self, offset: u64, size: u64) -> Option<std::ops::Range<usize>> {
        let map_end = self.offset + self.len as u64;
        let end = if size == vk::WHOLE_SIZE {
            map_end
        } else {
            offset.saturating_add(size).min(map_end)
        };
        let start = offset.max(self.offset);
        (start < end).then(|| (start - self.offset) as usize..(end - self.offset) as usize)
    }
}

/// The cached mappings of one device.
#[derive(Debug, Default)]
pub struct HostCache {
    mappings: Mutex<HashMap<u64, CachedMapping>>,
}

impl HostCache {
    /// Puts a cache in front of the driver's mapping of `size` bytes (not
    /// `VK_WHOLE_SIZE`) at `offset` of `memory`, filled from it; returns the
    /// pointer the application gets.
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
    ) -> *mut u8 {
        let len = size as usize;
        let storage = Box::into_raw(vec![0u8; len + PAGE].into_boxed_slice());
        let base = storage.cast::<u8>() as usize;
        let start = (device as usize).wrapping_sub(base) % PAGE;
        let mapping = CachedMapping {
            device,
            offset,
            storage,
            start,
            len,
        };
        let pointer = mapping.cache();
        // SAFETY: `device` is valid for `size` bytes by the contract; the
        // cache holds `len` bytes from `pointer` and is new.
        unsafe { std::ptr::copy_nonoverlapping(device, pointer, len) };
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
        let mappings = lock(&self.mappings);
        for range in ranges {
            let Some(mapping) = mappings.get(&range.memory.as_raw()) else {
                continue;
            };
            let Some(bytes) = mapping.overlap(range.offset, range.size) else {
                continue;
            };
            // SAFETY: `bytes` lies within the mapping, which the driver's
            // mapping and the cache both cover.
            let (device, cache) = unsafe {
                (
                    mapping.device.add(bytes.start),
                    mapping.cache().add(bytes.start),
                )
            };
            // SAFETY: both sides hold `bytes.len()` bytes and do not overlap
            // (the cache is the layer's own allocation). Raw pointers only:
            // the application may be using other bytes of the cache.
            unsafe {
                match direction {
                    Direction::ToDevice => {
                        std::ptr::copy_nonoverlapping(cache, device, bytes.len());
                    }
                    Direction::FromDevice => {
                        std::ptr::copy_nonoverlapping(device, cache, bytes.len());
                    }
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
            let host = cache.map(memory, device_bytes.add(64), 64, 192);
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

    #[test]
    fn ranges_outside_a_mapping_or_of_other_memory_copy_nothing() {
        let memory = vk::DeviceMemory::from_raw(1);
        let mut device_bytes = vec![0u8; 128];
        let cache = HostCache::default();
        // SAFETY: `device_bytes` outlives the mapping.
        let host = unsafe { cache.map(memory, device_bytes.as_mut_ptr(), 0, 64) };
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
