//! The counting hooks: the device table's trampolines for
//! `vkAllocateMemory` and `vkFreeMemory`, which call the driver and then
//! count calls, live and peak bytes and the time spent in the driver
//! ([`counts`], [`driver_ns`]); the answers to `vkGetBufferMemoryRequirements2`
//! and `vkGetImageMemoryRequirements2` for the placeholder handles
//! ([`unqueried_buffer`], [`unqueried_image`], [`set_pending_requirements`]);
//! and [`counted_get_device_proc_addr`], which hands all four out. They are
//! apart from `vulkan.rs`, which makes the context that installs them (and
//! keeps the driver's entry points they forward to, `REAL`), because they are
//! what every allocator's `VkDeviceMemory` figures are measured by.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};

use ash::vk;

use super::REAL;

/// Counters of the memory objects the allocators create through the hooks.
#[derive(Default)]
struct Ledger {
    sizes: HashMap<u64, u64>,
    live: u64,
    peak: u64,
    calls: u64,
    frees: u64,
}

static LEDGER: LazyLock<Mutex<Ledger>> = LazyLock::new(Mutex::default);

/// Nanoseconds spent inside the driver's `vkAllocateMemory` and
/// `vkFreeMemory`, since the process started (the replay reads it around each
/// segment).
static DRIVER_NS: AtomicU64 = AtomicU64::new(0);

/// Nanoseconds spent in the driver's `vkAllocateMemory`/`vkFreeMemory` so far.
pub fn driver_ns() -> u64 {
    DRIVER_NS.load(Ordering::Relaxed)
}

/// What the hooks saw since the last [`reset_counts`].
#[derive(Clone, Copy, Debug, Default)]
pub struct MemoryCounts {
    /// `vkAllocateMemory` calls that succeeded.
    pub allocate_calls: u64,
    /// `vkFreeMemory` calls.
    pub free_calls: u64,
    /// Bytes of `VkDeviceMemory` alive now.
    pub live_bytes: u64,
    /// Most bytes of `VkDeviceMemory` alive at once.
    pub peak_bytes: u64,
    /// Memory objects alive now.
    pub live_objects: u64,
}

fn ledger() -> std::sync::MutexGuard<'static, Ledger> {
    LEDGER.lock().unwrap_or_else(|p| p.into_inner())
}

/// Zeroes the call counters and sets the peak to what is alive now.
pub fn reset_counts() {
    let mut l = ledger();
    l.calls = 0;
    l.frees = 0;
    l.peak = l.live;
}

/// The counters now.
pub fn counts() -> MemoryCounts {
    let l = ledger();
    MemoryCounts {
        allocate_calls: l.calls,
        free_calls: l.frees,
        live_bytes: l.live,
        peak_bytes: l.peak,
        live_objects: l.sizes.len() as u64,
    }
}

/// The raw value of the placeholder handles: no driver hands it out.
const PLACEHOLDER: u64 = u64::MAX;

/// A buffer handle whose requirement queries are answered with
/// [`set_pending_requirements`]'s; it never reaches the driver.
#[inline]
pub fn unqueried_buffer() -> vk::Buffer {
    vk::Handle::from_raw(PLACEHOLDER)
}

/// The image counterpart of [`unqueried_buffer`].
#[inline]
pub fn unqueried_image() -> vk::Image {
    vk::Handle::from_raw(PLACEHOLDER)
}

/// The requirements the next query for a placeholder handle returns: size,
/// alignment, memory type bits. Relaxed atomics are plain loads and stores;
/// one thread replays.
static PENDING: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

/// Sets what the next requirement query for a placeholder handle returns.
#[inline]
pub fn set_pending_requirements(requirements: &vk::MemoryRequirements) {
    PENDING[0].store(requirements.size, Ordering::Relaxed);
    PENDING[1].store(requirements.alignment, Ordering::Relaxed);
    PENDING[2].store(u64::from(requirements.memory_type_bits), Ordering::Relaxed);
}

/// Writes the pending requirements into `out`, and "neither required nor
/// preferred" into a `VkMemoryDedicatedRequirements` in its chain: no
/// allocator is given the driver's dedicated hints.
///
/// # Safety
/// `out` is a valid `VkMemoryRequirements2` chain.
unsafe fn answer_requirements(out: *mut vk::MemoryRequirements2<'_>) {
    // SAFETY: the caller passes a valid output chain.
    unsafe {
        (*out).memory_requirements = vk::MemoryRequirements {
            size: PENDING[0].load(Ordering::Relaxed),
            alignment: PENDING[1].load(Ordering::Relaxed),
            memory_type_bits: PENDING[2].load(Ordering::Relaxed) as u32,
        };
        let mut next = (*out).p_next.cast::<vk::BaseOutStructure<'_>>();
        while !next.is_null() {
            if (*next).s_type == vk::StructureType::MEMORY_DEDICATED_REQUIREMENTS {
                let dedicated = next.cast::<vk::MemoryDedicatedRequirements<'_>>();
                (*dedicated).prefers_dedicated_allocation = vk::FALSE;
                (*dedicated).requires_dedicated_allocation = vk::FALSE;
            }
            next = (*next).p_next;
        }
    }
}

unsafe extern "system" fn answering_buffer_requirements(
    device: vk::Device,
    info: *const vk::BufferMemoryRequirementsInfo2<'_>,
    out: *mut vk::MemoryRequirements2<'_>,
) {
    // SAFETY: valid structures from the caller (the Vulkan contract).
    unsafe {
        if vk::Handle::as_raw((*info).buffer) == PLACEHOLDER {
            answer_requirements(out);
        } else {
            let real = REAL.get().expect("hooks installed before use");
            (real.buffer_requirements)(device, info, out);
        }
    }
}

unsafe extern "system" fn answering_image_requirements(
    device: vk::Device,
    info: *const vk::ImageMemoryRequirementsInfo2<'_>,
    out: *mut vk::MemoryRequirements2<'_>,
) {
    // SAFETY: valid structures from the caller (the Vulkan contract).
    unsafe {
        if vk::Handle::as_raw((*info).image) == PLACEHOLDER {
            answer_requirements(out);
        } else {
            let real = REAL.get().expect("hooks installed before use");
            (real.image_requirements)(device, info, out);
        }
    }
}

/// `info` without a `VkMemoryDedicatedAllocateInfo` naming a placeholder
/// handle (VMA chains one when it makes dedicated memory for a typed
/// request): the memory is then plain, as for an untyped request. VMA puts it
/// first in the chain; the bench enables nothing that VMA would chain before
/// it.
///
/// # Safety
/// `info` is a valid `VkMemoryAllocateInfo` chain; the result points into
/// `copy` or `info`.
unsafe fn without_placeholder_dedication<'a>(
    info: *const vk::MemoryAllocateInfo<'a>,
    copy: &mut vk::MemoryAllocateInfo<'a>,
) -> *const vk::MemoryAllocateInfo<'a> {
    let is_placeholder = |s: *const vk::BaseInStructure<'_>| {
        // SAFETY: `s` is a member of a valid chain.
        unsafe {
            (*s).s_type == vk::StructureType::MEMORY_DEDICATED_ALLOCATE_INFO && {
                let d = s.cast::<vk::MemoryDedicatedAllocateInfo<'_>>();
                vk::Handle::as_raw((*d).buffer) == PLACEHOLDER
                    || vk::Handle::as_raw((*d).image) == PLACEHOLDER
            }
        }
    };
    // SAFETY: a valid chain, read only.
    unsafe {
        let first = (*info).p_next.cast::<vk::BaseInStructure<'_>>();
        if first.is_null() {
            return info;
        }
        let mut later = (*first).p_next;
        while !later.is_null() {
            assert!(
                !is_placeholder(later),
                "a placeholder dedicated allocation not first in the chain"
            );
            later = (*later).p_next;
        }
        if !is_placeholder(first) {
            return info;
        }
        *copy = *info;
        copy.p_next = (*first).p_next.cast();
        copy
    }
}

unsafe extern "system" fn counting_allocate_memory(
    device: vk::Device,
    info: *const vk::MemoryAllocateInfo<'_>,
    callbacks: *const vk::AllocationCallbacks<'_>,
    memory: *mut vk::DeviceMemory,
) -> vk::Result {
    let real = REAL.get().expect("hooks installed before use");
    let mut copy = vk::MemoryAllocateInfo::default();
    // SAFETY: the caller's valid chain.
    let info = unsafe { without_placeholder_dedication(info, &mut copy) };
    let start = std::time::Instant::now();
    let result = unsafe { (real.allocate)(device, info, callbacks, memory) };
    DRIVER_NS.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    if result == vk::Result::SUCCESS {
        let size = unsafe { (*info).allocation_size };
        let handle = vk::Handle::as_raw(unsafe { *memory });
        let mut l = ledger();
        l.calls += 1;
        l.live += size;
        l.peak = l.peak.max(l.live);
        l.sizes.insert(handle, size);
    }
    result
}

unsafe extern "system" fn counting_free_memory(
    device: vk::Device,
    memory: vk::DeviceMemory,
    callbacks: *const vk::AllocationCallbacks<'_>,
) {
    let real = REAL.get().expect("hooks installed before use");
    if memory != vk::DeviceMemory::null() {
        let mut l = ledger();
        l.frees += 1;
        if let Some(size) = l.sizes.remove(&vk::Handle::as_raw(memory)) {
            l.live -= size;
        }
    }
    let start = std::time::Instant::now();
    unsafe { (real.free)(device, memory, callbacks) };
    DRIVER_NS.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// `vkGetDeviceProcAddr` with the counted table's entries: the counting
/// `vkAllocateMemory`/`vkFreeMemory` and the answering requirement queries,
/// the driver's own for every other name. The counted `ash::Device` is
/// loaded through it, and so is vulkano's device table (its `Device` is
/// made over the same `VkDevice` with a loader that hands this out).
///
/// # Safety
/// The Vulkan contract of `vkGetDeviceProcAddr`: `device` is the context's
/// device and `name` a NUL-terminated string; a
/// [`VulkanContext`](super::VulkanContext) exists.
pub unsafe extern "system" fn counted_get_device_proc_addr(
    device: vk::Device,
    name: *const c_char,
) -> vk::PFN_vkVoidFunction {
    // SAFETY: a NUL-terminated name (the caller's contract).
    let wanted = unsafe { CStr::from_ptr(name) };
    let hook: Option<*const c_void> = if wanted == c"vkAllocateMemory" {
        Some(counting_allocate_memory as *const c_void)
    } else if wanted == c"vkFreeMemory" {
        Some(counting_free_memory as *const c_void)
    } else if wanted == c"vkGetBufferMemoryRequirements2" {
        Some(answering_buffer_requirements as *const c_void)
    } else if wanted == c"vkGetImageMemoryRequirements2" {
        Some(answering_image_requirements as *const c_void)
    } else if wanted == c"vkGetDeviceProcAddr" {
        Some(counted_get_device_proc_addr as *const c_void)
    } else {
        None
    };
    match hook {
        // SAFETY: a function pointer, returned as the void function type
        // that the caller casts back to the named entry point's.
        Some(f) => unsafe { std::mem::transmute::<*const c_void, vk::PFN_vkVoidFunction>(f) },
        None => {
            let real = REAL.get().expect("hooks installed before use");
            // SAFETY: the driver's own lookup for this device and name.
            unsafe { (real.get_device_proc_addr)(device, name) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placeholder_dedicated_link_is_dropped_and_the_rest_kept() {
        let mut priority = vk::MemoryPriorityAllocateInfoEXT::default().priority(0.5);
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default().buffer(unqueried_buffer());
        let info = vk::MemoryAllocateInfo::default()
            .allocation_size(4096)
            .push_next(&mut priority)
            .push_next(&mut dedicated);
        let mut copy = vk::MemoryAllocateInfo::default();
        // SAFETY: a valid chain on the stack.
        let out = unsafe { &*without_placeholder_dedication(&info, &mut copy) };
        assert_eq!(out.allocation_size, 4096);
        // SAFETY: the chain's next member is the priority info.
        let next = unsafe { &*out.p_next.cast::<vk::BaseInStructure<'_>>() };
        assert_eq!(
            next.s_type,
            vk::StructureType::MEMORY_PRIORITY_ALLOCATE_INFO_EXT
        );
        assert!(next.p_next.is_null());
    }

    #[test]
    fn a_real_dedicated_link_is_kept() {
        let buffer: vk::Buffer = vk::Handle::from_raw(0x1000);
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default().buffer(buffer);
        let info = vk::MemoryAllocateInfo::default()
            .allocation_size(4096)
            .push_next(&mut dedicated);
        let mut copy = vk::MemoryAllocateInfo::default();
        // SAFETY: a valid chain on the stack.
        let out = unsafe { without_placeholder_dedication(&info, &mut copy) };
        assert!(std::ptr::eq(out, &info));
    }

    #[test]
    fn a_placeholder_query_gets_the_pending_requirements_and_no_dedicated_hint() {
        let wanted = vk::MemoryRequirements {
            size: 12345,
            alignment: 256,
            memory_type_bits: 0b1010,
        };
        set_pending_requirements(&wanted);
        let mut dedicated = vk::MemoryDedicatedRequirements {
            prefers_dedicated_allocation: vk::TRUE,
            requires_dedicated_allocation: vk::TRUE,
            ..Default::default()
        };
        let mut out = vk::MemoryRequirements2::default().push_next(&mut dedicated);
        let info = vk::BufferMemoryRequirementsInfo2::default().buffer(unqueried_buffer());
        // SAFETY: valid structures; the placeholder never reaches a driver.
        unsafe { answering_buffer_requirements(vk::Device::null(), &info, &mut out) };
        let got = out.memory_requirements;
        assert_eq!(
            (got.size, got.alignment, got.memory_type_bits),
            (12345, 256, 0b1010)
        );
        assert_eq!(dedicated.prefers_dedicated_allocation, vk::FALSE);
        assert_eq!(dedicated.requires_dedicated_allocation, vk::FALSE);
    }
}
