//! How a [`MemoryContext`] makes and frees each `VkDeviceMemory`:
//! [`allocate_memory`](MemoryContext::allocate_memory) checks the request
//! against the device's limits and the heap's budget, takes one of
//! `maxMemoryAllocationCount`'s slots ([`ObjectSlot`]), answers from the
//! heap's remembered refusal or allocates (and keeps the heap's refusals,
//! `context/refusals.rs`, up to date), tells
//! the memory callback and maps host-visible memory, and
//! [`free_memory`](MemoryContext::free_memory) undoes each step; an error,
//! or a panic of the backend or the callback, on the way leaves nothing
//! allocated or counted. Apart from `context.rs`, which holds what the
//! memory types share, because these are the only paths that ask the
//! driver for memory objects or give them back.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::PoisonError;

use gpu_alloc_types::{AllocationFlags, MemoryPropertyFlags};

use super::budgets::Read;
use super::{MemoryContext, MemoryRequest, NewMemory};
use crate::device::{
    memory_priority, AllocateInfo, DedicatedTarget, DeviceError, HeapBudget, MemoryDeviceExt,
    DEDICATED_ONLY_HANDLE_TYPES,
};
use crate::memory::events::{MemoryEvent, MemoryEventKind};
use crate::memory::held_lock::Held;
use crate::memory::mapping::MappedPtr;
use crate::Error;

/// `VK_EXTERNAL_MEMORY_HANDLE_TYPE_ANDROID_HARDWARE_BUFFER_BIT_ANDROID`.
const ANDROID_HARDWARE_BUFFER: ash::vk::ExternalMemoryHandleTypeFlags =
    ash::vk::ExternalMemoryHandleTypeFlags::ANDROID_HARDWARE_BUFFER_ANDROID;

impl<D> MemoryContext<D> {
    /// Tells the callback, if any, of `kind` on `memory`. A panic of the
    /// callback is caught and returned, for the caller to resume once the
    /// memory object is made or freed: unwound from the middle of that, it
    /// left the object allocated for good (never freed, not even at drop)
    /// and its bytes counted in the heap's usage and in
    /// `maxMemoryAllocationCount`, while every pool lock it unwound through
    /// carries on after the poison (`place/pool_access.rs`). Also the
    /// replay of the memory that exists when a callback is set or
    /// replaced (`Allocator::set_memory_callback`).
    pub(crate) fn tell<M>(
        &self,
        kind: MemoryEventKind,
        memory: &M,
        memory_type: u32,
        size: u64,
        name: Option<&str>,
    ) -> std::thread::Result<()>
    where
        D: MemoryDeviceExt<M>,
    {
        let Some(callback) = &self.callback else {
            return Ok(());
        };
        let event = MemoryEvent {
            kind,
            memory: self.device.raw_memory(memory),
            memory_type,
            heap: self.heap_of(memory_type),
            size,
            name,
        };
        // Unwind safety: nothing the callback can see is left half-changed
        // by the panic; the caller finishes its step before resuming it.
        panic::catch_unwind(AssertUnwindSafe(|| (callback.0)(&event)))
    }

    /// Allocates (and maps, when host-visible) one `VkDeviceMemory`.
    ///
    /// # Errors
    /// [`Error::NotExportable`] for memory dedicated to an image and
    /// exported as an Android hardware buffer, and for memory exported as a
    /// D3D11 texture or D3D12 resource that is dedicated to no resource
    /// (below); [`Error::TooManyObjects`] at `maxMemoryAllocationCount`,
    /// [`Error::OverBudget`] when asked to stay within budget, and the device's
    /// allocation and map failures; [`Error::OutOfDeviceMemory`] without a
    /// call too, for memory larger than `maxMemoryAllocationSize` or than
    /// its heap, for an attempt that may be skipped
    /// ([`MemoryRequest::skip_if_refused`]) of at least the bytes the heap
    /// last refused (`context/refusals.rs`), and for memory that would take
    /// this allocator's memory in its heap past the heap's
    /// `Config::heap_size_limits` entry. Nothing is leaked on error.
    ///
    /// `remainder_turn`, the heap's remainder turn when a remainder block
    /// is made under it (`type_pool/new_block.rs`), is released as soon as
    /// the memory is counted in the heap's usage, with the heap's turn:
    /// the callback, the map (and the caller's debug fill) run without it,
    /// and another memory type of the heap sizes its remainder block
    /// meanwhile. Kept on an error before the memory is counted (a
    /// refusal, the budget's or the driver's), for the block's next
    /// attempt; released already on a failed map, whose freed memory only
    /// gives room back (the least block that may follow a map's
    /// `OutOfDeviceMemory` takes the turn again: `create_remainder_block`).
    pub(crate) fn allocate_memory<M>(
        &self,
        request: &MemoryRequest<'_>,
        remainder_turn: &mut Option<Held<'_, ()>>,
    ) -> Result<NewMemory<M>, Error>
    where
        D: MemoryDeviceExt<M>,
    {
        // Memory dedicated to an image and exported as an Android hardware
        // buffer is sized by the driver: its `allocationSize` must be 0
        // (VUID-VkMemoryAllocateInfo-pNext-01874), where the allocator
        // counts, maps and clamps flushes by the size it asks for. Refused
        // before anything is counted; a block, or memory dedicated to a
        // buffer or to no resource, takes a size (-07900, -07901).
        if matches!(request.dedicated, Some(DedicatedTarget::Image(_)))
            && request
                .export_handle_types
                .contains(ANDROID_HARDWARE_BUFFER)
        {
            return Err(Error::NotExportable {
                handle_types: ANDROID_HARDWARE_BUFFER,
            });
        }
        // Memory exported as a D3D11 texture or D3D12 resource must name
        // its image or buffer (every driver reports DEDICATED_ONLY for
        // them, VUID-VkMemoryAllocateInfo-pNext-00639): never a block, nor
        // dedicated memory for no one resource.
        let dedicated_only = request.export_handle_types & DEDICATED_ONLY_HANDLE_TYPES;
        if !dedicated_only.is_empty() && request.dedicated.is_none() {
            return Err(Error::NotExportable {
                handle_types: dedicated_only,
            });
        }
        // Requests above the limit were refused before placement, but a
        // block may still have rounded one up past it: the driver would
        // refuse (or may refuse) such memory anyway.
        if request.size > self.properties.device.max_memory_allocation_size {
            return Err(Error::OutOfDeviceMemory);
        }
        // Nor may memory exceed its heap (VUID-vkAllocateMemory-pAllocateInfo-01713):
        // a type whose heap the backend does not list (Vulkan rules it out)
        // has a heap of 0 bytes, so no memory of it is made, and the heaps'
        // tables below are never indexed past their end.
        if request.size > self.heap_size(request.memory_type) {
            return Err(Error::OutOfDeviceMemory);
        }
        // Before the memory is made: a logger that panics here leaves
        // nothing to undo.
        log::debug!(
            "vk-suballoc: allocating {} bytes of memory type {} ({})",
            request.size,
            request.memory_type,
            request.name.unwrap_or("unnamed")
        );
        let heap = self.heap_of(request.memory_type);
        // One memory object of the heap at a time, from the budget check to
        // the usage count: without this, two threads in different memory
        // types of the heap could both pass the check and together exceed
        // the budget. A poisoned turn guards nothing: carry on.
        let heap_turn = self.heap_turns[heap as usize]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if request.within_budget {
            // A sum past u64::MAX is over any budget: saturated, it equalled
            // a budget of u64::MAX (a driver's "no limit") and passed.
            let over = |budget: HeapBudget| {
                budget
                    .usage
                    .checked_add(request.size)
                    .map_or(true, |total| total > budget.budget)
            };
            let mut budget = self.heap_budgets()[heap as usize];
            if over(budget) && self.properties.memory_budget {
                // The estimate may be stale: refuse on a reading taken
                // since the request began (this check's own, or a new one).
                budget = self.budgets(Read::ForRecheck)[heap as usize];
            }
            if over(budget) {
                return Err(Error::OverBudget {
                    heap,
                    size: request.size,
                    usage: budget.usage,
                    budget: budget.budget,
                });
            }
        }
        let limit = self.properties.device.max_memory_allocation_count;
        let slot = ObjectSlot::take(&self.memory_objects, limit)?;
        // `Config::heap_size_limits`: the allocator's memory in a limited
        // heap never exceeds its limited size, whatever the budget (VMA's
        // `m_HeapSizeLimitMask` check). Refused as the driver refuses a full
        // heap, with no call, so that the request takes the same fallbacks;
        // not remembered as the driver's refusal (`context/refusals.rs`).
        // Under the heap's turn, which frees take too: the usage is exact.
        if self.is_limited_heap(heap) {
            let usage = self.heap_usage[heap as usize].load(Ordering::Relaxed);
            let heap_size = self.heap_size(request.memory_type);
            if usage.saturating_add(request.size) > heap_size {
                drop((slot, heap_turn));
                log::debug!(
                    "vk-suballoc: not asking for {} bytes of memory type {}: heap {heap} would pass its limit of {heap_size} bytes ({usage} in use)",
                    request.size,
                    request.memory_type
                );
                return Err(Error::OutOfDeviceMemory);
            }
        }
        // Where the driver would be asked, after the checks that answer
        // without it, so that a skipped attempt fails as the call would.
        if request.skip_if_refused {
            if let Some(refused) = self.remembered_refusal(heap, request.size) {
                drop((slot, heap_turn));
                // Once the heap's turn is released, as the line logged
                // before it is taken.
                log::debug!(
                    "vk-suballoc: not asking for {} bytes of memory type {}: heap {heap} refused {refused} bytes (remembered until memory is freed there or a frame ends)",
                    request.size,
                    request.memory_type
                );
                return Err(Error::OutOfDeviceMemory);
            }
        }
        // With buffer device address on, any block, and memory dedicated to
        // a buffer or to no named resource, may hold a buffer whose address
        // is taken; memory dedicated to an image never does (VMA's rule).
        let for_image = matches!(request.dedicated, Some(DedicatedTarget::Image(_)));
        let flags = if self.properties.device.buffer_device_address && !for_image {
            AllocationFlags::DEVICE_ADDRESS
        } else {
            AllocationFlags::empty()
        };
        let info = AllocateInfo {
            size: request.size,
            memory_type: request.memory_type,
            flags,
            dedicated: request.dedicated,
            // Every backend gets a valid priority, as `AllocateInfo` says.
            priority: request.priority.map(memory_priority),
            name: request.name,
            export_handle_types: request.export_handle_types,
        };
        // SAFETY: `memory_type` is an index of this device's types (callers
        // take it from the ranked candidates) and `size` is non-zero (checked
        // at the facade) (VUID-vkAllocateMemory-pAllocateInfo-01714,
        // VUID-VkMemoryAllocateInfo-allocationSize-07899); DEVICE_ADDRESS is
        // set only when the device reports buffer device address enabled
        // (VUID-VkMemoryAllocateInfo-flags-03331); a dedicated target comes
        // from the caller's resource of this exact size; export handle types
        // come from a custom pool, made by a safe call: they are handle types
        // Vulkan defines, which the backend, when it can tell, says the
        // device exports (`Allocator::create_pool`), and otherwise the
        // backend's maker vouched for them (`AshMemoryDevice::new`,
        // VUID-VkExportMemoryAllocateInfo-handleTypes-00656),
        // and are no Android hardware buffer for an image (checked above,
        // VUID-VkMemoryAllocateInfo-pNext-01874).
        let mut memory = match unsafe { self.device.allocate(&info) } {
            Ok(memory) => memory,
            // The slot goes back as it drops (and on a panic, as it unwinds).
            Err(error) => {
                return Err(match error {
                    // `vkAllocateMemory`'s: the limit is the device's.
                    DeviceError::TooManyObjects => Error::TooManyObjects(limit),
                    DeviceError::OutOfDeviceMemory => {
                        // Under the heap's turn: a free of the heap's
                        // memory cannot come between the refusal and this.
                        // Not for exportable memory, which a driver may
                        // refuse while plain memory is there
                        // (`context/refusals.rs`).
                        if request.export_handle_types.is_empty() {
                            self.remember_refusal(heap, request.size);
                        }
                        Error::OutOfDeviceMemory
                    }
                    other => Error::from(other),
                });
            }
        };
        slot.keep();
        self.made_memory(request.memory_type);
        self.made_in_heap(heap, request.size);
        self.heap_usage[heap as usize].fetch_add(request.size, Ordering::Relaxed);
        drop(heap_turn);
        // Counted: another memory type of the heap may size its remainder
        // block on the room this one left. A failed map, or a panic of
        // the callback, frees it again, which only gives room back.
        drop(remainder_turn.take());
        self.budget_cache().count_object();
        let told = self.tell(
            MemoryEventKind::Allocated,
            &memory,
            request.memory_type,
            request.size,
            request.name,
        );
        if let Err(panic) = told {
            // Handed to nobody: freed again (with its `Freed` event, whose
            // own panic is dropped for the first), then the panic goes on.
            let free = || {
                // SAFETY: allocated above by this context with this type
                // and size, and counted; not mapped yet and never bound.
                unsafe { self.free_memory(memory, false, request.memory_type, request.size) }
            };
            let _ = panic::catch_unwind(AssertUnwindSafe(free));
            panic::resume_unwind(panic);
        }
        let mapped = if self
            .props(request.memory_type)
            .contains(MemoryPropertyFlags::HOST_VISIBLE)
        {
            // A backend that panics here (a bug, caught by the engine) left
            // the object made, counted and told of, but in no pool: it is
            // freed as on a failed map before the panic goes on.
            let map = panic::catch_unwind(AssertUnwindSafe(|| {
                // SAFETY: the memory is new, so not mapped yet, and
                // host-visible; the range is the whole object
                // (VUID-vkMapMemory-memory-00678, -00682, -offset-00679,
                // -size-00681).
                unsafe { self.device.map_memory(&mut memory, 0, request.size) }
            }));
            match map {
                Ok(Ok(pointer)) => Some(MappedPtr(pointer)),
                Ok(Err(error)) => {
                    // SAFETY: allocated above by this context with this
                    // type and size, and counted; not mapped (the map
                    // failed) and never bound.
                    unsafe { self.free_memory(memory, false, request.memory_type, request.size) };
                    return Err(DeviceError::from(error).into());
                }
                Err(panic) => {
                    let free = || {
                        // SAFETY: as for a failed map (should the backend
                        // have mapped it before it panicked, vkFreeMemory
                        // unmaps it).
                        unsafe {
                            self.free_memory(memory, false, request.memory_type, request.size)
                        }
                    };
                    // Its `Freed` event's own panic is dropped for the
                    // first, as after a panic of the `Allocated` event.
                    let _ = panic::catch_unwind(AssertUnwindSafe(free));
                    panic::resume_unwind(panic);
                }
            }
        } else {
            None
        };
        Ok(NewMemory { memory, mapped })
    }

    /// Unmaps (when mapped) and frees one `VkDeviceMemory`.
    ///
    /// # Safety
    /// `memory` came from [`allocate_memory`](Self::allocate_memory) of this
    /// context with `memory_type` and `size`, `mapped` says whether it is
    /// mapped, and no resource bound to it is used by the GPU any more
    /// (VUID-vkFreeMemory-memory-00677).
    pub(crate) unsafe fn free_memory<M>(
        &self,
        mut memory: M,
        mapped: bool,
        memory_type: u32,
        size: u64,
    ) where
        D: MemoryDeviceExt<M>,
    {
        // A backend that panics in the unmap (a bug, caught by the engine)
        // does not stop the free: the caller counted the memory out, so
        // nothing would free it again. vkFreeMemory unmaps memory still
        // mapped. The panic goes on once it is freed, as the callback's.
        let unmapped = if mapped {
            panic::catch_unwind(AssertUnwindSafe(|| {
                // SAFETY: mapped once at allocation (the caller says it
                // is) and not unmapped since (VUID-vkUnmapMemory-memory-00689).
                unsafe { self.device.unmap_memory(&mut memory) }
            }))
        } else {
            Ok(())
        };
        // Uncounted before the driver frees it: a budget reading taken
        // meanwhile then never counts as ours memory the driver no longer
        // does (`driver_budgets`). The heap's turn keeps budget checks out
        // until the driver has freed it, as it still counts it until then.
        let told = self.tell(MemoryEventKind::Freed, &memory, memory_type, size, None);
        let heap = self.heap_of(memory_type);
        let heap_turn = self.heap_turns[heap as usize]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.heap_usage[heap as usize].fetch_sub(size, Ordering::Relaxed);
        // Release, after the usage drops: a budget reading that sees this
        // sees the usage without it (`MemoryContext::budgets`).
        self.heap_freed[heap as usize].fetch_add(size, Ordering::Release);
        // A backend panicking in the free (a bug) has the memory counted
        // out of the object count too, as out of the heap's usage above:
        // the two agree, and nothing frees it again.
        let freed = panic::catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: the caller's contract: memory of this device that no
            // pending GPU work uses (VUID-vkFreeMemory-memory-00677).
            unsafe { self.device.deallocate_memory(memory) }
        }));
        // Room the driver may give again: every size is asked for anew.
        self.freed_in_heap(heap);
        drop(heap_turn);
        self.memory_objects.fetch_sub(1, Ordering::AcqRel);
        self.budget_cache().count_object();
        log::debug!("vk-suballoc: freed {size} bytes of memory type {memory_type}");
        if let Err(panic) = freed.and(unmapped).and(told) {
            panic::resume_unwind(panic);
        }
    }
}

/// One of `maxMemoryAllocationCount`'s memory objects, counted for an object
/// about to be made: given back when dropped, unless [`keep`](Self::keep)
/// says the object was made. So an error, or a backend that panics (caught
/// by the caller), leaves the count as it was.
struct ObjectSlot<'a> {
    count: &'a AtomicU32,
}

impl<'a> ObjectSlot<'a> {
    /// Counts one more object, when fewer than `limit` exist.
    fn take(count: &'a AtomicU32, limit: u32) -> Result<Self, Error> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .map_err(|_| Error::TooManyObjects(limit))?;
        Ok(Self { count })
    }

    /// The object was made: it stays counted (until `free_memory`).
    fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for ObjectSlot<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}
