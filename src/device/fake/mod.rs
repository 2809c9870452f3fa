//! [`FakeDevice`]: an in-process Vulkan device for tests (feature `fake-device`).
//!
//! Lavapipe has one coherent memory type, no budget extension and never runs
//! out of memory, so most of an allocator's paths never run on it. The fake
//! device reproduces real GPUs' memory layouts ([`FakeLayout`]), puts host
//! memory behind every host-visible allocation so mapping, writing and reading
//! back work (on non-coherent types, only through flushes and invalidates:
//! the device's bytes are kept apart, `coherence.rs`; host-visible memory
//! the host cannot back fails with `OUT_OF_HOST_MEMORY`, as a driver's
//! does), fails on demand (capped heaps, the Nth allocation or map,
//! `TOO_MANY_OBJECTS`, device loss, the Nth buffer creation or bind with
//! a chosen error), and counts every call so a test can prove
//! nothing leaked. It also checks the Vulkan rules a validation layer would
//! (mapping non-host-visible memory, a memory priority outside [0, 1],
//! flushing no range or unaligned ranges of
//! non-coherent memory, freeing unknown memory, memory dedicated to a
//! resource that does not exist, binds that break the reported
//! requirements, its own (unprotected) buffers bound to protected memory,
//! buffers of 0 bytes, of no usage or past `maxBufferSize`) and records
//! each breach in
//! [`FakeDevice::violations`]. A breach no test read there (or through
//! [`FakeDevice::assert_clean`]), or a memory object, buffer or image
//! still alive when the device goes (after the allocator that holds it),
//! makes the device's drop panic, naming them, so a test that never asks
//! still fails when a rule was broken or something leaked.
//!
//! Host writes after `vkFreeMemory`: a freed host-visible object's host
//! bytes (objects up to 16 MiB; larger ones are released at once, as
//! poisoning touches every lazily allocated page) are not released but
//! filled with a poison byte and kept in a FIFO quarantine of at most
//! 64 MiB. When an object leaves it (evicted by later frees, or at
//! [`FakeDevice::violations`], [`FakeDevice::assert_clean`] or the device's
//! drop) the poison is checked, and a write through a pointer from the old
//! mapping is recorded as a violation naming the memory handle and the
//! first changed offset (at drop, with no check to report to, it panics).
//!
//! This file holds the device, its memory objects' handle, and what a test
//! creates and inspects through it; what a test can make go wrong is in
//! `fault_injection.rs`, the hooks run inside waits, polls, flushes and
//! budget queries in
//! `call_hook.rs`, and the calls the allocator makes in `memory_device.rs`.

mod call_hook;
mod coherence;
mod fault_injection;
mod host_bytes;
mod layout;
mod memory_device;
mod state;

use std::sync::{Arc, Mutex, MutexGuard};

use ash::vk;
use ash::vk::Handle;
use call_hook::CallHook;
pub use fault_injection::FakeCall;
pub use layout::{BufferRequirements, FakeLayout, ImageRequirements};
use state::State;
pub use state::{FakeAllocationInfo, FakeCounters, RecordedRange};

/// A memory object of a [`FakeDevice`]. Not `Clone`: like `VkDeviceMemory`
/// it is freed once.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FakeMemory {
    id: u64,
}

impl FakeMemory {
    /// The handle as a `VkDeviceMemory` value (never null; not a real object).
    pub fn raw(&self) -> vk::DeviceMemory {
        vk::DeviceMemory::from_raw(self.id)
    }
}

/// A fake device. Cheap to clone: clones share one device, so a test keeps a
/// clone to inspect what the allocator did with it.
#[derive(Clone, Debug)]
pub struct FakeDevice {
    layout: Arc<FakeLayout>,
    state: Arc<Mutex<State>>,
    wait_hook: Arc<Mutex<CallHook>>,
    poll_hook: Arc<Mutex<CallHook>>,
    flush_hook: Arc<Mutex<CallHook>>,
    budget_hook: Arc<Mutex<CallHook>>,
}

impl FakeDevice {
    /// A device with `layout`.
    pub fn new(layout: FakeLayout) -> Self {
        let state = State::new(&layout);
        Self {
            layout: Arc::new(layout),
            state: Arc::new(Mutex::new(state)),
            wait_hook: Arc::default(),
            poll_hook: Arc::default(),
            flush_hook: Arc::default(),
            budget_hook: Arc::default(),
        }
    }

    /// The layout the device reports.
    pub fn layout(&self) -> &FakeLayout {
        &self.layout
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock poisons it; the state is
        // still consistent (every update is a single step), so carry on.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    // ----- frame signals -----

    /// A fake buffer or image handle, as an application would create; the
    /// allocator's deferred destruction must destroy it exactly once.
    pub fn create_resource(&self) -> u64 {
        self.state().create_resource()
    }

    /// Destroys a handle of [`create_resource`](Self::create_resource), as
    /// the application would once its memory is freed.
    pub fn destroy_resource(&self, resource: u64) {
        self.state().destroy_resource(resource);
    }

    /// Resources created and not destroyed yet.
    pub fn live_resources(&self) -> usize {
        self.state().resources.len()
    }

    /// The device address of the first byte of `memory`, a live memory
    /// object of this device; `None` for any other handle. A buffer bound
    /// at offset `o` of it has that address plus `o`
    /// (`vkGetBufferDeviceAddress`, as the device answers it). No two
    /// memory objects of a device share an address.
    pub fn memory_address(&self, memory: vk::DeviceMemory) -> Option<vk::DeviceAddress> {
        self.state().memory_address(memory.as_raw())
    }

    /// A new, unsignalled fake fence.
    pub fn create_fence(&self) -> vk::Fence {
        vk::Fence::from_raw(self.state().new_signal(0))
    }

    /// Signals a fake fence.
    pub fn signal_fence(&self, fence: vk::Fence) {
        self.state().signals.insert(fence.as_raw(), 1);
    }

    /// Resets a fake fence to unsignalled, as `vkResetFences` does.
    pub fn reset_fence(&self, fence: vk::Fence) {
        self.state().signals.insert(fence.as_raw(), 0);
    }

    /// A new fake timeline semaphore at value 0.
    pub fn create_timeline_semaphore(&self) -> vk::Semaphore {
        vk::Semaphore::from_raw(self.state().new_signal(0))
    }

    /// Advances a fake timeline semaphore to `value`.
    pub fn signal_timeline(&self, semaphore: vk::Semaphore, value: u64) {
        self.state().signals.insert(semaphore.as_raw(), value);
    }

    // ----- inspection -----

    /// Call counts so far.
    pub fn counters(&self) -> FakeCounters {
        self.state().counters.clone()
    }

    /// Memory objects alive now.
    pub fn live_allocations(&self) -> Vec<FakeAllocationInfo> {
        self.state().live_allocations()
    }

    /// Bytes allocated from each heap now.
    pub fn heap_usage(&self) -> Vec<u64> {
        self.state().heap_usage.clone()
    }

    /// Every breach of a Vulkan rule seen so far, one line each.
    ///
    /// Checks and empties the quarantine of freed memory first (see the
    /// module documentation), so host writes into memory freed before this
    /// call are among them.
    pub fn violations(&self) -> Vec<String> {
        let mut state = self.state();
        state.check_quarantine();
        state.violations_read = state.violations.len();
        state.violations.clone()
    }

    /// Every range flushed so far.
    pub fn flushed_ranges(&self) -> Vec<RecordedRange> {
        self.state().flushed.clone()
    }

    /// Every range invalidated so far.
    pub fn invalidated_ranges(&self) -> Vec<RecordedRange> {
        self.state().invalidated.clone()
    }

    /// Forgets the ranges flushed and invalidated so far (their tables keep
    /// their room): for the crate's tests of the host memory a long loop
    /// takes, where the fake device's own records would grow with it (run
    /// where the unit tests count each thread's bytes,
    /// `host_memory_cap`).
    #[cfg(test)]
    #[cfg_attr(not(thread_counts), allow(dead_code))]
    pub(crate) fn forget_recorded_ranges(&self) {
        let mut state = self.state();
        state.flushed.clear();
        state.invalidated.clear();
    }

    /// Copies bytes out of a host-visible fake memory object, as the GPU would
    /// see them; `None` for unknown memory, memory of a type that is not
    /// host-visible (no bytes are kept behind it), or an out-of-range read.
    ///
    /// # Safety
    /// A GPU read: on coherent memory it reads the host's mapped bytes, so no
    /// `&mut [u8]` over the range (from
    /// [`Allocator::mapped_slice_mut`](crate::Allocator::mapped_slice_mut))
    /// may be alive across the call.
    pub unsafe fn read(
        &self,
        memory: vk::DeviceMemory,
        offset: u64,
        len: usize,
    ) -> Option<Vec<u8>> {
        self.state().read(memory.as_raw(), offset, len)
    }

    /// Writes bytes into a host-visible fake memory object, as the GPU would.
    /// Returns `false` for unknown memory, memory of a type that is not
    /// host-visible (no bytes are kept behind it), or an out-of-range write.
    ///
    /// # Safety
    /// A GPU write: on coherent memory it writes the host's mapped bytes, so
    /// no slice over the range (from
    /// [`Allocator::mapped_slice`](crate::Allocator::mapped_slice) or
    /// [`mapped_slice_mut`](crate::Allocator::mapped_slice_mut)) may be
    /// alive across the call.
    pub unsafe fn write(&self, memory: vk::DeviceMemory, offset: u64, bytes: &[u8]) -> bool {
        self.state().write(memory.as_raw(), offset, bytes)
    }

    /// Panics with a readable list when a memory object is still alive or a
    /// rule was broken: the end-of-test check that nothing leaked.
    ///
    /// # Panics
    /// On leaks or violations; that is its purpose.
    pub fn assert_clean(&self) {
        let mut state = self.state();
        state.check_quarantine();
        state.violations_read = state.violations.len();
        let live = state.live_allocations();
        assert!(
            live.is_empty() && state.violations.is_empty() && state.resources.is_empty(),
            "fake device not clean: {} live memory objects {:?}, {} live buffers/images, violations {:#?}",
            live.len(),
            live,
            state.resources.len(),
            state.violations
        );
        assert_eq!(
            state.counters.allocations, state.counters.frees,
            "allocate/free counts differ"
        );
    }
}
