//! [`FakeDevice`]: an in-process Vulkan device for tests (feature `fake-device`).
//!
//! Lavapipe has one coherent memory type, no budget extension and never runs
//! out of memory, so most of an allocator's paths never run on it. The fake
//! device reproduces real GPUs' memory layouts ([`FakeLayout`]), puts host
//! memory behind every host-visible allocation so mapping, writing and reading
//! back work (on non-coherent types, only through flushes and invalidates:
//! the device's bytes are kept apart, `coherence.rs`), fails on demand (capped heaps, the Nth allocation or map,
//! `TOO_MANY_OBJECTS`, device loss), and counts every call so a test can prove
//! nothing leaked. It also checks the Vulkan rules a validation layer would
//! (mapping non-host-visible memory, flushing unaligned ranges of
//! non-coherent memory, freeing unknown memory, memory dedicated to a
//! resource that does not exist, binds that break the reported
//! requirements) and records each breach in
//! [`FakeDevice::violations`].
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

mod coherence;
mod host_bytes;
mod layout;
mod state;

use std::borrow::Cow;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

use ash::vk;
use ash::vk::Handle;
use gpu_alloc_types::{
    AllocationFlags, DeviceMapError, DeviceProperties, MappedMemoryRange, MemoryDevice, OutOfMemory,
};
pub use layout::FakeLayout;
pub use state::{FakeAllocationInfo, FakeCounters, RecordedRange};
use state::{Fault, State};

use super::{
    AllocateInfo, DedicatedHint, DeviceError, FrameSignal, HeapBudget, MemoryDeviceExt,
    MemoryProperties,
};

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
    flush_hook: Arc<Mutex<CallHook>>,
}

/// A backend call that [`FakeDevice::panic_on`] makes panic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FakeCall {
    /// `vkMapMemory`.
    Map,
    /// `vkUnmapMemory`.
    Unmap,
    /// `vkGetFenceStatus` or `vkGetSemaphoreCounterValue`: the poll of a
    /// frame's signal (`collect`), not the wait (`wait_and_collect`).
    SignalQuery,
    /// `vkBindBufferMemory`.
    BindBuffer,
    /// `vkDestroyBuffer`.
    DestroyBuffer,
    /// `vkDestroyImage`.
    DestroyImage,
    /// `vkInvalidateMappedMemoryRanges`.
    Invalidate,
}

/// What [`FakeDevice::set_wait_hook`] runs in each wait for a fence or
/// semaphore, or [`FakeDevice::set_flush_hook`] in each flush.
#[derive(Default)]
struct CallHook {
    hook: Option<Box<dyn FnMut() + Send>>,
    /// Counts `set_*_hook` calls: a hook that replaced or cleared itself
    /// while running is not put back.
    sets: u64,
}

impl std::fmt::Debug for CallHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = if self.hook.is_some() { "set" } else { "none" };
        write!(f, "CallHook({set})")
    }
}

impl CallHook {
    /// Sets the hook of `slot`.
    fn set(slot: &Mutex<Self>, hook: Option<Box<dyn FnMut() + Send>>) {
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        slot.hook = hook;
        slot.sets += 1;
    }

    /// Runs the hook of `slot`, if any, taken out while it runs (so that
    /// it may call what runs it, or replace itself), then puts it back
    /// unless it was replaced meanwhile.
    fn run(slot: &Mutex<Self>) {
        let (hook, sets) = {
            let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
            (slot.hook.take(), slot.sets)
        };
        if let Some(mut hook) = hook {
            hook();
            let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
            if slot.sets == sets {
                slot.hook = Some(hook);
            }
        }
    }
}

impl FakeDevice {
    /// A device with `layout`.
    pub fn new(layout: FakeLayout) -> Self {
        let state = State::new(&layout);
        Self {
            layout: Arc::new(layout),
            state: Arc::new(Mutex::new(state)),
            wait_hook: Arc::default(),
            flush_hook: Arc::default(),
        }
    }

    /// The layout the device reports.
    pub fn layout(&self) -> &FakeLayout {
        &self.layout
    }

    /// Checks and records flushed (`flush`) or invalidated ranges; or,
    /// for a call [`fail_flush`](Self::fail_flush) or
    /// [`fail_invalidate`](Self::fail_invalidate) asked to fail, flushes or
    /// invalidates nothing and fails with `VK_ERROR_OUT_OF_HOST_MEMORY`.
    fn record_ranges(
        &self,
        ranges: &[MappedMemoryRange<'_, FakeMemory>],
        flush: bool,
    ) -> Result<(), OutOfMemory> {
        let mut state = self.state();
        let call = if flush {
            state.counters.flush_calls += 1;
            state.counters.flush_calls
        } else {
            state.counters.invalidate_calls += 1;
            state.counters.invalidate_calls
        };
        let failing = |fault: &Fault| matches!(*fault, Fault::Sync { flush: f, at } if f == flush && at == call);
        if let Some(i) = state.faults.iter().position(failing) {
            state.faults.remove(i);
            return Err(OutOfMemory::OutOfHostMemory);
        }
        for range in ranges {
            state.record_range(
                &self.layout,
                range.memory.id,
                range.offset,
                range.size,
                flush,
            );
        }
        Ok(())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock poisons it; the state is
        // still consistent (every update is a single step), so carry on.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    // ----- fault injection -----

    /// Runs `hook` (`None`: nothing) at the start of every wait for a
    /// fence or timeline semaphore (`wait_and_collect`), on the waiting
    /// thread and with no lock of the device held: a test's stand-in for
    /// what other threads do while one blocks there (a fake wait answers
    /// at once). The hook may call into the device and the allocator, and
    /// replace or clear itself; while it runs, no wait runs it again (one
    /// it causes, or another thread's). It stays set until replaced; a
    /// hook that holds a clone of the device or the allocator keeps them
    /// alive until it is.
    pub fn set_wait_hook(&self, hook: Option<Box<dyn FnMut() + Send>>) {
        CallHook::set(&self.wait_hook, hook);
    }

    /// Runs `hook` (`None`: nothing) at the start of every
    /// `vkFlushMappedMemoryRanges`, on the flushing thread and with no lock
    /// of the device held, as [`set_wait_hook`](Self::set_wait_hook) runs
    /// its hook in waits: a test holds a flush there to see what other
    /// threads can do meanwhile. The allocator flushes under the lock of
    /// the flushed memory's pool, so the hook must not allocate or free in
    /// that pool, on its thread or by waiting for another one that does.
    pub fn set_flush_hook(&self, hook: Option<Box<dyn FnMut() + Send>>) {
        CallHook::set(&self.flush_hook, hook);
    }

    /// Allocations that would take `heap`'s usage above `bytes` fail with
    /// `VK_ERROR_OUT_OF_DEVICE_MEMORY`, like a full heap.
    pub fn cap_heap(&self, heap: u32, bytes: u64) {
        if let Some(cap) = self.state().heap_caps.get_mut(heap as usize) {
            *cap = Some(bytes);
        }
    }

    /// The `nth` `vkAllocateMemory` call from now (1 = the next one) fails with
    /// `error`; a call past `u64::MAX` never comes.
    pub fn fail_allocation(&self, nth: u64, error: DeviceError) {
        let mut state = self.state();
        let at = state.counters.allocate_calls.saturating_add(nth);
        state.faults.push(Fault::Allocate { at, error });
    }

    /// Every `vkAllocateMemory` call of `size` bytes or more fails with
    /// `VK_ERROR_OUT_OF_DEVICE_MEMORY` (a driver that cannot find a large
    /// enough contiguous range). `None` lifts it.
    pub fn fail_allocations_from(&self, size: Option<u64>) {
        self.state().fail_from_size = size;
    }

    /// The next `vkAllocateMemory` call panics instead of allocating, as a
    /// buggy backend might: the allocator must stay consistent (and count
    /// no memory object that was not made) when the panic is caught.
    pub fn panic_on_next_allocation(&self) {
        self.state().panic_on_allocation = true;
    }

    /// Makes the `nth` call of `call` from now panic before it does
    /// anything (`nth` 1 is the next call; 0 counts as 1), as a buggy
    /// backend might: the allocator must stay consistent, and leak
    /// nothing, when the panic is caught.
    pub fn panic_on(&self, call: FakeCall, nth: u64) {
        self.state().panics.push((call, nth.max(1)));
    }

    /// Panics when this call of `call` is one [`panic_on`](Self::panic_on)
    /// asked for: outside the state's lock, so that only the caller unwinds.
    fn panic_if_asked(&self, call: FakeCall) {
        let due = {
            let mut state = self.state();
            let mut due = false;
            state.panics.retain_mut(|(asked, left)| {
                if *asked != call {
                    return true;
                }
                *left -= 1;
                due |= *left == 0;
                *left > 0
            });
            due
        };
        assert!(!due, "FakeDevice: {call:?} panicked (as asked)");
    }

    /// Every later `vkAllocateMemory` call takes `delay` before it allocates,
    /// without holding the device's lock, as drivers that take milliseconds
    /// to allocate do: the windows in which a test's threads race widen.
    /// `None` lifts it.
    pub fn slow_allocations(&self, delay: Option<std::time::Duration>) {
        self.state().allocation_delay = delay;
    }

    /// Every later heap-budget query takes `delay` before it reads the
    /// figures, without holding the device's lock, as drivers that take
    /// milliseconds to answer do. `None` lifts it.
    pub fn slow_budget_queries(&self, delay: Option<std::time::Duration>) {
        self.state().budget_query_delay = delay;
    }

    /// Every later `vkFreeMemory` call takes `delay` before the memory is
    /// freed (the heap's usage still counts it) and `delay` again after
    /// (the call returns late), without holding the device's lock: the
    /// windows in which frees race budget checks and readings widen.
    /// `None` lifts it.
    pub fn slow_frees(&self, delay: Option<std::time::Duration>) {
        self.state().free_delay = delay;
    }

    /// The `nth` `vkMapMemory` call from now fails with
    /// `VK_ERROR_MEMORY_MAP_FAILED`; a call past `u64::MAX` never comes.
    pub fn fail_map(&self, nth: u64) {
        let mut state = self.state();
        let at = state.counters.maps.saturating_add(nth);
        state.faults.push(Fault::Map { at });
    }

    /// The `nth` `vkFlushMappedMemoryRanges` call from now (1: the next
    /// one) fails with `VK_ERROR_OUT_OF_HOST_MEMORY`, flushing nothing;
    /// with `nth` 0, or a call past `u64::MAX`, none does. Invalidates
    /// are counted apart ([`fail_invalidate`](Self::fail_invalidate)).
    pub fn fail_flush(&self, nth: u64) {
        self.fail_sync(true, nth);
    }

    /// The `nth` `vkInvalidateMappedMemoryRanges` call from now (1: the
    /// next one) fails with `VK_ERROR_OUT_OF_HOST_MEMORY`, invalidating
    /// nothing; with `nth` 0, or a call past `u64::MAX`, none does.
    /// Flushes are counted apart ([`fail_flush`](Self::fail_flush)).
    pub fn fail_invalidate(&self, nth: u64) {
        self.fail_sync(false, nth);
    }

    /// [`fail_flush`](Self::fail_flush) (`flush`) or
    /// [`fail_invalidate`](Self::fail_invalidate).
    fn fail_sync(&self, flush: bool, nth: u64) {
        let mut state = self.state();
        let calls = if flush {
            state.counters.flush_calls
        } else {
            state.counters.invalidate_calls
        };
        let at = calls.saturating_add(nth);
        state.faults.push(Fault::Sync { flush, at });
    }

    /// Every later fence, semaphore and allocation call reports
    /// `VK_ERROR_DEVICE_LOST`. Freeing still works, as on a real lost device.
    pub fn lose_device(&self) {
        self.state().device_lost = true;
    }

    /// Sets the usage that budgets report for `heap` on top of this device's own
    /// allocations (the application's memory beside the allocator's: other
    /// allocators, the driver's own objects), and the budget itself.
    /// `heapUsage` is this process's usage only; other processes show as a
    /// lower budget (VkPhysicalDeviceMemoryBudgetPropertiesEXT).
    pub fn set_heap_budget(&self, heap: u32, budget: u64, external_usage: u64) {
        let mut state = self.state();
        if let Some(slot) = state.budgets.get_mut(heap as usize) {
            *slot = (budget, external_usage);
        }
    }

    /// Makes budgets report `usage` for `heap` whatever is allocated, as a
    /// driver with a stale or broken usage counter does (some report 0);
    /// `None` reports the true usage again.
    pub fn report_heap_usage(&self, heap: u32, usage: Option<u64>) {
        if let Some(slot) = self.state().reported_usage.get_mut(heap as usize) {
            *slot = usage;
        }
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

    /// Copies bytes out of a host-visible fake memory object, as the GPU would
    /// see them; `None` for unknown memory or an out-of-range read.
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
    /// Returns `false` for unknown memory or an out-of-range write.
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

// SAFETY: each host-visible memory object owns a zeroed host buffer of its
// size (plus alignment slack) that lives until the object is freed (or
// longer, poisoned, in the quarantine), and
// `map_memory` returns a pointer into it, checked against the object's size;
// only `write` (a test standing in for the GPU, on coherent memory; unsafe,
// its caller holds no slice of the bytes) and the allocator's invalidates (on
// non-coherent memory; they take the allocation by `&mut`, and allocations in
// such memory start on atom boundaries) write it otherwise, and the device
// reaches only the bytes of the range it is given, so slices of other bytes
// stay valid (`host_bytes.rs`).
unsafe impl MemoryDeviceExt<FakeMemory> for FakeDevice {
    fn memory_properties(&self) -> MemoryProperties {
        let layout = &self.layout;
        MemoryProperties {
            device: DeviceProperties {
                memory_types: Cow::Owned(layout.memory_types.clone()),
                memory_heaps: Cow::Owned(layout.memory_heaps.clone()),
                max_memory_allocation_count: layout.max_memory_allocation_count,
                max_memory_allocation_size: layout.max_memory_allocation_size,
                non_coherent_atom_size: layout.non_coherent_atom_size,
                buffer_device_address: layout.buffer_device_address,
            },
            buffer_image_granularity: layout.buffer_image_granularity,
            memory_budget: layout.memory_budget,
            memory_priority: false,
            amd_device_coherent_types: layout.amd_device_coherent_types,
            amd_device_coherent_memory: layout.amd_device_coherent_memory,
            protected_memory: layout.protected_memory,
            gpu: None,
            exportable_handle_types: layout.exportable_handle_types,
        }
    }

    unsafe fn allocate(&self, info: &AllocateInfo<'_>) -> Result<FakeMemory, DeviceError> {
        let (delay, panic) = {
            let mut state = self.state();
            (
                state.allocation_delay,
                std::mem::take(&mut state.panic_on_allocation),
            )
        };
        if let Some(delay) = delay {
            std::thread::sleep(delay);
        }
        // Outside the state's lock, so that only the caller unwinds.
        assert!(!panic, "FakeDevice: vkAllocateMemory panicked (as asked)");
        let id = self.state().allocate(&self.layout, info)?;
        Ok(FakeMemory { id })
    }

    fn raw_memory(&self, memory: &FakeMemory) -> vk::DeviceMemory {
        memory.raw()
    }

    unsafe fn set_memory_name(&self, memory: &FakeMemory, name: &str) {
        self.state().rename(memory.id, name);
    }

    fn heap_budgets(&self, out: &mut [HeapBudget]) -> bool {
        if !self.layout.memory_budget {
            return false;
        }
        let delay = self.state().budget_query_delay;
        if let Some(delay) = delay {
            std::thread::sleep(delay);
        }
        let mut state = self.state();
        state.counters.budget_queries += 1;
        for (heap, slot) in out.iter_mut().enumerate() {
            if let (Some(&(budget, external)), Some(&usage)) =
                (state.budgets.get(heap), state.heap_usage.get(heap))
            {
                let reported = state.reported_usage.get(heap).copied().flatten();
                *slot = HeapBudget {
                    budget,
                    usage: reported.unwrap_or(usage + external),
                };
            }
        }
        true
    }

    unsafe fn is_signalled(&self, signal: FrameSignal) -> Result<bool, DeviceError> {
        self.panic_if_asked(FakeCall::SignalQuery);
        self.state().is_signalled(signal)
    }

    unsafe fn wait_signalled(
        &self,
        signal: FrameSignal,
        _timeout_ns: u64,
    ) -> Result<bool, DeviceError> {
        // Taken out while it runs, so that it may wait itself.
        CallHook::run(&self.wait_hook);
        // Nothing would ever signal a fake fence while we block: answer now.
        self.state().is_signalled(signal)
    }

    unsafe fn create_buffer(
        &self,
        size: u64,
        usage: vk::BufferUsageFlags,
    ) -> Result<(vk::Buffer, vk::MemoryRequirements, DedicatedHint), DeviceError> {
        let mut state = self.state();
        if state.device_lost {
            return Err(DeviceError::DeviceLost);
        }
        // Buffers may live in every type but lazily allocated ones.
        let memory_type_bits = self
            .layout
            .memory_types
            .iter()
            .enumerate()
            .filter(|(_, t)| {
                !t.props
                    .contains(gpu_alloc_types::MemoryPropertyFlags::LAZILY_ALLOCATED)
            })
            .fold(0u32, |bits, (i, _)| bits | (1 << i));
        let handle = state.create_resource();
        let requirements = vk::MemoryRequirements {
            size: size.next_multiple_of(4),
            alignment: 256,
            memory_type_bits,
        };
        state.requirements.insert(handle, (usage, requirements));
        Ok((
            vk::Buffer::from_raw(handle),
            requirements,
            DedicatedHint::default(),
        ))
    }

    unsafe fn bind_buffer_memory(
        &self,
        buffer: vk::Buffer,
        memory: vk::DeviceMemory,
        offset: u64,
    ) -> Result<(), DeviceError> {
        self.panic_if_asked(FakeCall::BindBuffer);
        let device_address = self.layout.buffer_device_address;
        self.state()
            .bind(buffer.as_raw(), memory.as_raw(), offset, device_address);
        Ok(())
    }

    unsafe fn destroy_buffer(&self, buffer: vk::Buffer) {
        self.panic_if_asked(FakeCall::DestroyBuffer);
        self.state().destroy_resource(buffer.as_raw());
    }

    unsafe fn destroy_image(&self, image: vk::Image) {
        self.panic_if_asked(FakeCall::DestroyImage);
        self.state().destroy_resource(image.as_raw());
    }
}

impl MemoryDevice<FakeMemory> for FakeDevice {
    unsafe fn allocate_memory(
        &self,
        size: u64,
        memory_type: u32,
        flags: AllocationFlags,
    ) -> Result<FakeMemory, OutOfMemory> {
        let info = AllocateInfo::plain(size, memory_type, flags);
        // SAFETY: the fake device checks every argument itself; nothing here
        // is unsafe, the trait merely declares it so.
        unsafe { MemoryDeviceExt::allocate(self, &info) }.map_err(crate::device::out_of_memory)
    }

    unsafe fn deallocate_memory(&self, memory: FakeMemory) {
        let delay = self.state().free_delay;
        if let Some(delay) = delay {
            std::thread::sleep(delay);
        }
        self.state().free(memory.id);
        if let Some(delay) = delay {
            std::thread::sleep(delay);
        }
    }

    unsafe fn map_memory(
        &self,
        memory: &mut FakeMemory,
        offset: u64,
        size: u64,
    ) -> Result<NonNull<u8>, DeviceMapError> {
        self.panic_if_asked(FakeCall::Map);
        self.state().map(&self.layout, memory.id, offset, size)
    }

    unsafe fn unmap_memory(&self, memory: &mut FakeMemory) {
        self.panic_if_asked(FakeCall::Unmap);
        self.state().unmap(memory.id);
    }

    unsafe fn invalidate_memory_ranges(
        &self,
        ranges: &[MappedMemoryRange<'_, FakeMemory>],
    ) -> Result<(), OutOfMemory> {
        self.panic_if_asked(FakeCall::Invalidate);
        self.record_ranges(ranges, false)
    }

    unsafe fn flush_memory_ranges(
        &self,
        ranges: &[MappedMemoryRange<'_, FakeMemory>],
    ) -> Result<(), OutOfMemory> {
        CallHook::run(&self.flush_hook);
        self.record_ranges(ranges, true)
    }
}
