//! The fake device's bookkeeping, behind its mutex.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use ash::vk;
use ash::vk::Handle;
use gpu_alloc_types::{AllocationFlags, DeviceMapError, MemoryPropertyFlags};

use super::coherence::DeviceCopy;
use super::host_bytes::HostBytes;
use super::FakeLayout;
use crate::device::{
    AllocateInfo, DedicatedTarget, DeviceError, FrameSignal, DEFINED_HANDLE_TYPES,
};

/// What a fake memory object is, for tests to inspect.
#[derive(Clone, Debug, PartialEq)]
pub struct FakeAllocationInfo {
    /// Its handle.
    pub memory: vk::DeviceMemory,
    /// Size in bytes.
    pub size: u64,
    /// Memory type index.
    pub memory_type: u32,
    /// Heap index of that type.
    pub heap: u32,
    /// The resource it is dedicated to, if any.
    pub dedicated: Option<DedicatedTarget>,
    /// Its debug name, if one was given.
    pub name: Option<String>,
    /// Whether it is mapped now.
    pub mapped: bool,
    /// Whether it was allocated with `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT`.
    pub device_address: bool,
    /// The `VK_EXT_memory_priority` priority it was asked for, if any.
    pub priority: Option<f32>,
    /// The handle types it can be exported as
    /// (`VkExportMemoryAllocateInfo::handleTypes`); empty when it was
    /// allocated without.
    pub export_handle_types: vk::ExternalMemoryHandleTypeFlags,
}

/// How often each entry point was called.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FakeCounters {
    /// `vkAllocateMemory` calls, failed ones included.
    pub allocate_calls: u64,
    /// Successful allocations.
    pub allocations: u64,
    /// `vkFreeMemory` calls on live memory.
    pub frees: u64,
    /// `vkMapMemory` calls, failed ones included.
    pub maps: u64,
    /// `vkUnmapMemory` calls.
    pub unmaps: u64,
    /// Ranges flushed.
    pub flushes: u64,
    /// Ranges invalidated.
    pub invalidates: u64,
    /// Reads of the heap budgets (`VK_EXT_memory_budget`), when the layout
    /// has the extension.
    pub budget_queries: u64,
    /// `vkFlushMappedMemoryRanges` calls (each flushes one or more ranges).
    pub flush_calls: u64,
    /// `vkInvalidateMappedMemoryRanges` calls.
    pub invalidate_calls: u64,
    /// Debug names given to live memory after it was made
    /// (`vkSetDebugUtilsObjectNameEXT`); the new name shows in
    /// [`FakeAllocationInfo::name`].
    pub renames: u64,
}

/// A flushed or invalidated range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordedRange {
    /// The memory object.
    pub memory: vk::DeviceMemory,
    /// Offset in bytes.
    pub offset: u64,
    /// Size in bytes (`vk::WHOLE_SIZE` as given).
    pub size: u64,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Fault {
    Allocate { at: u64, error: DeviceError },
    Map { at: u64 },
    Sync { flush: bool, at: u64 },
}

/// Alignment of the fake mapping pointers (`minMemoryMapAlignment`).
const MAP_ALIGNMENT: usize = 64;

/// The byte a freed object's host bytes are filled with in the quarantine.
pub(super) const POISON: u8 = 0xA5;
/// The most host bytes the quarantine keeps, all objects together.
pub(super) const QUARANTINE_BYTES: usize = 64 << 20;
/// Larger freed objects skip the quarantine (their bytes are released at
/// once, unchecked): poisoning touches every page of bytes the OS
/// allocated lazily, which would make tests with huge blocks slow.
pub(super) const QUARANTINE_MAX_OBJECT: usize = 16 << 20;

/// The host bytes of a freed memory object, poisoned, kept so that a host
/// write through a pointer from its old mapping lands in live memory and
/// shows (`State::free`).
#[derive(Debug)]
struct Quarantined {
    handle: u64,
    host: HostBytes,
}

/// Freed objects' host bytes, the oldest first, at most
/// [`QUARANTINE_BYTES`] in all.
#[derive(Debug, Default)]
pub(super) struct Quarantine {
    objects: VecDeque<Quarantined>,
    bytes: usize,
}

impl Quarantine {
    /// Takes in `host`, freed as `handle`, poisoned; evicts (and checks) the
    /// oldest objects to stay within the cap, pushing a line to `violations`
    /// for each that was written after its free.
    fn admit(&mut self, handle: u64, mut host: HostBytes, violations: &mut Vec<String>) {
        let size = host.size();
        if size > QUARANTINE_MAX_OBJECT {
            return;
        }
        while self.bytes + size > QUARANTINE_BYTES {
            match self.objects.pop_front() {
                Some(old) => self.release(old, violations),
                None => break,
            }
        }
        host.poison(POISON);
        self.bytes += size;
        self.objects.push_back(Quarantined { handle, host });
    }

    /// Checks and releases every object.
    pub(super) fn drain(&mut self, violations: &mut Vec<String>) {
        while let Some(old) = self.objects.pop_front() {
            self.release(old, violations);
        }
    }

    fn release(&mut self, old: Quarantined, violations: &mut Vec<String>) {
        self.bytes -= old.host.size();
        if let Some(offset) = old.host.first_changed(POISON) {
            violations.push(format!(
                "use after vkFreeMemory: host bytes of freed memory {:#x} were written after the free (first changed byte at offset {offset})",
                old.handle
            ));
        }
    }
}

#[derive(Debug)]
struct Memory {
    size: u64,
    memory_type: u32,
    heap: u32,
    /// Zeroed host bytes, their start aligned to `MAP_ALIGNMENT`; `None`
    /// unless host-visible.
    host: Option<HostBytes>,
    /// What the device sees, apart from `host`, for a non-coherent type
    /// (`coherence.rs`); `None` when the host and the device share `host`.
    device: Option<DeviceCopy>,
    mapped: Option<(u64, u64)>,
    dedicated: Option<DedicatedTarget>,
    name: Option<String>,
    device_address: bool,
    priority: Option<f32>,
    export_handle_types: vk::ExternalMemoryHandleTypeFlags,
}

impl Memory {
    /// The bytes `len` bytes at `offset` cover; `None` when they pass the
    /// end of the object (or of `u64`).
    fn byte_range(&self, offset: u64, len: usize) -> Option<std::ops::Range<usize>> {
        let end = offset.checked_add(u64::try_from(len).ok()?)?;
        if end > self.size {
            return None;
        }
        let start = usize::try_from(offset).ok()?;
        Some(start..start.checked_add(len)?)
    }

    /// Bytes `range` as the host sees them, with the device copy, if the
    /// object is non-coherent. Only those bytes: the allocator's slices of
    /// the others stay valid (`host_bytes.rs`).
    fn host_and_device(
        &mut self,
        range: std::ops::Range<usize>,
    ) -> Option<(&mut [u8], &mut DeviceCopy)> {
        let host = self.host.as_mut()?;
        let device = self.device.as_mut()?;
        Some((host.range_mut(range), device))
    }
}

/// How many fake devices this process has made: each takes the next
/// range of handles ([`first_handle`]).
static DEVICES: AtomicU64 = AtomicU64::new(0);

/// The handle before the first one of a new device: each device's handles
/// (memory objects, buffers, signals) lie in a range of 2^32 of their own,
/// so that a handle, or a log line naming one, belongs to one device of
/// the process. Tests share one log capture between fake devices: a line
/// naming memory `0x1002` of another test's device could otherwise stand
/// in for their own.
fn first_handle() -> u64 {
    // Past 2^32 devices the ranges wrap: a process never makes that many.
    let device = DEVICES.fetch_add(1, Ordering::Relaxed) & 0xFFFF_FFFF;
    (device << 32) | 0x1000
}

#[derive(Debug)]
pub(super) struct State {
    /// The last handle handed out (the first one less 1 at first).
    next_handle: u64,
    /// Handles of freed memory objects, the last freed on top: a new object
    /// takes one again, as drivers reuse the addresses behind their handles.
    freed_handles: Vec<u64>,
    memories: BTreeMap<u64, Memory>,
    pub(super) heap_usage: Vec<u64>,
    pub(super) heap_caps: Vec<Option<u64>>,
    /// Per heap: (budget, usage by others).
    pub(super) budgets: Vec<(u64, u64)>,
    /// Per heap: a usage reported instead of the true one, as a buggy
    /// driver might.
    pub(super) reported_usage: Vec<Option<u64>>,
    pub(super) counters: FakeCounters,
    pub(super) faults: Vec<Fault>,
    pub(super) fail_from_size: Option<u64>,
    /// How long each `vkAllocateMemory` call takes, outside the lock.
    pub(super) allocation_delay: Option<std::time::Duration>,
    /// The next `vkAllocateMemory` call panics, as a buggy backend would.
    pub(super) panic_on_allocation: bool,
    /// Other calls that panic (`FakeDevice::panic_on`): each with the
    /// number of its calls left until the one that panics (1: the next).
    pub(super) panics: Vec<(super::FakeCall, u64)>,
    /// How long each budget query takes before it reads, and each
    /// `vkFreeMemory` call before and again after it frees, outside the lock.
    pub(super) budget_query_delay: Option<std::time::Duration>,
    pub(super) free_delay: Option<std::time::Duration>,
    pub(super) device_lost: bool,
    /// Fences (0 or 1) and timeline semaphores (their value), by handle.
    pub(super) signals: HashMap<u64, u64>,
    pub(super) violations: Vec<String>,
    /// Freed objects' poisoned host bytes, checked as they leave.
    pub(super) quarantine: Quarantine,
    /// Live buffers and images: handle to bound memory (0 while unbound).
    pub(super) resources: HashMap<u64, u64>,
    /// The usage and memory requirements of the buffers the device created
    /// (`FakeDevice::create_resource` handles have none).
    pub(super) requirements: HashMap<u64, (vk::BufferUsageFlags, vk::MemoryRequirements)>,
    pub(super) flushed: Vec<RecordedRange>,
    pub(super) invalidated: Vec<RecordedRange>,
}

impl State {
    pub(super) fn new(layout: &FakeLayout) -> Self {
        let heaps = layout.memory_heaps.len();
        Self {
            next_handle: first_handle(),
            freed_handles: Vec::new(),
            memories: BTreeMap::new(),
            heap_usage: vec![0; heaps],
            heap_caps: vec![None; heaps],
            budgets: layout
                .memory_heaps
                .iter()
                .map(|h| (h.size / 10 * 8, 0))
                .collect(),
            reported_usage: vec![None; heaps],
            counters: FakeCounters::default(),
            faults: Vec::new(),
            fail_from_size: None,
            allocation_delay: None,
            panic_on_allocation: false,
            panics: Vec::new(),
            budget_query_delay: None,
            free_delay: None,
            device_lost: false,
            signals: HashMap::new(),
            violations: Vec::new(),
            quarantine: Quarantine::default(),
            resources: HashMap::new(),
            requirements: HashMap::new(),
            flushed: Vec::new(),
            invalidated: Vec::new(),
        }
    }

    pub(super) fn create_resource(&mut self) -> u64 {
        self.next_handle += 1;
        self.resources.insert(self.next_handle, 0);
        self.next_handle
    }

    /// Binds a buffer; `device_address` says whether buffer device address
    /// is enabled.
    pub(super) fn bind(&mut self, resource: u64, memory: u64, offset: u64, device_address: bool) {
        let problem = match self.resources.get(&resource) {
            None => Some("VUID-vkBindBufferMemory-buffer-parameter: unknown buffer"),
            Some(&bound) if bound != 0 => {
                Some("VUID-vkBindBufferMemory-buffer-07459: already bound")
            }
            Some(_) => match self.memories.get(&memory) {
                None => Some("VUID-vkBindBufferMemory-memory-parameter: unknown memory"),
                Some(m) if offset >= m.size => {
                    Some("VUID-vkBindBufferMemory-memoryOffset-01031: offset past the memory")
                }
                Some(m) => {
                    let created = self.requirements.get(&resource);
                    bind_problem(m, created, resource, offset, device_address)
                }
            },
        };
        match problem {
            Some(problem) => self.violations.push(format!(
                "{problem} (buffer {resource:#x}, memory {memory:#x}, offset {offset})"
            )),
            None => {
                self.resources.insert(resource, memory);
            }
        }
    }

    pub(super) fn destroy_resource(&mut self, resource: u64) {
        self.requirements.remove(&resource);
        if self.resources.remove(&resource).is_none() {
            self.violations.push(format!(
                "vkDestroyBuffer/vkDestroyImage: {resource:#x} is not a live resource"
            ));
        }
    }

    pub(super) fn new_signal(&mut self, value: u64) -> u64 {
        self.next_handle += 1;
        self.signals.insert(self.next_handle, value);
        self.next_handle
    }

    fn violation(&mut self, text: String) -> DeviceError {
        self.violations.push(text);
        DeviceError::Unexpected(vk::Result::ERROR_VALIDATION_FAILED_EXT)
    }

    pub(super) fn allocate(
        &mut self,
        layout: &FakeLayout,
        info: &AllocateInfo<'_>,
    ) -> Result<u64, DeviceError> {
        self.counters.allocate_calls += 1;
        let call = self.counters.allocate_calls;
        if self.device_lost {
            return Err(DeviceError::DeviceLost);
        }
        let Some(memory_type) = layout.memory_types.get(info.memory_type as usize).copied() else {
            return Err(self.violation(format!(
                "VUID-vkAllocateMemory-pAllocateInfo-01714: memory type {} does not exist",
                info.memory_type
            )));
        };
        if info.size == 0 {
            return Err(
                self.violation("VUID-VkMemoryAllocateInfo-allocationSize-07899: size 0".to_owned())
            );
        }
        if layout.amd_device_coherent_types & (1 << info.memory_type) != 0
            && !layout.amd_device_coherent_memory
        {
            return Err(self.violation(format!(
                "VUID-vkAllocateMemory-deviceCoherentMemory-02790: memory type {} is device-coherent (AMD) and the feature is not enabled",
                info.memory_type
            )));
        }
        if memory_type.props.contains(MemoryPropertyFlags::PROTECTED) && !layout.protected_memory {
            return Err(self.violation(format!(
                "VUID-VkMemoryAllocateInfo-memoryTypeIndex-01872: memory type {} is protected and the protectedMemory feature is not enabled",
                info.memory_type
            )));
        }
        if info.flags.contains(AllocationFlags::DEVICE_ADDRESS) && !layout.buffer_device_address {
            return Err(self.violation(
                "VUID-VkMemoryAllocateInfo-flags-03331: device address not enabled".to_owned(),
            ));
        }
        // A dedicated allocation names a live resource of this device.
        if let Some(target) = info.dedicated {
            let resource = target_handle(target);
            let vuid = match target {
                DedicatedTarget::Buffer(_) => "VUID-VkMemoryDedicatedAllocateInfo-buffer-parameter",
                DedicatedTarget::Image(_) => "VUID-VkMemoryDedicatedAllocateInfo-image-parameter",
            };
            if !self.resources.contains_key(&resource) {
                return Err(self.violation(format!(
                    "{vuid}: dedicated to {resource:#x}, which is not a live buffer or image"
                )));
            }
        }
        if let Some(DedicatedTarget::Buffer(buffer)) = info.dedicated {
            if let Some((_, requirements)) = self.requirements.get(&buffer.as_raw()) {
                if requirements.size != info.size {
                    return Err(self.violation(format!(
                        "VUID-VkMemoryDedicatedAllocateInfo-buffer-02965: {} bytes for a buffer that requires {}",
                        info.size, requirements.size
                    )));
                }
            }
        }
        let undefined = info.export_handle_types & !DEFINED_HANDLE_TYPES;
        if !undefined.is_empty() {
            return Err(self.violation(format!(
                "VUID-VkExportMemoryAllocateInfo-handleTypes-parameter: {undefined:?} are no handle types"
            )));
        }
        if let Some(exportable) = layout.exportable_handle_types {
            if !exportable.contains(info.export_handle_types) {
                return Err(self.violation(format!(
                    "VUID-VkExportMemoryAllocateInfo-handleTypes-00656: {:?} are not exportable (only {exportable:?})",
                    info.export_handle_types
                )));
            }
        }
        if let Some(i) = self
            .faults
            .iter()
            .position(|f| matches!(f, Fault::Allocate { at, .. } if *at == call))
        {
            if let Fault::Allocate { error, .. } = self.faults.remove(i) {
                return Err(error);
            }
        }
        if self.memories.len() >= layout.max_memory_allocation_count as usize {
            self.violations.push(format!(
                "VUID-vkAllocateMemory-maxMemoryAllocationCount-04101: {} memory objects exist",
                self.memories.len()
            ));
            return Err(DeviceError::TooManyObjects);
        }
        let heap = memory_type.heap as usize;
        let heap_size = layout.memory_heaps[heap].size;
        if info.size > heap_size {
            self.violations.push(format!(
                "VUID-vkAllocateMemory-pAllocateInfo-01713: {} bytes exceed heap {heap} of {heap_size} bytes",
                info.size
            ));
            return Err(DeviceError::OutOfDeviceMemory);
        }
        let limit = self.heap_caps[heap].map_or(heap_size, |cap| cap.min(heap_size));
        let too_large = self.fail_from_size.is_some_and(|from| info.size >= from)
            || info.size > layout.max_memory_allocation_size;
        if too_large || self.heap_usage[heap] + info.size > limit {
            return Err(DeviceError::OutOfDeviceMemory);
        }
        let host = memory_type
            .props
            .contains(MemoryPropertyFlags::HOST_VISIBLE)
            .then(|| HostBytes::new(info.size as usize, MAP_ALIGNMENT));
        let device = (host.is_some()
            && !memory_type
                .props
                .contains(MemoryPropertyFlags::HOST_COHERENT))
        .then(|| DeviceCopy::new(info.size as usize));
        let handle = self.freed_handles.pop().unwrap_or_else(|| {
            self.next_handle += 1;
            self.next_handle
        });
        self.memories.insert(
            handle,
            Memory {
                size: info.size,
                memory_type: info.memory_type,
                heap: heap as u32,
                host,
                device,
                mapped: None,
                dedicated: info.dedicated,
                name: info.name.map(str::to_owned),
                device_address: info.flags.contains(AllocationFlags::DEVICE_ADDRESS),
                priority: info.priority,
                export_handle_types: info.export_handle_types,
            },
        );
        self.heap_usage[heap] += info.size;
        self.counters.allocations += 1;
        Ok(handle)
    }

    pub(super) fn free(&mut self, handle: u64) {
        match self.memories.remove(&handle) {
            Some(memory) => {
                self.freed_handles.push(handle);
                self.heap_usage[memory.heap as usize] -= memory.size;
                self.counters.frees += 1;
                if let Some(host) = memory.host {
                    self.quarantine.admit(handle, host, &mut self.violations);
                }
            }
            None => self.violations.push(format!(
                "VUID-vkFreeMemory-memory-parameter: memory {handle:#x} is not live"
            )),
        }
    }

    /// Checks and releases the quarantine's objects, recording a violation
    /// for each written after its free.
    pub(super) fn check_quarantine(&mut self) {
        self.quarantine.drain(&mut self.violations);
    }

    pub(super) fn rename(&mut self, handle: u64, name: &str) {
        match self.memories.get_mut(&handle) {
            Some(memory) => {
                memory.name = Some(name.to_owned());
                self.counters.renames += 1;
            }
            None => self.violations.push(format!(
                "VUID-VkDebugUtilsObjectNameInfoEXT-objectType-02590: memory {handle:#x} is not live"
            )),
        }
    }

    pub(super) fn map(
        &mut self,
        layout: &FakeLayout,
        handle: u64,
        offset: u64,
        size: u64,
    ) -> Result<NonNull<u8>, DeviceMapError> {
        self.counters.maps += 1;
        let call = self.counters.maps;
        if let Some(i) = self
            .faults
            .iter()
            .position(|f| matches!(f, Fault::Map { at } if *at == call))
        {
            self.faults.remove(i);
            return Err(DeviceMapError::MapFailed);
        }
        let Some(memory) = self.memories.get_mut(&handle) else {
            self.violations
                .push(format!("vkMapMemory: memory {handle:#x} is not live"));
            return Err(DeviceMapError::MapFailed);
        };
        let props = layout.memory_types[memory.memory_type as usize].props;
        let problem = if !props.contains(MemoryPropertyFlags::HOST_VISIBLE) {
            Some("VUID-vkMapMemory-memory-00682: memory type is not host-visible")
        } else if memory.mapped.is_some() {
            Some("VUID-vkMapMemory-memory-00678: memory is already mapped")
        } else if offset >= memory.size {
            Some("VUID-vkMapMemory-offset-00679: offset past the memory object")
        } else if size == 0 {
            Some("VUID-vkMapMemory-size-00680: size 0")
        } else if size != vk::WHOLE_SIZE && offset.saturating_add(size) > memory.size {
            Some("VUID-vkMapMemory-size-00681: range exceeds the memory object")
        } else {
            None
        };
        if let Some(problem) = problem {
            self.violations.push(problem.to_owned());
            return Err(DeviceMapError::MapFailed);
        }
        let length = if size == vk::WHOLE_SIZE {
            memory.size - offset
        } else {
            size
        };
        memory.mapped = Some((offset, length));
        let range = offset as usize..(offset + length) as usize;
        if let Some((host, device)) = memory.host_and_device(range.clone()) {
            device.map(host, range);
        }
        let host = memory.host.as_mut().ok_or(DeviceMapError::MapFailed)?;
        host.pointer(offset as usize)
            .ok_or(DeviceMapError::MapFailed)
    }

    pub(super) fn unmap(&mut self, handle: u64) {
        self.counters.unmaps += 1;
        match self.memories.get_mut(&handle) {
            Some(memory) if memory.mapped.is_some() => {
                memory.mapped = None;
                if let Some(device) = memory.device.as_mut() {
                    device.unmap();
                }
            }
            _ => self.violations.push(format!(
                "VUID-vkUnmapMemory-memory-00689: memory {handle:#x} is not mapped"
            )),
        }
    }

    /// Checks and records a flush (`flush == true`) or invalidation.
    pub(super) fn record_range(
        &mut self,
        layout: &FakeLayout,
        handle: u64,
        offset: u64,
        size: u64,
        flush: bool,
    ) {
        let range = RecordedRange {
            memory: vk::DeviceMemory::from_raw(handle),
            offset,
            size,
        };
        if flush {
            self.counters.flushes += 1;
            self.flushed.push(range);
        } else {
            self.counters.invalidates += 1;
            self.invalidated.push(range);
        }
        let Some(memory) = self.memories.get_mut(&handle) else {
            self.violations.push(format!(
                "VkMappedMemoryRange: memory {handle:#x} is not live"
            ));
            return;
        };
        let atom = layout.non_coherent_atom_size;
        let checked = match memory.mapped {
            None => Err("VUID-VkMappedMemoryRange-memory-00684: memory is not mapped"),
            Some((map_offset, map_size)) => {
                let map_end = map_offset + map_size;
                let whole = size == vk::WHOLE_SIZE;
                let end = if whole {
                    map_end
                } else {
                    offset.saturating_add(size)
                };
                if whole && !(map_offset..map_end).contains(&offset) {
                    Err("VUID-VkMappedMemoryRange-size-00686: offset outside the mapping")
                } else if offset < map_offset || end > map_end {
                    Err("VUID-VkMappedMemoryRange-size-00685: range outside the mapping")
                } else if whole && map_end % atom != 0 && map_end != memory.size {
                    Err("VUID-VkMappedMemoryRange-size-01389: the mapping ends inside an atom, before the end of the memory")
                } else if offset % atom != 0 {
                    Err("VUID-VkMappedMemoryRange-offset-00687: offset not a multiple of nonCoherentAtomSize")
                } else if size != vk::WHOLE_SIZE && size % atom != 0 && end != memory.size {
                    Err("VUID-VkMappedMemoryRange-size-01390: size not a multiple of nonCoherentAtomSize")
                } else {
                    Ok(offset as usize..end as usize)
                }
            }
        };
        match checked {
            // Non-coherent memory: the bytes move between host and device
            // (coherence.rs); an invalid range moves nothing.
            Ok(bytes) => {
                if let Some((host, device)) = memory.host_and_device(bytes.clone()) {
                    if flush {
                        device.flush(host, bytes);
                    } else {
                        device.invalidate(host, bytes);
                    }
                }
            }
            Err(problem) => self.violations.push(format!(
                "{problem} (offset {offset}, size {size}, memory size {})",
                memory.size
            )),
        }
    }

    pub(super) fn is_signalled(&mut self, signal: FrameSignal) -> Result<bool, DeviceError> {
        if self.device_lost {
            return Err(DeviceError::DeviceLost);
        }
        let (handle, wanted) = match signal {
            FrameSignal::Fence(fence) => (fence.as_raw(), 1),
            FrameSignal::Timeline { semaphore, value } => (semaphore.as_raw(), value),
        };
        match self.signals.get(&handle) {
            Some(&value) => Ok(value >= wanted),
            None => Err(self.violation(format!("{signal:?} was not created by this device"))),
        }
    }

    pub(super) fn live_allocations(&self) -> Vec<FakeAllocationInfo> {
        self.memories
            .iter()
            .map(|(&handle, m)| FakeAllocationInfo {
                memory: vk::DeviceMemory::from_raw(handle),
                size: m.size,
                memory_type: m.memory_type,
                heap: m.heap,
                dedicated: m.dedicated,
                name: m.name.clone(),
                mapped: m.mapped.is_some(),
                device_address: m.device_address,
                priority: m.priority,
                export_handle_types: m.export_handle_types,
            })
            .collect()
    }

    pub(super) fn read(&self, handle: u64, offset: u64, len: usize) -> Option<Vec<u8>> {
        let memory = self.memories.get(&handle)?;
        let range = memory.byte_range(offset, len)?;
        let host = memory.host.as_ref()?;
        match &memory.device {
            Some(device) => Some(device.read(range).to_vec()),
            None => Some(host.range(range).to_vec()),
        }
    }

    pub(super) fn write(&mut self, handle: u64, offset: u64, bytes: &[u8]) -> bool {
        let Some(memory) = self.memories.get_mut(&handle) else {
            return false;
        };
        let Some(range) = memory.byte_range(offset, bytes.len()) else {
            return false;
        };
        match (memory.host.as_mut(), memory.device.as_mut()) {
            (Some(_), Some(device)) => {
                device.write(range.start, bytes);
                true
            }
            (Some(host), None) => {
                host.range_mut(range).copy_from_slice(bytes);
                true
            }
            (None, _) => false,
        }
    }
}

impl Drop for State {
    /// The quarantine's last check: a write into freed memory that no
    /// `violations` or `assert_clean` call saw panics here, unless the
    /// thread is panicking already.
    fn drop(&mut self) {
        let mut found = Vec::new();
        self.quarantine.drain(&mut found);
        if !found.is_empty() && !std::thread::panicking() {
            panic!("fake device dropped with writes into freed memory: {found:#?}");
        }
    }
}

/// The raw handle of the resource dedicated memory is for.
fn target_handle(target: DedicatedTarget) -> u64 {
    match target {
        DedicatedTarget::Buffer(buffer) => buffer.as_raw(),
        DedicatedTarget::Image(image) => image.as_raw(),
    }
}

/// What is wrong with binding `resource`, whose usage and requirements are
/// `created` (when the device made it), to `memory` at `offset`;
/// `device_address` says whether buffer device address is enabled.
fn bind_problem(
    memory: &Memory,
    created: Option<&(vk::BufferUsageFlags, vk::MemoryRequirements)>,
    resource: u64,
    offset: u64,
    device_address: bool,
) -> Option<&'static str> {
    if let Some(target) = memory.dedicated {
        if target_handle(target) != resource || offset != 0 {
            return Some("VUID-vkBindBufferMemory-memory-01508: dedicated memory of another resource, or not at offset 0");
        }
    }
    let (usage, requirements) = created?;
    if device_address
        && usage.contains(vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS)
        && !memory.device_address
    {
        Some("VUID-vkBindBufferMemory-bufferDeviceAddress-03339: a device-address buffer in memory allocated without VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT")
    } else if requirements.memory_type_bits & (1 << memory.memory_type) == 0 {
        Some("VUID-vkBindBufferMemory-memory-01035: memory type not in memoryTypeBits")
    } else if offset % requirements.alignment.max(1) != 0 {
        Some("VUID-vkBindBufferMemory-memoryOffset-01036: offset not a multiple of the alignment")
    } else if requirements.size > memory.size - offset {
        Some("VUID-vkBindBufferMemory-size-01037: the buffer does not fit in the memory")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The handles of the objects `quarantine` holds, the oldest first.
    fn held(quarantine: &Quarantine) -> Vec<u64> {
        quarantine.objects.iter().map(|old| old.handle).collect()
    }

    /// Admits a freed object of `size` host bytes, unwritten, as `handle`:
    /// whatever it evicts breaks no rule.
    fn admit(quarantine: &mut Quarantine, handle: u64, size: usize) {
        let mut violations = Vec::new();
        quarantine.admit(handle, HostBytes::new(size, MAP_ALIGNMENT), &mut violations);
        assert!(violations.is_empty(), "{violations:#?}");
    }

    /// Checks and releases every object of `quarantine`, none written.
    fn drain_clean(quarantine: &mut Quarantine) {
        let mut violations = Vec::new();
        quarantine.drain(&mut violations);
        assert!(violations.is_empty(), "{violations:#?}");
        assert_eq!((held(quarantine), quarantine.bytes), (vec![], 0));
    }

    /// The quarantine keeps freed objects up to 64 MiB in all, exactly, and
    /// past it evicts the oldest, only as many as the new one needs: a write
    /// through an old mapping into any of the last 64 MiB freed lands in
    /// bytes still allocated, and is reported. The use-after-free tests
    /// write into the last object freed, which a quarantine of one object
    /// (or of none but the last) keeps too; each miscount of its bytes here
    /// held fewer objects than the cap allows, or more.
    #[test]
    fn the_quarantine_holds_64_mib_and_evicts_the_oldest_first() {
        let mut quarantine = Quarantine::default();
        for handle in 1..=4 {
            admit(&mut quarantine, handle, QUARANTINE_MAX_OBJECT);
        }
        // 4 × 16 MiB: at the cap, not past it.
        assert_eq!(held(&quarantine), [1, 2, 3, 4]);
        assert_eq!(quarantine.bytes, QUARANTINE_BYTES);
        admit(&mut quarantine, 5, QUARANTINE_MAX_OBJECT);
        assert_eq!(held(&quarantine), [2, 3, 4, 5]);
        assert_eq!(quarantine.bytes, QUARANTINE_BYTES);
        // One page past the cap evicts a whole object, the oldest.
        admit(&mut quarantine, 6, 4096);
        assert_eq!(held(&quarantine), [3, 4, 5, 6]);
        assert_eq!(quarantine.bytes, 3 * QUARANTINE_MAX_OBJECT + 4096);
        drain_clean(&mut quarantine);
    }

    /// Objects over 16 MiB skip the quarantine (poisoning them would touch
    /// every page the OS allocated lazily); one of 16 MiB exactly, and
    /// smaller ones, are kept.
    #[test]
    fn only_objects_over_16_mib_skip_the_quarantine() {
        let mut quarantine = Quarantine::default();
        admit(&mut quarantine, 1, QUARANTINE_MAX_OBJECT + 1);
        admit(&mut quarantine, 2, QUARANTINE_MAX_OBJECT);
        admit(&mut quarantine, 3, 4096);
        assert_eq!(held(&quarantine), [2, 3]);
        assert_eq!(quarantine.bytes, QUARANTINE_MAX_OBJECT + 4096);
        drain_clean(&mut quarantine);
    }
}
