//! The fake device's bookkeeping, behind its mutex.
//!
//! This file holds the memory objects, their free, and what tests read of
//! them; their allocation is in `state/allocation.rs`, the quarantine of
//! freed objects' host bytes in
//! `state/quarantine.rs`, buffers and images and their binds in
//! `state/resources.rs`, and maps, unmaps, flushes and invalidates in
//! `state/mapping.rs`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

use ash::vk;
use ash::vk::Handle;

use super::coherence::DeviceCopy;
use super::host_bytes::HostBytes;
use super::FakeLayout;
use crate::device::{DedicatedTarget, DeviceError, FrameSignal};

mod allocation;
mod mapping;
mod quarantine;
mod resources;

use quarantine::Quarantine;

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

impl FakeCounters {
    /// `vkAllocateMemory` calls that failed (refused by the device or a
    /// fault injected), the difference of the calls and the allocations.
    pub fn refused_allocations(&self) -> u64 {
        self.allocate_calls - self.allocations
    }
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
    Allocate {
        at: u64,
        error: DeviceError,
    },
    Map {
        at: u64,
        /// `OutOfDeviceMemory`, `OutOfHostMemory` or `MapFailed`.
        error: DeviceError,
    },
    Sync {
        flush: bool,
        at: u64,
    },
    /// A call of [`FakeDevice::fail_call`](super::FakeDevice::fail_call).
    Call {
        call: super::FakeCall,
        at: u64,
        error: DeviceError,
    },
}

/// Alignment of the fake mapping pointers (`minMemoryMapAlignment`).
const MAP_ALIGNMENT: usize = 64;

/// The device address of a fake device's first memory object: not 0,
/// which is no buffer's address.
const FIRST_ADDRESS: u64 = 0x1_0000_0000;

/// Memory objects' device addresses start on multiples of this, with at
/// least this much unused between two of them.
const ADDRESS_SPACING: u64 = 64 << 10;

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
    /// The device address of its first byte: the memory objects of a
    /// fake device never share an address range, and none starts at 0.
    address: u64,
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

    /// Bytes `range` as the host sees them, to write, with the device
    /// copy, if the object is non-coherent. Only those bytes: the
    /// allocator's slices of the others stay valid (`host_bytes.rs`).
    fn host_and_device(
        &mut self,
        range: std::ops::Range<usize>,
    ) -> Option<(&mut [u8], &mut DeviceCopy)> {
        let host = self.host.as_mut()?;
        let device = self.device.as_mut()?;
        Some((host.range_mut(range), device))
    }

    /// [`host_and_device`](Self::host_and_device) with the host's bytes
    /// to read only: for a flush, which the allocator makes while its
    /// owner may hold a shared slice of those very bytes (`flush` takes
    /// the allocation by `&`, as `mapped_slice` does). A unique reference
    /// to them would end that slice (Stacked Borrows).
    fn host_to_read_and_device(
        &mut self,
        range: std::ops::Range<usize>,
    ) -> Option<(&[u8], &mut DeviceCopy)> {
        let host = self.host.as_ref()?;
        let device = self.device.as_mut()?;
        Some((host.range(range), device))
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
    /// The device address the next memory object starts at.
    next_address: u64,
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
    /// How many calls of each kind [`FakeDevice::fail_call`](super::FakeDevice::fail_call)
    /// can fail were made (none yet: absent).
    call_counts: HashMap<super::FakeCall, u64>,
    /// How long each budget query takes before it reads, and each
    /// `vkFreeMemory` call before and again after it frees, outside the lock.
    pub(super) budget_query_delay: Option<std::time::Duration>,
    pub(super) free_delay: Option<std::time::Duration>,
    pub(super) device_lost: bool,
    /// On a lost device, waits for frame signals succeed and polls read
    /// them as they were (`FakeDevice::lose_device_with_stale_signals`).
    pub(super) stale_signals: bool,
    /// Fences (0 or 1) and timeline semaphores (their value), by handle.
    pub(super) signals: HashMap<u64, u64>,
    pub(super) violations: Vec<String>,
    /// How many of `violations` a test has read (`FakeDevice::violations`,
    /// `assert_clean`): the device's drop panics on any it has not.
    pub(super) violations_read: usize,
    /// Freed objects' poisoned host bytes, checked as they leave.
    pub(super) quarantine: Quarantine,
    /// Live buffers and images: handle to the memory they are bound to
    /// and the offset there (`(0, 0)` while unbound).
    pub(super) resources: HashMap<u64, (u64, u64)>,
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
            next_address: FIRST_ADDRESS,
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
            call_counts: HashMap::new(),
            budget_query_delay: None,
            free_delay: None,
            device_lost: false,
            stale_signals: false,
            signals: HashMap::new(),
            violations: Vec::new(),
            violations_read: 0,
            quarantine: Quarantine::default(),
            resources: HashMap::new(),
            requirements: HashMap::new(),
            flushed: Vec::new(),
            invalidated: Vec::new(),
        }
    }

    pub(super) fn new_signal(&mut self, value: u64) -> u64 {
        self.next_handle += 1;
        self.signals.insert(self.next_handle, value);
        self.next_handle
    }

    /// How many calls of `call` were made so far.
    pub(super) fn call_count(&self, call: super::FakeCall) -> u64 {
        self.call_counts.get(&call).copied().unwrap_or(0)
    }

    /// Counts a call of `call`, and returns the error it is to fail with
    /// if [`FakeDevice::fail_call`](super::FakeDevice::fail_call) asked
    /// for one (taken: it fails this call only).
    pub(super) fn count_call(&mut self, call: super::FakeCall) -> Option<DeviceError> {
        let count = self.call_counts.entry(call).or_insert(0);
        *count += 1;
        let at = *count;
        let due = |fault: &Fault| matches!(*fault, Fault::Call { call: c, at: a, .. } if c == call && a == at);
        let i = self.faults.iter().position(due)?;
        match self.faults.remove(i) {
            Fault::Call { error, .. } => Some(error),
            _ => None,
        }
    }

    pub(super) fn violation(&mut self, text: String) -> DeviceError {
        self.violations.push(text);
        DeviceError::Unexpected(vk::Result::ERROR_VALIDATION_FAILED_EXT)
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

    pub(super) fn is_signalled(&mut self, signal: FrameSignal) -> Result<bool, DeviceError> {
        if self.device_lost && !self.stale_signals {
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

    pub(super) fn memory_address(&self, handle: u64) -> Option<u64> {
        self.memories.get(&handle).map(|memory| memory.address)
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
    /// The last check: a rule broken that no `violations` or `assert_clean`
    /// call read, a write into freed memory the quarantine finds now, or a
    /// memory object, buffer or image still alive (the allocator holds the
    /// device, so this runs once it dropped and freed what it had) panics
    /// here, unless the thread is panicking already. So a test that never
    /// asks still fails when the allocator broke a rule or leaked.
    fn drop(&mut self) {
        let mut found = self
            .violations
            .split_off(self.violations_read.min(self.violations.len()));
        self.quarantine.drain(&mut found);
        if !self.memories.is_empty() {
            found.push(format!(
                "{} memory objects never freed (VUID-vkDestroyDevice-device-05137)",
                self.memories.len()
            ));
        }
        if !self.resources.is_empty() {
            found.push(format!(
                "{} buffers or images never destroyed (VUID-vkDestroyDevice-device-05137)",
                self.resources.len()
            ));
        }
        if !found.is_empty() && !std::thread::panicking() {
            panic!("fake device dropped with violations no test read: {found:#?}");
        }
    }
}
