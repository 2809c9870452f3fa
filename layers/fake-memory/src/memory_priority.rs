//! `VK_EXT_memory_priority`, emulated for the profiles of GPUs that have it
//! (`Profile::memory_priority`, the `priority=on|off` option).
//!
//! A memory priority tells the driver which allocations to keep in device
//! memory when the heap is oversubscribed: a float in `[0, 1]` chained to
//! `vkAllocateMemory` as `VkMemoryPriorityAllocateInfoEXT`, allowed once the
//! extension and its `memoryPriority` feature are enabled. Lavapipe has
//! neither, so the layer offers both itself: it lists the extension,
//! reports `VkPhysicalDeviceMemoryPriorityFeaturesEXT::memoryPriority` as
//! true, takes the extension's name and feature structure out of
//! `vkCreateDevice`'s create info and the priority structure out of
//! `vkAllocateMemory`'s chain before the driver sees them, and records the
//! priorities it saw. The validation layer above sees the extension
//! enabled and checks the application's use of the structure (its range,
//! VUID-VkMemoryPriorityAllocateInfoEXT-priority-02602, and its presence
//! without the extension, VUID-VkMemoryAllocateInfo-pNext-pNext).
//!
//! A test reads the priorities back through a command of the layer's own,
//! [`GET_SEEN_PRIORITIES`] (see [`get_seen_memory_priorities`]), looked up
//! with `vkGetDeviceProcAddr`; the validation layer passes the names it
//! does not know down the chain. The records carry no memory handle: the
//! validation layer hands the driver (and this layer) other handles than
//! the application's.
//!
//! A structure is taken out of a `pNext` chain without writing to the
//! caller's structures: the ones before it are copied, so their sizes must
//! be known ([`structure_size`]); behind an unknown one the layer refuses
//! the call with a line on standard error naming its `sType`.

use std::ffi::{c_char, c_void, CStr};
use std::io::Write;
use std::sync::Mutex;

use ash::vk;

use crate::c_interop::{pnext_chain, write_array};
use crate::dispatch_registry::{device_state, instance_state};
use crate::ffi_guard::guard;
use crate::loader_interface::LayerDeviceCreateInfo;
use crate::memory_accounting::lock;

/// `VK_EXT_memory_priority`, which this layer provides.
pub const MEMORY_PRIORITY: &CStr = vk::EXT_MEMORY_PRIORITY_NAME;

/// The name of the layer's own query command ([`get_seen_memory_priorities`]).
pub const GET_SEEN_PRIORITIES: &CStr = c"vkGetSeenMemoryPrioritiesVKSUBALLOC";

/// `VkExtensionProperties` of `VK_EXT_memory_priority`.
pub fn memory_priority_extension() -> vk::ExtensionProperties {
    let mut properties = vk::ExtensionProperties {
        spec_version: vk::EXT_MEMORY_PRIORITY_SPEC_VERSION,
        ..Default::default()
    };
    for (slot, byte) in properties
        .extension_name
        .iter_mut()
        .zip(MEMORY_PRIORITY.to_bytes())
    {
        *slot = *byte as c_char;
    }
    properties
}

/// Whether `extensions` lists `VK_EXT_memory_priority`.
pub fn has_memory_priority(extensions: &[vk::ExtensionProperties]) -> bool {
    extensions.iter().any(|e| {
        e.extension_name_as_c_str()
            .is_ok_and(|name| name == MEMORY_PRIORITY)
    })
}

/// One `vkAllocateMemory` call that carried `VkMemoryPriorityAllocateInfoEXT`
/// and succeeded, as [`get_seen_memory_priorities`] hands it out (a C
/// structure: the test side declares the same).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeenPriority {
    /// `allocationSize`.
    pub allocation_size: u64,
    /// The (fake) `memoryTypeIndex` the application asked for.
    pub memory_type_index: u32,
    /// `VkMemoryPriorityAllocateInfoEXT::priority`, as the application gave it.
    pub priority: f32,
}

/// The priorities one device's allocations carried, in call order.
#[derive(Debug, Default)]
pub struct SeenPriorities {
    seen: Mutex<Vec<SeenPriority>>,
}

impl SeenPriorities {
    /// Records an allocation made with a priority.
    pub fn record(&self, seen: SeenPriority) {
        lock(&self.seen).push(seen);
    }

    /// Every record so far.
    pub fn snapshot(&self) -> Vec<SeenPriority> {
        lock(&self.seen).clone()
    }
}

/// `vkGetSeenMemoryPrioritiesVKSUBALLOC(device, pCount, pPriorities)`: the
/// layer's own command. Lists, with the two-call idiom, every successful
/// `vkAllocateMemory` of `device` that carried a
/// `VkMemoryPriorityAllocateInfoEXT`, in call order, freed memory included.
/// `VK_ERROR_FEATURE_NOT_PRESENT` for a device the layer does not fake.
///
/// # Safety
/// `device` is a live device; `count` is valid; `out` is null or points at
/// `*count` writable [`SeenPriority`] structures.
pub unsafe extern "system" fn get_seen_memory_priorities(
    device: vk::Device,
    count: *mut u32,
    out: *mut SeenPriority,
) -> vk::Result {
    guard(
        "vkGetSeenMemoryPrioritiesVKSUBALLOC",
        vk::Result::ERROR_INITIALIZATION_FAILED,
        || {
            // SAFETY: a live device, from the caller.
            let Some(state) = (unsafe { device_state(device) }) else {
                return vk::Result::ERROR_INITIALIZATION_FAILED;
            };
            let Some(fake) = &state.fake else {
                return vk::Result::ERROR_FEATURE_NOT_PRESENT;
            };
            let seen = fake.seen_priorities.snapshot();
            // SAFETY: the caller's valid count and array.
            unsafe { write_array(&seen, count, out) }
        },
    )
}

/// `vkGetPhysicalDeviceFeatures2[KHR]`: where the configuration offers
/// `VK_EXT_memory_priority`, `memoryPriority` is true in every
/// `VkPhysicalDeviceMemoryPriorityFeaturesEXT` of the output chain; where
/// it does not, the structure keeps what the caller put in it, as a driver
/// without the extension leaves it (the driver below may have it).
///
/// # Safety
/// The caller's arguments are valid, as Vulkan requires.
pub unsafe extern "system" fn get_physical_device_features2(
    physical_device: vk::PhysicalDevice,
    features: *mut vk::PhysicalDeviceFeatures2<'_>,
) {
    guard("vkGetPhysicalDeviceFeatures2", (), || {
        // SAFETY: a live physical device, from the caller.
        let Some(state) = (unsafe { instance_state(physical_device) }) else {
            return;
        };
        let Some(next) = state.next.get_physical_device_features2 else {
            return;
        };
        let offered = state.config.as_ref().map(|c| c.memory_priority());
        let structures: Vec<*mut vk::PhysicalDeviceMemoryPriorityFeaturesEXT<'static>> =
            if features.is_null() {
                Vec::new()
            } else {
                // SAFETY: non-null, the caller's valid output chain.
                unsafe { pnext_chain((*features).p_next.cast_const()) }
                    .filter(|&(s_type, _)| {
                        s_type == vk::StructureType::PHYSICAL_DEVICE_MEMORY_PRIORITY_FEATURES_EXT
                    })
                    // The sType says what the structure is, an output
                    // structure of the caller's.
                    .map(|(_, structure)| structure.cast_mut().cast())
                    .collect()
            };
        // SAFETY: each is a priority features structure of the caller's chain.
        let callers: Vec<vk::Bool32> = structures
            .iter()
            .map(|&s| unsafe { (*s).memory_priority })
            .collect();
        // SAFETY: forwarding the caller's valid arguments.
        unsafe { next(physical_device, features) };
        let Some(offered) = offered else { return };
        for (structure, callers) in structures.into_iter().zip(callers) {
            // SAFETY: an output structure of the caller's chain; only the
            // feature is written, its links stay the caller's.
            unsafe { (*structure).memory_priority = if offered { vk::TRUE } else { callers } };
        }
    });
}

/// The size of a structure that may stand in a `vkCreateDevice` or
/// `vkAllocateMemory` chain before the one the layer takes out (so that
/// the layer can copy it), `None` for one it does not know.
pub fn structure_size(s_type: vk::StructureType) -> Option<usize> {
    use std::mem::size_of;
    use vk::StructureType as S;
    Some(match s_type {
        // The loader's own (vk_layer.h): sType, pNext, function and a union
        // of two pointers (the instance structure's union is larger, the
        // device one's is not: a larger copy reads past the loader's).
        S::LOADER_DEVICE_CREATE_INFO => size_of::<LayerDeviceCreateInfo>(),
        S::PHYSICAL_DEVICE_FEATURES_2 => size_of::<vk::PhysicalDeviceFeatures2<'_>>(),
        S::PHYSICAL_DEVICE_VULKAN_1_1_FEATURES => {
            size_of::<vk::PhysicalDeviceVulkan11Features<'_>>()
        }
        S::PHYSICAL_DEVICE_VULKAN_1_2_FEATURES => {
            size_of::<vk::PhysicalDeviceVulkan12Features<'_>>()
        }
        S::PHYSICAL_DEVICE_VULKAN_1_3_FEATURES => {
            size_of::<vk::PhysicalDeviceVulkan13Features<'_>>()
        }
        S::DEVICE_GROUP_DEVICE_CREATE_INFO => size_of::<vk::DeviceGroupDeviceCreateInfo<'_>>(),
        S::PHYSICAL_DEVICE_PROTECTED_MEMORY_FEATURES => {
            size_of::<vk::PhysicalDeviceProtectedMemoryFeatures<'_>>()
        }
        S::PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES => {
            size_of::<vk::PhysicalDeviceBufferDeviceAddressFeatures<'_>>()
        }
        S::PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES => {
            size_of::<vk::PhysicalDeviceTimelineSemaphoreFeatures<'_>>()
        }
        S::PHYSICAL_DEVICE_SYNCHRONIZATION_2_FEATURES => {
            size_of::<vk::PhysicalDeviceSynchronization2Features<'_>>()
        }
        S::PHYSICAL_DEVICE_MAINTENANCE_4_FEATURES => {
            size_of::<vk::PhysicalDeviceMaintenance4Features<'_>>()
        }
        S::PHYSICAL_DEVICE_COHERENT_MEMORY_FEATURES_AMD => {
            size_of::<vk::PhysicalDeviceCoherentMemoryFeaturesAMD<'_>>()
        }
        S::PHYSICAL_DEVICE_MEMORY_PRIORITY_FEATURES_EXT => {
            size_of::<vk::PhysicalDeviceMemoryPriorityFeaturesEXT<'_>>()
        }
        S::MEMORY_ALLOCATE_FLAGS_INFO => size_of::<vk::MemoryAllocateFlagsInfo<'_>>(),
        S::MEMORY_DEDICATED_ALLOCATE_INFO => size_of::<vk::MemoryDedicatedAllocateInfo<'_>>(),
        S::MEMORY_PRIORITY_ALLOCATE_INFO_EXT => size_of::<vk::MemoryPriorityAllocateInfoEXT<'_>>(),
        S::EXPORT_MEMORY_ALLOCATE_INFO => size_of::<vk::ExportMemoryAllocateInfo<'_>>(),
        S::IMPORT_MEMORY_FD_INFO_KHR => size_of::<vk::ImportMemoryFdInfoKHR<'_>>(),
        S::IMPORT_MEMORY_HOST_POINTER_INFO_EXT => {
            size_of::<vk::ImportMemoryHostPointerInfoEXT<'_>>()
        }
        S::MEMORY_OPAQUE_CAPTURE_ADDRESS_ALLOCATE_INFO => {
            size_of::<vk::MemoryOpaqueCaptureAddressAllocateInfo<'_>>()
        }
        _ => return None,
    })
}

/// A `pNext` chain with structures taken out: copies of the structures
/// before the last one taken out, linked to the caller's rest of the chain.
#[derive(Debug)]
pub struct StrippedChain {
    /// The copies, 8-byte aligned; only held, for the chain links to them.
    #[cfg_attr(not(test), allow(dead_code))]
    copies: Vec<Vec<u64>>,
    head: *const c_void,
}

impl StrippedChain {
    /// The new chain's first structure (null for an empty chain). Valid while
    /// `self` and the caller's chain are.
    pub fn head(&self) -> *const c_void {
        self.head
    }
}

/// `head`'s chain without the structures of type `s_type`, or `None` when it
/// has none (the caller's chain stands as it is).
///
/// # Errors
/// The `sType` of a structure before one to take out whose size the layer
/// does not know ([`structure_size`]); it writes a line on standard error
/// naming it, for the caller to refuse the call.
///
/// # Safety
/// `head` is null or the first structure of a valid chain (every structure
/// starts with `sType` and `pNext` and is as large as its `sType` says),
/// which stays valid while the result is used.
pub unsafe fn without(
    head: *const c_void,
    s_type: vk::StructureType,
) -> Result<Option<StrippedChain>, vk::StructureType> {
    // SAFETY: the contract.
    let chain: Vec<(vk::StructureType, *const c_void)> = unsafe { pnext_chain(head) }.collect();
    let Some(last) = chain.iter().rposition(|&(t, _)| t == s_type) else {
        return Ok(None);
    };
    // SAFETY: a structure of the chain, which starts with sType and pNext.
    let rest = unsafe { (*chain[last].1.cast::<vk::BaseInStructure<'_>>()).p_next }.cast();
    let mut copies = Vec::new();
    for &(t, structure) in chain[..last].iter().filter(|&&(t, _)| t != s_type) {
        let Some(size) = structure_size(t) else {
            let _ = writeln!(
                std::io::stderr(),
                "vk-fake-memory-layer: cannot take {s_type:?} out of a chain that has {t:?} \
                 (size unknown to the layer) before it; add it to memory_priority::structure_size"
            );
            return Err(t);
        };
        let mut copy = vec![0u64; size.div_ceil(8)];
        // SAFETY: the structure has `size` readable bytes (its sType says so),
        // the copy at least as many, and they do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                structure.cast::<u8>(),
                copy.as_mut_ptr().cast::<u8>(),
                size,
            );
        }
        copies.push(copy);
    }
    // Link the copies in order, the last to the rest of the caller's chain.
    let mut next: *const c_void = rest;
    for copy in copies.iter_mut().rev() {
        let header = copy.as_mut_ptr().cast::<vk::BaseOutStructure<'_>>();
        // SAFETY: each copy starts with a structure header, 8-byte aligned.
        unsafe { (*header).p_next = next.cast_mut().cast() };
        next = header.cast_const().cast();
    }
    Ok(Some(StrippedChain { copies, head: next }))
}

/// The priority of `info`'s `VkMemoryPriorityAllocateInfoEXT`, if chained.
///
/// # Safety
/// `info`'s chain is made of valid structures.
pub unsafe fn chained_priority(info: &vk::MemoryAllocateInfo<'_>) -> Option<f32> {
    // SAFETY: a chain of valid structures (contract).
    let (_, found) = unsafe { pnext_chain(info.p_next) }
        .find(|&(t, _)| t == vk::StructureType::MEMORY_PRIORITY_ALLOCATE_INFO_EXT)?;
    // SAFETY: the sType says what the structure is.
    Some(unsafe { (*found.cast::<vk::MemoryPriorityAllocateInfoEXT<'_>>()).priority })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sTypes along a chain.
    fn types(head: *const c_void) -> Vec<vk::StructureType> {
        // SAFETY: chains built on the stack of the test.
        unsafe { pnext_chain(head) }.map(|(t, _)| t).collect()
    }

    #[test]
    fn the_priority_is_taken_out_wherever_it_stands_and_the_rest_kept() {
        let mut flags =
            vk::MemoryAllocateFlagsInfo::default().flags(vk::MemoryAllocateFlags::DEVICE_ADDRESS);
        let mut priority = vk::MemoryPriorityAllocateInfoEXT::default().priority(0.25);
        let mut export = vk::ExportMemoryAllocateInfo::default()
            .handle_types(vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD);
        // push_next prepends: export, priority, flags.
        let info = vk::MemoryAllocateInfo::default()
            .push_next(&mut flags)
            .push_next(&mut priority)
            .push_next(&mut export);
        // SAFETY: a chain on the stack.
        assert_eq!(unsafe { chained_priority(&info) }, Some(0.25));
        // SAFETY: as above.
        let stripped = unsafe {
            without(
                info.p_next,
                vk::StructureType::MEMORY_PRIORITY_ALLOCATE_INFO_EXT,
            )
        }
        .unwrap()
        .unwrap();
        assert_eq!(
            types(stripped.head()),
            [
                vk::StructureType::EXPORT_MEMORY_ALLOCATE_INFO,
                vk::StructureType::MEMORY_ALLOCATE_FLAGS_INFO
            ]
        );
        // The copy keeps its fields; the caller's chain is untouched.
        // SAFETY: the copy is an ExportMemoryAllocateInfo.
        let copy = unsafe { &*stripped.head().cast::<vk::ExportMemoryAllocateInfo<'_>>() };
        assert_eq!(
            copy.handle_types,
            vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD
        );
        assert_eq!(types(info.p_next).len(), 3);
        // First in the chain: nothing to copy.
        let mut priority = vk::MemoryPriorityAllocateInfoEXT::default();
        let mut flags = vk::MemoryAllocateFlagsInfo::default();
        let info = vk::MemoryAllocateInfo::default()
            .push_next(&mut flags)
            .push_next(&mut priority);
        // SAFETY: as above.
        let stripped = unsafe {
            without(
                info.p_next,
                vk::StructureType::MEMORY_PRIORITY_ALLOCATE_INFO_EXT,
            )
        }
        .unwrap()
        .unwrap();
        assert_eq!(
            types(stripped.head()),
            [vk::StructureType::MEMORY_ALLOCATE_FLAGS_INFO]
        );
        assert!(stripped.copies.is_empty());
        // Absent: nothing to do.
        // SAFETY: as above.
        let none = unsafe {
            without(
                info.p_next,
                vk::StructureType::MEMORY_DEDICATED_ALLOCATE_INFO,
            )
        };
        assert!(none.unwrap().is_none());
    }

    /// The loader's `VkLayerDeviceCreateInfo` stands before the
    /// application's structures in every `vkCreateDevice` chain, so it is
    /// copied whenever the feature structure is taken out: as large as
    /// vk_layer.h declares it (32 bytes on 64-bit: its union holds one
    /// pointer, not the instance structure's two function pointers) and
    /// no larger, or the copy reads past the loader's structure (Miri
    /// reports the read out of bounds). No `push_next` here: ash's, under
    /// Stacked Borrows, is the one Miri would stop at.
    #[test]
    fn the_loaders_device_link_is_copied_at_its_own_size() {
        use crate::loader_interface::LayerDeviceCreateInfoPayload;
        use std::mem::size_of;
        assert_eq!(
            structure_size(vk::StructureType::LOADER_DEVICE_CREATE_INFO),
            Some(size_of::<LayerDeviceCreateInfo>())
        );
        let mut vulkan12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut priority = vk::PhysicalDeviceMemoryPriorityFeaturesEXT {
            p_next: std::ptr::from_mut(&mut vulkan12).cast(),
            memory_priority: vk::TRUE,
            ..Default::default()
        };
        // Boxed: exactly the structure's bytes, nothing after them.
        let link = Box::new(LayerDeviceCreateInfo {
            s_type: vk::StructureType::LOADER_DEVICE_CREATE_INFO,
            p_next: std::ptr::from_mut(&mut priority).cast_const().cast(),
            function: 0,
            u: LayerDeviceCreateInfoPayload { other: 0x1234 },
        });
        let head = std::ptr::from_ref::<LayerDeviceCreateInfo>(&link).cast();
        // SAFETY: a chain of whole structures, on the heap and the stack.
        let stripped = unsafe {
            without(
                head,
                vk::StructureType::PHYSICAL_DEVICE_MEMORY_PRIORITY_FEATURES_EXT,
            )
        }
        .unwrap()
        .unwrap();
        assert_eq!(
            types(stripped.head()),
            [
                vk::StructureType::LOADER_DEVICE_CREATE_INFO,
                vk::StructureType::PHYSICAL_DEVICE_VULKAN_1_2_FEATURES
            ]
        );
        // SAFETY: the copy of the loader's structure.
        let copy = unsafe { &*stripped.head().cast::<LayerDeviceCreateInfo>() };
        // SAFETY: the member written above.
        assert_eq!((copy.function, unsafe { copy.u.other }), (0, 0x1234));
    }

    #[test]
    fn an_unknown_structure_before_it_is_refused() {
        let mut priority = vk::MemoryPriorityAllocateInfoEXT::default();
        let mut unknown = vk::ImportAndroidHardwareBufferInfoANDROID::default();
        let info = vk::MemoryAllocateInfo::default()
            .push_next(&mut priority)
            .push_next(&mut unknown);
        // SAFETY: a chain on the stack.
        let result = unsafe {
            without(
                info.p_next,
                vk::StructureType::MEMORY_PRIORITY_ALLOCATE_INFO_EXT,
            )
        };
        assert_eq!(
            result.err(),
            Some(vk::StructureType::IMPORT_ANDROID_HARDWARE_BUFFER_INFO_ANDROID)
        );
    }

    #[test]
    fn the_extension_is_named() {
        assert!(has_memory_priority(&[memory_priority_extension()]));
        assert!(!has_memory_priority(&[vk::ExtensionProperties::default()]));
    }
}
