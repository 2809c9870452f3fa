//! The device under test: lavapipe, or the device that
//! `VK_SUBALLOC_TEST_DEVICE` names.

use ash::vk;

use super::INSTALL_HINT;

/// Environment variable naming another device to test on, by a part of its
/// name (case-insensitive), e.g. `NVIDIA`. Unset: lavapipe.
pub const TEST_DEVICE: &str = "VK_SUBALLOC_TEST_DEVICE";

/// Whether the tests run on a device named by [`TEST_DEVICE`] instead of
/// lavapipe: then the `lavapipe` profile's facts are that device's, and the
/// fake profiles' limits are raised to the device's where it needs more.
pub fn on_custom_device() -> bool {
    custom_device_name().is_some()
}

/// `$VK_SUBALLOC_TEST_DEVICE` in lower case, unless unset or empty.
fn custom_device_name() -> Option<String> {
    std::env::var(TEST_DEVICE)
        .ok()
        .filter(|name| !name.is_empty())
        .map(|name| name.to_lowercase())
}

/// Picks the device under test: the first whose name contains
/// `$VK_SUBALLOC_TEST_DEVICE` when it is set, else lavapipe (`llvmpipe` in its
/// name, or a CPU device type). With the variable set, the `lavapipe` profile
/// is that device as it is and the fake profiles stand on its memory types.
pub(super) fn pick_device(instance: &ash::Instance) -> vk::PhysicalDevice {
    let wanted = custom_device_name();
    // SAFETY: a live instance.
    let devices = unsafe { instance.enumerate_physical_devices() }
        .unwrap_or_else(|error| panic!("vkEnumeratePhysicalDevices failed: {error}"));
    let mut seen = Vec::new();
    for device in devices {
        // SAFETY: a physical device of this instance.
        let properties = unsafe { instance.get_physical_device_properties(device) };
        let name = properties
            .device_name_as_c_str()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let chosen = match &wanted {
            Some(wanted) => name.to_lowercase().contains(wanted.as_str()),
            // The fake layer reports its profile's device type, so the name decides.
            None => {
                name.contains("llvmpipe") || properties.device_type == vk::PhysicalDeviceType::CPU
            }
        };
        if chosen {
            return device;
        }
        seen.push(name);
    }
    match wanted {
        Some(wanted) => panic!("no device named like {TEST_DEVICE}={wanted:?} (devices: {seen:?})"),
        None => panic!("no lavapipe device found (devices: {seen:?}); {INSTALL_HINT}"),
    }
}
