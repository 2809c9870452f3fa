//! The loader–layer interface: the few C structures of `vk_layer.h` that ash
//! does not define, and the walk down the create-info chains that finds the
//! next layer.
//!
//! When the loader builds a call chain it hands every layer, inside the
//! `pNext` chain of `VkInstanceCreateInfo` / `VkDeviceCreateInfo`, a structure
//! of type `VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO` (47) or
//! `VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO` (48). The one whose `function`
//! is `VK_LAYER_LINK_INFO` points at a linked list of "links", one per layer
//! still to come; the head is ours and holds the next layer's
//! `vkGetInstanceProcAddr` (and, for devices, `vkGetDeviceProcAddr`). A layer
//! takes its link and advances the head to the following one before calling
//! the next layer's `vkCreateInstance` / `vkCreateDevice`, so the next layer
//! finds its own link in turn. The layouts below follow `vk_layer.h` of the
//! Vulkan-Headers (interface version 2) field for field.

use std::ffi::{c_char, c_void};

use ash::vk;

use crate::c_interop::pnext_chain;

/// `VkNegotiateLayerStructType::LAYER_NEGOTIATE_INTERFACE_STRUCT`: the only
/// valid `s_type` of [`NegotiateLayerInterface`].
pub const LAYER_NEGOTIATE_INTERFACE_STRUCT: i32 = 1;

/// `VkLayerFunction::VK_LAYER_LINK_INFO`: the loader structure carries the
/// chain of next-layer links (the other values carry loader callbacks that
/// this layer does not need).
pub const VK_LAYER_LINK_INFO: i32 = 0;

/// The loader–layer interface version this layer implements.
pub const LAYER_INTERFACE_VERSION: u32 = 2;

/// `PFN_GetPhysicalDeviceProcAddr` of `vk_layer.h`.
pub type PfnGetPhysicalDeviceProcAddr = unsafe extern "system" fn(
    instance: vk::Instance,
    name: *const c_char,
) -> vk::PFN_vkVoidFunction;

/// `VkNegotiateLayerInterface`: filled in by `vkNegotiateLoaderLayerInterfaceVersion`.
#[repr(C)]
#[derive(Debug)]
pub struct NegotiateLayerInterface {
    /// `VkNegotiateLayerStructType` (a C enum, so `int`).
    pub s_type: i32,
    /// Reserved, null.
    pub p_next: *mut c_void,
    /// In: the highest interface version the loader supports. Out: ours.
    pub loader_layer_interface_version: u32,
    /// Out: this layer's `vkGetInstanceProcAddr`.
    pub pfn_get_instance_proc_addr: Option<vk::PFN_vkGetInstanceProcAddr>,
    /// Out: this layer's `vkGetDeviceProcAddr`.
    pub pfn_get_device_proc_addr: Option<vk::PFN_vkGetDeviceProcAddr>,
    /// Out: `vk_layerGetPhysicalDeviceProcAddr`, null because this layer adds
    /// no physical-device function the loader does not already know.
    pub pfn_get_physical_device_proc_addr: Option<PfnGetPhysicalDeviceProcAddr>,
}

/// `VkLayerInstanceLink`: one entry of the instance chain.
#[repr(C)]
#[derive(Debug)]
pub struct LayerInstanceLink {
    /// The link of the layer after the next one.
    pub p_next: *mut LayerInstanceLink,
    /// `vkGetInstanceProcAddr` of the next layer (or of the loader's terminator).
    pub pfn_next_get_instance_proc_addr: Option<vk::PFN_vkGetInstanceProcAddr>,
    /// `vk_layerGetPhysicalDeviceProcAddr` of the next layer; unused here.
    pub pfn_next_get_physical_device_proc_addr: Option<PfnGetPhysicalDeviceProcAddr>,
}

/// The union `u` of `VkLayerInstanceCreateInfo`. Only `p_layer_info` is read
/// (when `function` is [`VK_LAYER_LINK_INFO`]); `other` gives the union the
/// size of its largest C member (two function pointers) so the layout matches.
#[repr(C)]
#[derive(Clone, Copy)]
pub union LayerInstanceCreateInfoPayload {
    /// Head of the remaining links (`VK_LAYER_LINK_INFO`).
    pub p_layer_info: *mut LayerInstanceLink,
    /// The loader callbacks of the other `function` values; never read.
    pub other: [usize; 2],
}

/// `VkLayerInstanceCreateInfo` (sType 47, `LOADER_INSTANCE_CREATE_INFO`).
#[repr(C)]
pub struct LayerInstanceCreateInfo {
    /// `VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO`.
    pub s_type: vk::StructureType,
    /// The rest of the create-info chain.
    pub p_next: *const c_void,
    /// `VkLayerFunction`: which member of `u` is valid.
    pub function: i32,
    /// See [`LayerInstanceCreateInfoPayload`].
    pub u: LayerInstanceCreateInfoPayload,
}

/// `VkLayerDeviceLink`: one entry of the device chain.
#[repr(C)]
#[derive(Debug)]
pub struct LayerDeviceLink {
    /// The link of the layer after the next one.
    pub p_next: *mut LayerDeviceLink,
    /// `vkGetInstanceProcAddr` of the next layer.
    pub pfn_next_get_instance_proc_addr: Option<vk::PFN_vkGetInstanceProcAddr>,
    /// `vkGetDeviceProcAddr` of the next layer.
    pub pfn_next_get_device_proc_addr: Option<vk::PFN_vkGetDeviceProcAddr>,
}

/// The union `u` of `VkLayerDeviceCreateInfo`; only `p_layer_info` is read.
#[repr(C)]
#[derive(Clone, Copy)]
pub union LayerDeviceCreateInfoPayload {
    /// Head of the remaining links (`VK_LAYER_LINK_INFO`).
    pub p_layer_info: *mut LayerDeviceLink,
    /// `pfnSetDeviceLoaderData` (`VK_LOADER_DATA_CALLBACK`); never read.
    pub other: usize,
}

/// `VkLayerDeviceCreateInfo` (sType 48, `LOADER_DEVICE_CREATE_INFO`).
#[repr(C)]
pub struct LayerDeviceCreateInfo {
    /// `VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO`.
    pub s_type: vk::StructureType,
    /// The rest of the create-info chain.
    pub p_next: *const c_void,
    /// `VkLayerFunction`: which member of `u` is valid.
    pub function: i32,
    /// See [`LayerDeviceCreateInfoPayload`].
    pub u: LayerDeviceCreateInfoPayload,
}

/// What this layer keeps of its device link.
#[derive(Debug, Clone, Copy)]
pub struct NextDeviceLink {
    /// The next layer's `vkGetInstanceProcAddr`.
    pub get_instance_proc_addr: vk::PFN_vkGetInstanceProcAddr,
    /// The next layer's `vkGetDeviceProcAddr`.
    pub get_device_proc_addr: vk::PFN_vkGetDeviceProcAddr,
}

/// Finds the link-info structure of `s_type` in a create-info `pNext` chain.
///
/// # Safety
/// `next` is null or the head of a valid `pNext` chain whose structures all
/// start with `sType` and `pNext`, as every Vulkan structure does.
unsafe fn find_link_info(next: *const c_void, s_type: vk::StructureType) -> *mut c_void {
    // SAFETY: a valid chain (this function's contract).
    unsafe { pnext_chain(next) }
        .find(|&(this_type, structure)| {
            // The loader's structures share the prefix sType, pNext, function.
            let function_ptr = structure.cast::<LayerInstanceCreateInfo>();
            // SAFETY: both loader create-info types start with sType, pNext
            // and the `function` int (vk_layer.h), so reading `function`
            // through either layout is in bounds; read only for `s_type`.
            this_type == s_type && unsafe { (*function_ptr).function } == VK_LAYER_LINK_INFO
        })
        .map_or(std::ptr::null_mut(), |(_, structure)| structure.cast_mut())
}

/// Takes this layer's link from a `VkInstanceCreateInfo`: returns the next
/// layer's `vkGetInstanceProcAddr` and advances the chain for the next layer.
/// `None` when the loader left no link (not called by a loader).
///
/// # Safety
/// `create_info` is null or a valid `VkInstanceCreateInfo` handed to this
/// layer's `vkCreateInstance` by the loader, whose loader structures are
/// writable (the loader builds them for each layer to advance).
pub unsafe fn take_instance_link(
    create_info: *const vk::InstanceCreateInfo<'_>,
) -> Option<vk::PFN_vkGetInstanceProcAddr> {
    if create_info.is_null() {
        return None;
    }
    // SAFETY: `create_info` is a valid, non-null VkInstanceCreateInfo.
    let chain = unsafe { (*create_info).p_next };
    // SAFETY: the pNext chain of a valid create info is a valid chain.
    let info = unsafe { find_link_info(chain, vk::StructureType::LOADER_INSTANCE_CREATE_INFO) }
        .cast::<LayerInstanceCreateInfo>();
    if info.is_null() {
        return None;
    }
    // SAFETY: `info` is the loader's VkLayerInstanceCreateInfo with function
    // VK_LAYER_LINK_INFO, so `u.p_layer_info` is the valid union member.
    let link = unsafe { (*info).u.p_layer_info };
    if link.is_null() {
        return None;
    }
    // SAFETY: `link` is the loader's non-null link for this layer.
    let (next_gipa, following) =
        unsafe { ((*link).pfn_next_get_instance_proc_addr, (*link).p_next) };
    // SAFETY: the loader allocates this structure writable for exactly this
    // purpose: each layer advances `pLayerInfo` before calling down
    // (LoaderLayerInterface.md, "Layer Call Chains and Distributed Dispatch").
    unsafe { (*info).u.p_layer_info = following };
    next_gipa
}

/// Takes this layer's link from a `VkDeviceCreateInfo`, like
/// [`take_instance_link`] does for instances.
///
/// # Safety
/// `create_info` is null or a valid `VkDeviceCreateInfo` handed to this
/// layer's `vkCreateDevice` by the loader.
pub unsafe fn take_device_link(
    create_info: *const vk::DeviceCreateInfo<'_>,
) -> Option<NextDeviceLink> {
    if create_info.is_null() {
        return None;
    }
    // SAFETY: `create_info` is a valid, non-null VkDeviceCreateInfo.
    let chain = unsafe { (*create_info).p_next };
    // SAFETY: the pNext chain of a valid create info is a valid chain.
    let info = unsafe { find_link_info(chain, vk::StructureType::LOADER_DEVICE_CREATE_INFO) }
        .cast::<LayerDeviceCreateInfo>();
    if info.is_null() {
        return None;
    }
    // SAFETY: `info` is the loader's VkLayerDeviceCreateInfo with function
    // VK_LAYER_LINK_INFO, so `u.p_layer_info` is the valid union member.
    let link = unsafe { (*info).u.p_layer_info };
    if link.is_null() {
        return None;
    }
    // SAFETY: `link` is the loader's non-null link for this layer.
    let (gipa, gdpa, following) = unsafe {
        (
            (*link).pfn_next_get_instance_proc_addr,
            (*link).pfn_next_get_device_proc_addr,
            (*link).p_next,
        )
    };
    // SAFETY: as in `take_instance_link`: the loader expects each layer to
    // advance `pLayerInfo` in place.
    unsafe { (*info).u.p_layer_info = following };
    Some(NextDeviceLink {
        get_instance_proc_addr: gipa?,
        get_device_proc_addr: gdpa?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_vk_layer_h_on_64_bit() {
        if size_of::<usize>() != 8 {
            return;
        }
        assert_eq!(size_of::<NegotiateLayerInterface>(), 48);
        assert_eq!(
            offset_of!(NegotiateLayerInterface, pfn_get_instance_proc_addr),
            24
        );
        assert_eq!(size_of::<LayerInstanceCreateInfo>(), 40);
        assert_eq!(offset_of!(LayerInstanceCreateInfo, u), 24);
        assert_eq!(size_of::<LayerDeviceCreateInfo>(), 32);
        assert_eq!(size_of::<LayerInstanceLink>(), 24);
        assert_eq!(size_of::<LayerDeviceLink>(), 24);
    }
}
