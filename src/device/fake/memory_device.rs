//! The [`FakeDevice`] as the allocator's backend: its
//! [`MemoryDeviceExt`] and gpu-alloc [`MemoryDevice`] implementations,
//! which run the calls the allocator makes (allocate, map, flush, bind, the
//! frame signals' queries) through the device's state, with the faults and
//! hooks a test set. Apart from `mod.rs`, which holds what a test calls,
//! because these are what the allocator calls, each as its Vulkan
//! counterpart would answer.

use std::borrow::Cow;
use std::ptr::NonNull;

use ash::vk;
use ash::vk::Handle;
use gpu_alloc_types::{
    AllocationFlags, DeviceMapError, DeviceProperties, MappedMemoryRange, MemoryDevice, OutOfMemory,
};

use super::call_hook::CallHook;
use super::state::Fault;
use super::{FakeCall, FakeDevice, FakeMemory};
use crate::device::{
    AllocateInfo, DedicatedHint, DeviceError, FrameSignal, HeapBudget, MemoryDeviceExt,
    MemoryProperties,
};

impl FakeDevice {
    /// Checks and records flushed (`flush`) or invalidated ranges (a call
    /// of none is a violation); or,
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
        if ranges.is_empty() {
            let call = if flush {
                "vkFlushMappedMemoryRanges"
            } else {
                "vkInvalidateMappedMemoryRanges"
            };
            state.violations.push(format!(
                "VUID-{call}-memoryRangeCount-arraylength: no range"
            ));
        }
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
            max_buffer_size: layout.max_buffer_size,
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
                    // A driver's figures never wrap: usage by others near
                    // u64::MAX reads as u64::MAX.
                    usage: reported.unwrap_or(usage.saturating_add(external)),
                };
            }
        }
        drop(state);
        // Taken out while it runs, so that it may query budgets itself.
        CallHook::run(&self.budget_hook);
        true
    }

    unsafe fn is_signalled(&self, signal: FrameSignal) -> Result<bool, DeviceError> {
        self.panic_if_asked(FakeCall::SignalQuery);
        // Taken out while it runs, so that it may poll itself.
        CallHook::run(&self.poll_hook);
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
        let mut state = self.state();
        if state.device_lost && state.stale_signals {
            // VK_SUCCESS, as a wait on a lost device may return.
            return Ok(true);
        }
        state.is_signalled(signal)
    }

    unsafe fn create_buffer(
        &self,
        size: u64,
        usage: vk::BufferUsageFlags,
    ) -> Result<(vk::Buffer, vk::MemoryRequirements, DedicatedHint), DeviceError> {
        self.panic_if_asked(FakeCall::CreateBuffer);
        let mut state = self.state();
        let fault = state.count_call(FakeCall::CreateBuffer);
        if state.device_lost {
            return Err(DeviceError::DeviceLost);
        }
        if size == 0 {
            return Err(state
                .violation("VUID-VkBufferCreateInfo-size-00912: a buffer of 0 bytes".to_owned()));
        }
        if usage.is_empty() {
            return Err(state.violation(
                "VUID-VkBufferCreateInfo-usage-requiredbitmask: a buffer with no usage".to_owned(),
            ));
        }
        if size > self.layout.max_buffer_size {
            return Err(state.violation(format!(
                "VUID-VkBufferCreateInfo-size-06409: a buffer of {size} bytes exceeds maxBufferSize ({})",
                self.layout.max_buffer_size
            )));
        }
        let memory_type_bits = self.layout.buffer_memory_type_bits();
        let answer = &self.layout.buffer_requirements;
        // Alignment and size as the layout's driver answers them
        // (`BufferRequirements`); a buffer whose size would round past
        // u64::MAX is one no memory can back, which a driver refuses so.
        let Some(required_size) = answer.size(size, usage) else {
            return Err(DeviceError::OutOfDeviceMemory);
        };
        // A failure a test asked for (`fail_call`), once the call is valid.
        if let Some(fault) = fault {
            return Err(fault);
        }
        let handle = state.create_resource();
        let requirements = vk::MemoryRequirements {
            size: required_size,
            alignment: answer.alignment(usage),
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
        let mut state = self.state();
        let fault = state.count_call(FakeCall::BindBuffer);
        state.bind(
            &self.layout,
            buffer.as_raw(),
            (memory.as_raw(), offset),
            device_address,
            fault,
        )
    }

    unsafe fn destroy_buffer(&self, buffer: vk::Buffer) {
        self.panic_if_asked(FakeCall::DestroyBuffer);
        self.state().destroy_resource(buffer.as_raw());
    }

    unsafe fn destroy_image(&self, image: vk::Image) {
        self.panic_if_asked(FakeCall::DestroyImage);
        self.state().destroy_resource(image.as_raw());
    }

    unsafe fn buffer_device_address(&self, buffer: vk::Buffer) -> Option<vk::DeviceAddress> {
        self.state()
            .buffer_device_address(&self.layout, buffer.as_raw())
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
        self.panic_if_asked(FakeCall::Free);
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
