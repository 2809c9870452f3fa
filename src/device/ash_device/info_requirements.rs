//! Memory requirements from a create info, with no resource made:
//! maintenance4's `vkGetDeviceBufferMemoryRequirements` and
//! `vkGetDeviceImageMemoryRequirements` (core in Vulkan 1.3, or the `KHR`
//! forms of `VK_KHR_maintenance4`, asked for first), looked up once when
//! the device is wrapped, and the image create infos they may not take.
//! Apart from `ash_device.rs` because ash's table cannot say whether it
//! holds them: it fills a command the device lacks with a stand-in that
//! panics.

use std::ffi::CStr;
use std::mem;

use ash::vk;

/// The two queries of one device.
#[derive(Clone, Copy)]
pub(super) struct InfoRequirements {
    device: vk::Device,
    buffer: vk::PFN_vkGetDeviceBufferMemoryRequirements,
    image: vk::PFN_vkGetDeviceImageMemoryRequirements,
}

impl InfoRequirements {
    /// The queries of `device`, the `KHR` ones first, then the core ones;
    /// `None` when the device answers neither name of either command.
    ///
    /// `vkGetDeviceProcAddr` answers `NULL` for a command of an extension
    /// not enabled, so a `KHR` name answered is one that may be called;
    /// but for a core command of a version above the instance's
    /// `apiVersion` it may answer a pointer that must not be called
    /// (without maintenance5: the spec's `vkGetDeviceProcAddr` table,
    /// footnote 2), as a Vulkan 1.3 driver may under a 1.2 instance with
    /// `VK_KHR_maintenance4` enabled. So the core names are asked only
    /// where the `KHR` ones are not answered: the extension is not
    /// enabled, and [`DeviceFeatures::maintenance4`](crate::device::DeviceFeatures::maintenance4)
    /// then says the device is Vulkan 1.3.
    ///
    /// # Safety
    /// `device` is a live device of `instance`, and the commands it
    /// answers may be called (`DeviceFeatures::maintenance4`).
    pub(super) unsafe fn find(instance: &ash::Instance, device: vk::Device) -> Option<Self> {
        let find = |names: [&CStr; 2]| {
            names.into_iter().find_map(|name| {
                // SAFETY: a live device of `instance` (the contract) and a
                // NUL-terminated name.
                unsafe { instance.get_device_proc_addr(device, name.as_ptr()) }
            })
        };
        let buffer = find([
            c"vkGetDeviceBufferMemoryRequirementsKHR",
            c"vkGetDeviceBufferMemoryRequirements",
        ])?;
        let image = find([
            c"vkGetDeviceImageMemoryRequirementsKHR",
            c"vkGetDeviceImageMemoryRequirements",
        ])?;
        // SAFETY: the commands of these names have these signatures (the
        // `KHR` ones are aliases of the core ones).
        unsafe {
            Some(Self {
                device,
                buffer: mem::transmute::<
                    unsafe extern "system" fn(),
                    vk::PFN_vkGetDeviceBufferMemoryRequirements,
                >(buffer),
                image: mem::transmute::<
                    unsafe extern "system" fn(),
                    vk::PFN_vkGetDeviceImageMemoryRequirements,
                >(image),
            })
        }
    }

    /// The memory requirements of a buffer made from `info`.
    ///
    /// # Safety
    /// `info` is a valid `VkBufferCreateInfo` for the device.
    pub(super) unsafe fn buffer(&self, info: &vk::BufferCreateInfo<'_>) -> vk::MemoryRequirements {
        let query = vk::DeviceBufferMemoryRequirements::default().create_info(info);
        let mut requirements = vk::MemoryRequirements2::default();
        // SAFETY: the device's own command (`find`), a valid create info
        // (the contract) and an output structure with no chain.
        unsafe { (self.buffer)(self.device, &query, &mut requirements) };
        requirements.memory_requirements
    }

    /// The memory requirements of an image made from `info`, or `None`
    /// for a create info the query may not take ([`takes_image_info`]).
    ///
    /// # Safety
    /// `info` is a valid `VkImageCreateInfo` for the device.
    pub(super) unsafe fn image(
        &self,
        info: &vk::ImageCreateInfo<'_>,
    ) -> Option<vk::MemoryRequirements> {
        // SAFETY: a valid create info has a valid chain (the contract).
        if !unsafe { takes_image_info(info) } {
            return None;
        }
        let query = vk::DeviceImageMemoryRequirements::default().create_info(info);
        let mut requirements = vk::MemoryRequirements2::default();
        // SAFETY: as in `buffer`; `takes_image_info` ruled out the create
        // infos that need a plane aspect or may not be queried.
        unsafe { (self.image)(self.device, &query, &mut requirements) };
        Some(requirements.memory_requirements)
    }
}

/// Whether `vkGetDeviceImageMemoryRequirements` may take `info` with no
/// plane aspect: an image of linear or optimal tiling, not disjoint (a
/// disjoint image's planes each have requirements of their own, and the
/// query would need one named), and none of the structures the query
/// refuses in the create info's chain: `VkImageSwapchainCreateInfoKHR`
/// (VUID-VkDeviceImageMemoryRequirements-pCreateInfo-06416),
/// `VkImageDrmFormatModifierExplicitCreateInfoEXT` (-06776),
/// `VkExternalFormatANDROID` (-pNext-06996) and `VkExternalFormatQNX`
/// (-pNext-08962), whose image's requirements depend on the Android or
/// QNX Screen buffer it will be bound to (the query refuses them with a
/// non-zero `externalFormat`; any is left out here). DRM format modifier
/// tiling is left out too, where the plane aspect names a memory plane.
///
/// # Safety
/// `info`'s `pNext` chain is valid: each structure starts with `sType`
/// and `pNext`.
pub(super) unsafe fn takes_image_info(info: &vk::ImageCreateInfo<'_>) -> bool {
    let tiling_ok = matches!(
        info.tiling,
        vk::ImageTiling::OPTIMAL | vk::ImageTiling::LINEAR
    );
    if !tiling_ok || info.flags.contains(vk::ImageCreateFlags::DISJOINT) {
        return false;
    }
    let refused = [
        vk::StructureType::IMAGE_SWAPCHAIN_CREATE_INFO_KHR,
        vk::StructureType::IMAGE_DRM_FORMAT_MODIFIER_EXPLICIT_CREATE_INFO_EXT,
        vk::StructureType::EXTERNAL_FORMAT_ANDROID,
        vk::StructureType::EXTERNAL_FORMAT_QNX,
    ];
    // SAFETY: a valid chain (the contract), read within this call.
    !unsafe { super::chain_structures(info.p_next) }.any(|(s_type, _)| refused.contains(&s_type))
}
