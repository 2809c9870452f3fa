//! Collects what the validation layer (and the loader) report through
//! `VK_EXT_debug_utils`.
//!
//! A messenger created with [`messenger_create_info`] appends every warning
//! and error, formatted as `SEVERITY [message-id-name] message` (the message
//! id name is the VUID for validation errors), to a shared log. The same
//! create info is chained into `VkInstanceCreateInfo` so messages from
//! `vkCreateInstance` / `vkDestroyInstance` are caught as well.

use std::ffi::{c_void, CStr};
use std::sync::{Arc, Mutex, PoisonError};

use ash::vk;

/// The shared log of recorded messages.
pub type MessageLog = Arc<Mutex<Vec<String>>>;

/// Takes every message recorded so far out of `log`.
pub fn take(log: &MessageLog) -> Vec<String> {
    std::mem::take(&mut *log.lock().unwrap_or_else(PoisonError::into_inner))
}

/// A messenger create info that records warnings and errors into `log`.
///
/// The returned structure holds a raw pointer to the log's mutex: `log` must
/// outlive the instance (and messenger) created from it.
pub fn messenger_create_info(log: &MessageLog) -> vk::DebugUtilsMessengerCreateInfoEXT<'static> {
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
        .pfn_user_callback(Some(record_message))
        .user_data(Arc::as_ptr(log).cast_mut().cast::<c_void>())
}

fn lossy(text: Option<&CStr>) -> String {
    text.map_or_else(String::new, |text| text.to_string_lossy().into_owned())
}

/// The messenger callback: appends the message to the log behind `user_data`.
///
/// # Safety
/// Called by the Vulkan loader with valid callback data and the `user_data`
/// of [`messenger_create_info`], a live `Mutex<Vec<String>>`.
unsafe extern "system" fn record_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user_data: *mut c_void,
) -> vk::Bool32 {
    // Never unwind into the validation layer: a panic here is swallowed and
    // the message reported on stderr instead.
    let recorded = std::panic::catch_unwind(|| {
        if data.is_null() || user_data.is_null() {
            return;
        }
        // SAFETY: the loader passes valid callback data for this call.
        let data = unsafe { &*data };
        // SAFETY: user_data is the log's mutex, kept alive by the context
        // until its instance is destroyed (see `messenger_create_info`).
        let log = unsafe { &*user_data.cast_const().cast::<Mutex<Vec<String>>>() };
        let level = if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
            "ERROR"
        } else {
            "WARNING"
        };
        // SAFETY: the strings of valid callback data are null or NUL-terminated.
        let (id, text) = unsafe { (data.message_id_name_as_c_str(), data.message_as_c_str()) };
        let entry = format!("{level} [{}] {}", lossy(id), lossy(text));
        log.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(entry);
    });
    if recorded.is_err() {
        eprintln!("validation message callback panicked; a message may be lost");
    }
    // VK_FALSE: never abort the call being validated.
    vk::FALSE
}
