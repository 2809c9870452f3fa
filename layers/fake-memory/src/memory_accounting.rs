//! The layer's own bookkeeping of device memory: bytes in use per fake heap
//! (shared by all devices of a physical device, and reported as
//! `VK_EXT_memory_budget`'s `heapUsage`) and, per device, every live
//! `VkDeviceMemory` with its fake type, heap, size and the resource it is
//! dedicated to, if any (`dedicated_binds.rs` checks binds against it). It
//! decides whether an allocation is refused: the Nth call chosen for
//! failure, the allocation count limit, or a fake heap that would overflow.
//!
//! Imported memory counts as any other memory object, its
//! `allocationSize` from its `vkAllocateMemory` to its own `vkFreeMemory`,
//! even an import of memory this device exported and still counts: that
//! is how Mesa's drivers for the GPUs the profiles model report it. ANV
//! adds each `VkDeviceMemory`'s BO size to its heap's `used` (its
//! `heapUsage`) at allocation, imports included, though a self-import
//! shares the exporter's BO, and refuses one past the heap's size; RADV's
//! `heapUsage` is its winsys's allocated-bytes counters, to which each
//! import's new winsys BO adds its size again. (Lavapipe's `heapUsage` is
//! the system's used memory, nothing per object.)

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use ash::vk;

use crate::config::LayerConfig;
use crate::dedicated_binds::Resource;

/// Locks a mutex, carrying on if another thread panicked while holding it
/// (the data is plain counters, valid at every step).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Bytes allocated in each fake heap of one physical device.
#[derive(Debug, Default)]
pub struct HeapUsage {
    used: Mutex<[u64; vk::MAX_MEMORY_HEAPS]>,
}

impl HeapUsage {
    /// Adds `size` to `heap` if the result stays within `capacity`.
    pub fn try_reserve(&self, heap: u32, size: u64, capacity: u64) -> bool {
        let mut used = lock(&self.used);
        let Some(slot) = used.get_mut(heap as usize) else {
            return false;
        };
        match slot.checked_add(size) {
            Some(total) if total <= capacity => {
                *slot = total;
                true
            }
            _ => false,
        }
    }

    /// Returns `size` bytes to `heap`.
    pub fn release(&self, heap: u32, size: u64) {
        if let Some(slot) = lock(&self.used).get_mut(heap as usize) {
            *slot = slot.saturating_sub(size);
        }
    }

    /// Current usage of every heap.
    pub fn snapshot(&self) -> [u64; vk::MAX_MEMORY_HEAPS] {
        *lock(&self.used)
    }
}

/// One live allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryRecord {
    /// The fake memory type the application asked for.
    pub fake_type: u32,
    /// Its fake heap.
    pub heap: u32,
    /// `allocationSize`.
    pub size: u64,
    /// The resource `VkMemoryDedicatedAllocateInfo` dedicated the memory
    /// to; `None` for memory any resource may take.
    pub dedicated_to: Option<Resource>,
}

/// An allocation admitted by [`AllocationBook::reserve`], not yet made by the
/// driver: [`AllocationBook::commit`] or [`AllocationBook::cancel`] it.
#[derive(Debug)]
#[must_use]
pub struct Reservation {
    record: MemoryRecord,
}

impl Reservation {
    /// The reservation, for memory dedicated to `target` (`None`: to no
    /// resource).
    pub fn dedicated_to(mut self, target: Option<Resource>) -> Self {
        self.record.dedicated_to = target;
        self
    }
}

#[derive(Debug, Default)]
struct BookState {
    live: HashMap<u64, MemoryRecord>,
    in_flight: u32,
    calls: u64,
}

/// Live allocations of one device.
#[derive(Debug, Default)]
pub struct AllocationBook {
    state: Mutex<BookState>,
}

impl AllocationBook {
    /// Admits or refuses a `vkAllocateMemory` call of `size` bytes in fake
    /// type `fake_type`, in this order: a call chosen by `fail-allocation`
    /// and an unknown type give `ERROR_OUT_OF_DEVICE_MEMORY`, `max_count`
    /// live allocations (the `maxMemoryAllocationCount` the layer reports)
    /// `ERROR_TOO_MANY_OBJECTS`, a full heap `ERROR_OUT_OF_DEVICE_MEMORY`.
    ///
    /// # Errors
    /// The `vk::Result` the layer returns instead of calling the driver.
    pub fn reserve(
        &self,
        config: &LayerConfig,
        usage: &HeapUsage,
        max_count: u32,
        fake_type: u32,
        size: u64,
    ) -> Result<Reservation, vk::Result> {
        let mut state = lock(&self.state);
        state.calls += 1;
        if config.fail_allocations.contains(&state.calls) {
            return Err(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
        }
        let Some(memory_type) = config.profile.types.get(fake_type as usize) else {
            return Err(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
        };
        let Some(heap) = config.profile.heaps.get(memory_type.heap as usize) else {
            return Err(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
        };
        let count = state.live.len().saturating_add(state.in_flight as usize);
        if count >= max_count as usize {
            return Err(vk::Result::ERROR_TOO_MANY_OBJECTS);
        }
        if !usage.try_reserve(memory_type.heap, size, heap.size) {
            return Err(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
        }
        state.in_flight += 1;
        Ok(Reservation {
            record: MemoryRecord {
                fake_type,
                heap: memory_type.heap,
                size,
                dedicated_to: None,
            },
        })
    }

    /// Records the allocation the driver made for `reservation`, replacing
    /// any record of a freed allocation that had the same handle.
    pub fn commit(&self, reservation: Reservation, memory: vk::DeviceMemory) {
        let mut state = lock(&self.state);
        state.in_flight = state.in_flight.saturating_sub(1);
        state
            .live
            .insert(ash::vk::Handle::as_raw(memory), reservation.record);
    }

    /// Undoes `reservation` after the driver refused the allocation.
    pub fn cancel(&self, usage: &HeapUsage, reservation: Reservation) {
        let mut state = lock(&self.state);
        state.in_flight = state.in_flight.saturating_sub(1);
        usage.release(reservation.record.heap, reservation.record.size);
    }

    /// Forgets an allocation about to be freed and returns its bytes to its
    /// heap; called before the driver frees it, which may hand its handle to
    /// the next allocation at once.
    pub fn release(&self, usage: &HeapUsage, memory: vk::DeviceMemory) -> Option<MemoryRecord> {
        let record = lock(&self.state)
            .live
            .remove(&ash::vk::Handle::as_raw(memory))?;
        usage.release(record.heap, record.size);
        Some(record)
    }

    /// The record of a live allocation.
    pub fn get(&self, memory: vk::DeviceMemory) -> Option<MemoryRecord> {
        lock(&self.state)
            .live
            .get(&ash::vk::Handle::as_raw(memory))
            .copied()
    }

    /// Releases every allocation still live (the device is being destroyed).
    pub fn release_all(&self, usage: &HeapUsage) {
        for (_, record) in lock(&self.state).live.drain() {
            usage.release(record.heap, record.size);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use ash::vk::Handle;

    fn config(spec: &str) -> LayerConfig {
        parse(spec).unwrap().unwrap()
    }

    /// `book.reserve` under the configuration's own count limit.
    fn reserve(
        book: &AllocationBook,
        config: &LayerConfig,
        usage: &HeapUsage,
        fake_type: u32,
        size: u64,
    ) -> Result<Reservation, vk::Result> {
        book.reserve(
            config,
            usage,
            config.max_memory_allocation_count(),
            fake_type,
            size,
        )
    }

    #[test]
    fn heap_capacity_is_enforced_and_freed_bytes_return() {
        let config = config("mobile");
        let usage = HeapUsage::default();
        let book = AllocationBook::default();
        let heap = config.profile.heaps[0].size;
        let first = reserve(&book, &config, &usage, 0, heap / 2 + 1).unwrap();
        book.commit(first, vk::DeviceMemory::from_raw(1));
        assert_eq!(
            reserve(&book, &config, &usage, 1, heap / 2).err(),
            Some(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY)
        );
        assert!(book
            .release(&usage, vk::DeviceMemory::from_raw(1))
            .is_some());
        assert_eq!(usage.snapshot()[0], 0);
        assert!(reserve(&book, &config, &usage, 1, heap / 2).is_ok());
    }

    /// The count limit is the one the layer reports for the device, which
    /// is the driver's where that is below the profile's (a profile without
    /// a limit of its own, Arc's, on a driver of 4096): it refused only at
    /// the profile's, passing the driver calls a real driver of the
    /// reported limit refuses.
    #[test]
    fn the_count_limit_is_the_reported_one() {
        let config = config("arc");
        assert_eq!(config.max_memory_allocation_count(), u32::MAX);
        let usage = HeapUsage::default();
        let book = AllocationBook::default();
        for handle in 1..=2u64 {
            let reservation = book.reserve(&config, &usage, 2, 0, 64).unwrap();
            book.commit(reservation, vk::DeviceMemory::from_raw(handle));
        }
        assert_eq!(
            book.reserve(&config, &usage, 2, 0, 64).err(),
            Some(vk::Result::ERROR_TOO_MANY_OBJECTS)
        );
    }

    #[test]
    fn count_limit_and_nth_failure() {
        let config = config("discrete,max-allocations=2,fail-allocation=2");
        let usage = HeapUsage::default();
        let book = AllocationBook::default();
        let mut results = Vec::new();
        for handle in 1..=4u64 {
            match reserve(&book, &config, &usage, 0, 64) {
                Ok(reservation) => {
                    book.commit(reservation, vk::DeviceMemory::from_raw(handle));
                    results.push(vk::Result::SUCCESS);
                }
                Err(error) => results.push(error),
            }
        }
        assert_eq!(
            results,
            [
                vk::Result::SUCCESS,
                vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
                vk::Result::SUCCESS,
                vk::Result::ERROR_TOO_MANY_OBJECTS,
            ]
        );
    }

    /// The dedicated target goes with the record and goes away at free: an
    /// allocation that gets a freed one's handle has only its own.
    #[test]
    fn dedicated_targets_are_recorded_and_forgotten_at_free() {
        let config = config("discrete");
        let usage = HeapUsage::default();
        let book = AllocationBook::default();
        let memory = vk::DeviceMemory::from_raw(5);
        let image = Resource::Image(vk::Image::from_raw(9));
        let reservation = reserve(&book, &config, &usage, 0, 4096).unwrap();
        book.commit(reservation.dedicated_to(Some(image)), memory);
        assert_eq!(book.get(memory).unwrap().dedicated_to, Some(image));
        assert_eq!(
            book.release(&usage, memory).unwrap().dedicated_to,
            Some(image)
        );
        assert_eq!(book.get(memory), None);
        let reservation = reserve(&book, &config, &usage, 0, 4096).unwrap();
        book.commit(reservation, memory);
        assert_eq!(book.get(memory).unwrap().dedicated_to, None);
    }

    #[test]
    fn cancelled_reservations_release_their_bytes() {
        let config = config("discrete");
        let usage = HeapUsage::default();
        let book = AllocationBook::default();
        let reservation = reserve(&book, &config, &usage, 3, 1000).unwrap();
        assert_eq!(usage.snapshot()[2], 1000);
        book.cancel(&usage, reservation);
        assert_eq!(usage.snapshot()[2], 0);
    }
}
