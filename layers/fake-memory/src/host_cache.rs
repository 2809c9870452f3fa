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
    /// The driver's pointer to byte `offset` of the memory object, as an
    /// address (the mapping outlives the entry: both end together).
    device: usize,
    /// Offset of the mapping in the memory object.
    offset: u64,
    /// Holds the bytes the application sees, `storage[start..start + len]`;
    /// never moved while mapped.
    storage: Box<[u8]>,
    /// Index in `storage` of the mapping's first byte: at the driver
    /// pointer's offset within a page.
    start: usize,
    /// Bytes mapped.
    len: usize,
}

impl CachedMapping {
    /// The bytes the application sees.
    fn cache(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
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
        let storage = vec![0u8; len + PAGE].into_boxed_slice();
        let base = storage.as_ptr() as usize;
        let start = (device as usize).wrapping_sub(base) % PAGE;
        let mut mapping = CachedMapping {
            device: device as usize,
            offset,
            storage,
            start,
            len,
        };
        let cache = mapping.cache();
        // SAFETY: valid for `size` bytes by the contract; `cache` is new.
        unsafe { std::ptr::copy_nonoverlapping(device, cache.as_mut_ptr(), cache.len()) };
        let pointer = cache.as_mut_ptr();
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
            // SAFETY: the driver's mapping covers the whole cache.
            let device = unsafe { (mapping.device as *mut u8).add(bytes.start) };
            let cache = &mut mapping.cache()[bytes];
            // SAFETY: both sides hold `cache.len()` bytes and do not overlap
            // (the cache is the layer's own allocation).
            unsafe {
                match direction {
                    Direction::ToDevice => {
                        std::ptr::copy_nonoverlapping(cache.as_ptr(), device, cache.len());
                    }
                    Direction::FromDevice => {
                        std::ptr::copy_nonoverlapping(device, cache.as_mut_ptr(), cache.len());
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

    #[test]
    fn host_writes_need_a_flush_and_device_writes_an_invalidate() {
        let memory = vk::DeviceMemory::from_raw(7);
        let mut device_bytes = vec![1u8; 256];
        let cache = HostCache::default();
        // Mapped from offset 64: cache index i is memory offset 64 + i.
        // SAFETY: `device_bytes` outlives the mapping (forgotten below).
        let host = unsafe { cache.map(memory, device_bytes.as_mut_ptr().add(64), 64, 192) };
        // SAFETY: the cache is 192 bytes long.
        let host = unsafe { std::slice::from_raw_parts_mut(host, 192) };
        assert!(host.iter().all(|&b| b == 1));
        host[..64].fill(2);
        assert_eq!(device_bytes[64], 1, "written back without a flush");
        // SAFETY: still mapped.
        unsafe { cache.flush(&[range(memory, 96, 16)]) };
        assert_eq!(&device_bytes[64..96], &[1; 32]);
        assert_eq!(&device_bytes[96..112], &[2; 16]);
        assert_eq!(&device_bytes[112..128], &[1; 16]);
        device_bytes[200] = 3;
        assert_eq!(host[136], 1, "refilled without an invalidate");
        // SAFETY: still mapped.
        unsafe { cache.invalidate(&[range(memory, 128, vk::WHOLE_SIZE)]) };
        assert_eq!(host[136], 3);
        assert_eq!(host[0], 2, "bytes outside the invalidated range kept");
        cache.forget(memory);
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
