//! The device commands the ash backend looks up by name when it wraps a
//! device: `VK_KHR_timeline_semaphore`'s, and the command that reads a
//! buffer's device address, each under its `KHR` name first.

use ash::vk;

#[cfg(doc)]
use super::DeviceFeatures;

/// `VK_KHR_timeline_semaphore`'s commands when the extension is enabled
/// on `device`: an engine targeting Vulkan 1.1 waits for timeline values
/// through them. `vkGetDeviceProcAddr` answers NULL for the command of an
/// extension not enabled, so a `KHR` name answered is one that may be
/// called; but for a core command of a version above the instance's
/// `apiVersion` it may answer a pointer that must not be called (without
/// maintenance5: the spec's `vkGetDeviceProcAddr` table, footnote 2), as
/// a Vulkan 1.2 driver may under a 1.1 instance. So the extension's
/// commands serve wherever they are answered, and the core ones (ash's
/// table) only where they are not: the device is then Vulkan 1.2 or
/// later, or has no timeline semaphores and holds only ash's stand-in
/// that panics (the `new` contract).
///
/// # Safety
/// `device` is a live device of `instance`.
pub(super) unsafe fn timeline_khr(
    instance: &ash::Instance,
    device: &ash::Device,
) -> Option<ash::khr::timeline_semaphore::Device> {
    // SAFETY: a live device of `instance` (the contract), and a
    // NUL-terminated command name.
    let answered = unsafe {
        instance
            .get_device_proc_addr(device.handle(), c"vkGetSemaphoreCounterValueKHR".as_ptr())
            .is_some()
    };
    answered.then(|| ash::khr::timeline_semaphore::Device::new(instance, device))
}

/// The command that reads a buffer's device address on `device`:
/// `vkGetBufferDeviceAddressKHR` where answered, else
/// `vkGetBufferDeviceAddress`; `None` when neither name is. The `KHR` name
/// first for the reason [`timeline_khr`] gives: a core command of a version
/// above the instance's `apiVersion` may be answered and still must not be
/// called, while a `KHR` name is answered only with its extension enabled
/// (so, where it is not, [`DeviceFeatures::buffer_device_address`] says
/// the device is Vulkan 1.2 with the core feature). `VK_EXT_buffer_device_address`'s
/// `EXT` command is not asked: its feature is not the one that flag names.
///
/// # Safety
/// `device` is a live device of `instance`, and the command it answers
/// may be called (`DeviceFeatures::buffer_device_address`).
pub(super) unsafe fn buffer_address_command(
    instance: &ash::Instance,
    device: vk::Device,
) -> Option<vk::PFN_vkGetBufferDeviceAddress> {
    let command = [c"vkGetBufferDeviceAddressKHR", c"vkGetBufferDeviceAddress"]
        .into_iter()
        .find_map(|name| {
            // SAFETY: a live device of `instance` (the contract) and a
            // NUL-terminated name.
            unsafe { instance.get_device_proc_addr(device, name.as_ptr()) }
        })?;
    // SAFETY: the commands of these names have this signature (the `KHR`
    // one is an alias of the core one).
    Some(unsafe {
        std::mem::transmute::<unsafe extern "system" fn(), vk::PFN_vkGetBufferDeviceAddress>(
            command,
        )
    })
}
