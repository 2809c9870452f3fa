//! The validation setup both examples share: the layer's checks they run
//! under, and a messenger that counts what the layer reports.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

use ash::vk;

/// The layer's optional checks, besides its default ones: chain
/// `VkValidationFeaturesEXT` with these to `VkInstanceCreateInfo` (the
/// extension `VK_EXT_validation_features` comes with the layer).
pub const CHECKS: [vk::ValidationFeatureEnableEXT; 2] = [
    vk::ValidationFeatureEnableEXT::BEST_PRACTICES,
    vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION,
];

/// Validation messages seen (warnings and errors).
static MESSAGES: AtomicUsize = AtomicUsize::new(0);

/// Best practices advise against `VK_EXT_debug_utils` outside debugging,
/// which is what the examples use it for.
const DEBUG_UTILS_ADVICE: &CStr =
    c"UNASSIGNED-BestPractices-vkCreateInstance-specialuse-extension-debugging";

/// The validation layer's setting that extends synchronization validation
/// across command buffers and submissions on a queue, so hazards between
/// frames are reported too. It has no `VkValidationFeatureEnableEXT` value:
/// the layer (1.3.239) reads it from `VK_LAYER_ENABLES` at `vkCreateInstance`.
const SUBMIT_TIME_SYNC_VALIDATION: &str =
    "VALIDATION_CHECK_ENABLE_SYNCHRONIZATION_VALIDATION_QUEUE_SUBMIT";

/// Adds [`SUBMIT_TIME_SYNC_VALIDATION`] to `VK_LAYER_ENABLES`, keeping what
/// is there. Call it first in `main`: changing the environment is sound only
/// while no other thread may read it, and neither winit nor the Vulkan
/// loader has started one yet. The layer splits the variable at `:` only
/// (on Linux): a setting after a `,` is not one it reads, so it is no
/// reason to leave ours out.
pub fn enable_submit_time_sync_validation() {
    const VARIABLE: &str = "VK_LAYER_ENABLES";
    let current = std::env::var(VARIABLE).unwrap_or_default();
    if current
        .split(':')
        .any(|listed| listed == SUBMIT_TIME_SYNC_VALIDATION)
    {
        return;
    }
    let value = if current.is_empty() {
        SUBMIT_TIME_SYNC_VALIDATION.to_owned()
    } else {
        format!("{current}:{SUBMIT_TIME_SYNC_VALIDATION}")
    };
    std::env::set_var(VARIABLE, value);
}

/// A messenger create info that counts every warning and error (chain it
/// to `VkInstanceCreateInfo` too, for the instance's own messages).
pub fn messenger_info() -> vk::DebugUtilsMessengerCreateInfoEXT<'static> {
    vk::DebugUtilsMessengerCreateInfoEXT::default()
        .message_severity(
            vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
                | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
        )
        .message_type(
            vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
        )
        .pfn_user_callback(Some(on_message))
}

/// How many warnings and errors the layer reported.
pub fn messages() -> usize {
    MESSAGES.load(Ordering::Relaxed)
}

unsafe extern "system" fn on_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the loader passes a valid callback-data struct whose strings
    // are NUL-terminated, or null.
    let id = unsafe { data.as_ref() }.and_then(|d| unsafe { d.message_id_name_as_c_str() });
    if id == Some(DEBUG_UTILS_ADVICE) {
        return vk::FALSE;
    }
    // SAFETY: as above.
    let message = unsafe { data.as_ref() }
        .and_then(|d| unsafe { d.message_as_c_str() })
        .map_or_else(|| "(no message)".into(), CStr::to_string_lossy);
    eprintln!("validation {severity:?}: {message}");
    MESSAGES.fetch_add(1, Ordering::Relaxed);
    vk::FALSE
}
