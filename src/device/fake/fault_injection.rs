//! Fault injection on a [`FakeDevice`]: what a test arranges to go wrong
//! (capped heaps, failing allocations, maps, flushes and invalidates,
//! failing buffer creations and binds, backend calls that panic, slow driver calls, a lost device, budgets
//! and usages as a driver reports them) and the hooks it runs inside waits,
//! flushes and budget queries. Apart from `mod.rs` because each of these
//! only sets what the device's calls later read: a test reads this file to
//! learn what it can break, `memory_device.rs` to learn where it breaks.

use super::call_hook::CallHook;
use super::state::Fault;
use super::FakeDevice;
use crate::device::DeviceError;

/// A backend call that [`FakeDevice::panic_on`] makes panic, or, for
/// [`CreateBuffer`](Self::CreateBuffer) and
/// [`BindBuffer`](Self::BindBuffer) only, that [`FakeDevice::fail_call`]
/// makes fail with a [`DeviceError`]. The others fail otherwise, where
/// they can: a map through [`FakeDevice::fail_map`] (or `fail_map_with`),
/// an invalidate through [`FakeDevice::fail_invalidate`], a signal query
/// (which returns a `DeviceError` too) on a lost device
/// ([`FakeDevice::lose_device`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FakeCall {
    /// `vkCreateBuffer` (with the query of the buffer's memory
    /// requirements): the allocator makes its upload rings' chunks so.
    CreateBuffer,
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
    /// `vkFreeMemory`: unlike the others, it panics once the memory is
    /// freed (a wrapper that panics after the driver's call), so that a
    /// test can still end with a clean device.
    Free,
}

impl FakeDevice {
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

    /// Runs `hook` (`None`: nothing) at the start of every poll of a fence
    /// or timeline semaphore (`vkGetFenceStatus` /
    /// `vkGetSemaphoreCounterValue`: `collect`'s, and `wait_and_collect`'s
    /// through it), on the polling thread and with no lock of the device
    /// held, as [`set_wait_hook`](Self::set_wait_hook) runs its hook in
    /// waits: a test holds a poll there (some drivers' polls are system
    /// calls) to see what other threads can do meanwhile. A poll that
    /// [`panic_on`](Self::panic_on) makes panic does so before the hook.
    pub fn set_poll_hook(&self, hook: Option<Box<dyn FnMut() + Send>>) {
        CallHook::set(&self.poll_hook, hook);
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

    /// Runs `hook` (`None`: nothing) at the end of every heap-budget query
    /// (`VK_EXT_memory_budget`), once the figures are taken and before the
    /// call returns, on the querying thread and with no lock of the device
    /// held, as [`set_wait_hook`](Self::set_wait_hook) runs its hook in
    /// waits: a test's stand-in for what other threads do while the
    /// driver's answer is on its way back. The allocator's own budget
    /// checks query under the heap's turn, so a hook run there must not
    /// make or free memory in that heap;
    /// [`Allocator::budgets`](crate::Allocator::budgets) and
    /// [`Allocator::stats`](crate::Allocator::stats) query with no lock held.
    pub fn set_budget_hook(&self, hook: Option<Box<dyn FnMut() + Send>>) {
        CallHook::set(&self.budget_hook, hook);
    }

    /// Allocations that would take `heap`'s usage above `bytes` fail with
    /// `VK_ERROR_OUT_OF_DEVICE_MEMORY`, like a full heap.
    pub fn cap_heap(&self, heap: u32, bytes: u64) {
        if let Some(cap) = self.state().heap_caps.get_mut(heap as usize) {
            *cap = Some(bytes);
        }
    }

    /// The `nth` `vkAllocateMemory` call from now (1 = the next one) fails with
    /// `error`; with `nth` 0, or a call past `u64::MAX`, none does.
    pub fn fail_allocation(&self, nth: u64, error: DeviceError) {
        let mut state = self.state();
        let at = state.counters.allocate_calls.saturating_add(nth);
        state.faults.push(Fault::Allocate { at, error });
    }

    /// The `nth` call of `call` from now (1: the next one) fails with
    /// `error`, as a driver's call fails: [`FakeCall::CreateBuffer`] makes
    /// no buffer, [`FakeCall::BindBuffer`] leaves the buffer unbound; with
    /// `nth` 0, or a call past `u64::MAX`, none does. A call that breaks a
    /// rule of the spec is recorded as a violation instead (as the
    /// validation layer reports it before the driver is called), a
    /// buffer creation on a lost device fails with `VK_ERROR_DEVICE_LOST`,
    /// and one whose size would round up past `u64::MAX` with
    /// `VK_ERROR_OUT_OF_DEVICE_MEMORY`: the failure asked for that call is
    /// spent all the same. Each
    /// kind of call is counted apart, from the device's creation, failed
    /// calls included but not one that [`panic_on`](Self::panic_on) made
    /// panic (it panics before it counts); several failures may wait at
    /// once, and each fails one call. A failure waiting for a call
    /// that never comes stays unused: it fails no other call; so does a
    /// second failure asked for the call a first one already waits for.
    ///
    /// The allocator calls `vkCreateBuffer` and `vkBindBufferMemory` of
    /// its backend for its upload rings' chunks only; a test fails them to
    /// see a ring's creation or growth fail cleanly (TESTING.md, "Failing
    /// a chosen device call").
    ///
    /// # Panics
    /// For a `call` that returns no [`DeviceError`] (the destroys,
    /// unmaps and frees cannot fail; maps and invalidates fail through
    /// [`fail_map`](Self::fail_map) and
    /// [`fail_invalidate`](Self::fail_invalidate)) or whose failure this
    /// device does not model ([`FakeCall::SignalQuery`]: lose the device,
    /// [`lose_device`](Self::lose_device)).
    pub fn fail_call(&self, call: FakeCall, nth: u64, error: DeviceError) {
        assert!(
            matches!(call, FakeCall::CreateBuffer | FakeCall::BindBuffer),
            "FakeDevice::fail_call: {call:?} cannot be made to fail with a DeviceError"
        );
        let mut state = self.state();
        let at = state.call_count(call).saturating_add(nth);
        state.faults.push(Fault::Call { call, at, error });
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
    /// anything ([`FakeCall::Free`]: after) (`nth` 1 is the next call; 0
    /// counts as 1), as a buggy
    /// backend might: the allocator must stay consistent, and leak
    /// nothing, when the panic is caught.
    pub fn panic_on(&self, call: FakeCall, nth: u64) {
        self.state().panics.push((call, nth.max(1)));
    }

    /// Panics when this call of `call` is one [`panic_on`](Self::panic_on)
    /// asked for: outside the state's lock, so that only the caller unwinds.
    pub(super) fn panic_if_asked(&self, call: FakeCall) {
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

    /// The `nth` `vkMapMemory` call from now (1: the next one) fails with
    /// `VK_ERROR_MEMORY_MAP_FAILED`; with `nth` 0, or a call past
    /// `u64::MAX`, none does. The failure comes before the call's own
    /// checks (where [`fail_call`](Self::fail_call)'s comes after them): a
    /// map that breaks a rule of the spec fails as asked and records no
    /// violation.
    pub fn fail_map(&self, nth: u64) {
        self.fail_map_with(nth, DeviceError::MapFailed);
    }

    /// [`fail_map`](Self::fail_map) with `error`: one of the results
    /// `vkMapMemory` may fail with, `VK_ERROR_OUT_OF_DEVICE_MEMORY` (a
    /// driver short of address space for the mapping, say),
    /// `VK_ERROR_OUT_OF_HOST_MEMORY` or `VK_ERROR_MEMORY_MAP_FAILED`
    /// ([`DeviceError::OutOfDeviceMemory`], [`DeviceError::OutOfHostMemory`],
    /// [`DeviceError::MapFailed`]).
    ///
    /// # Panics
    /// For any other `error`, which no `vkMapMemory` returns.
    pub fn fail_map_with(&self, nth: u64, error: DeviceError) {
        assert!(
            matches!(
                error,
                DeviceError::OutOfDeviceMemory
                    | DeviceError::OutOfHostMemory
                    | DeviceError::MapFailed
            ),
            "FakeDevice::fail_map_with: vkMapMemory cannot fail with {error:?}"
        );
        let mut state = self.state();
        let at = state.counters.maps.saturating_add(nth);
        state.faults.push(Fault::Map { at, error });
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

    /// Loses the device as [`lose_device`](Self::lose_device) does, but
    /// its frame signals answer as the Vulkan spec lets a driver answer
    /// on a lost device without saying so: a wait (`vkWaitForFences`,
    /// `vkWaitSemaphores`) returns `VK_SUCCESS` at once, and a poll
    /// (`vkGetFenceStatus`, `vkGetSemaphoreCounterValue`) reads each
    /// signal as it was when the device was lost (`VK_NOT_READY`, a
    /// counter value short of the one waited for), never
    /// `VK_ERROR_DEVICE_LOST`.
    pub fn lose_device_with_stale_signals(&self) {
        let mut state = self.state();
        state.device_lost = true;
        state.stale_signals = true;
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
}
