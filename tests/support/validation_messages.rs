//! Collects what the validation layer (and the loader) report through
//! `VK_EXT_debug_utils`.
//!
//! A messenger created with [`messenger_create_info`] appends every warning
//! and error, formatted as `SEVERITY [message-id-name] message` (the message
//! id name is the VUID for validation errors), to a shared log. The same
//! create info is chained into `VkInstanceCreateInfo` so messages from
//! `vkCreateInstance` / `vkDestroyInstance` are caught as well.
//!
//! Besides its default checks the layer runs best practices, with their
//! vendor-specific checks ([`VENDOR_SPECIFIC_CHECKS`]), and synchronization
//! validation ([`ENABLED_FEATURES`]; cross-submission hazards too,
//! [`SUBMIT_TIME_SYNC_VALIDATION`]). Every message id the
//! harness lets through is listed here with its reason: [`IGNORED`] for all
//! tests, [`Advice`] for the tests that take that advice on purpose.

use std::ffi::{c_void, CStr};
use std::sync::{Arc, Mutex, PoisonError};

use ash::vk;

/// The layer's optional checks every test runs under, chained to
/// `VkInstanceCreateInfo` as `VkValidationFeaturesEXT`.
pub const ENABLED_FEATURES: [vk::ValidationFeatureEnableEXT; 2] = [
    vk::ValidationFeatureEnableEXT::BEST_PRACTICES,
    vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION,
];

/// GPU-assisted validation, which tests whose shaders follow device
/// addresses add ([`ContextOptions::gpu_assisted`]): the layer instruments
/// their shaders and reports each access through a device address that no
/// live buffer's range covers ("UNASSIGNED-Device address out of bounds"),
/// where the shader's own results may still come out right (a wrong address
/// into some other live memory of the process reads whatever is there). Only
/// where a test needs it: the layer then runs instrumented shaders, not the
/// test's own.
///
/// [`ContextOptions::gpu_assisted`]: super::ContextOptions::gpu_assisted
pub const GPU_ASSISTED: [vk::ValidationFeatureEnableEXT; 1] =
    [vk::ValidationFeatureEnableEXT::GPU_ASSISTED];

/// The layer (1.3.239) setting that extends synchronization validation
/// across command buffers and submissions on a queue; it has no
/// `VkValidationFeatureEnableEXT` value, only the `VK_LAYER_ENABLES`
/// environment variable (or a settings file).
pub const SUBMIT_TIME_SYNC_VALIDATION: &str =
    "VALIDATION_CHECK_ENABLE_SYNCHRONIZATION_VALIDATION_QUEUE_SUBMIT";

/// The layer (1.3.239) settings that add best practices' vendor-specific
/// checks (ARM, AMD, IMG, NVIDIA): advice for those GPUs, some of it on
/// memory (NVIDIA's on priorities and on memory freed and allocated again).
/// Like [`SUBMIT_TIME_SYNC_VALIDATION`], only `VK_LAYER_ENABLES` sets them.
pub const VENDOR_SPECIFIC_CHECKS: [&str; 4] = [
    "VALIDATION_CHECK_ENABLE_VENDOR_SPECIFIC_ARM",
    "VALIDATION_CHECK_ENABLE_VENDOR_SPECIFIC_AMD",
    "VALIDATION_CHECK_ENABLE_VENDOR_SPECIFIC_IMG",
    "VALIDATION_CHECK_ENABLE_VENDOR_SPECIFIC_NVIDIA",
];

/// Message ids no test records, each with why.
pub const IGNORED: &[(&str, &str)] = &[
    (
        "UNASSIGNED-BestPractices-vkCreateInstance-specialuse-extension-debugging",
        "the harness enables VK_EXT_debug_utils on purpose: it is how messages are recorded",
    ),
    // The vendor-specific advice below is on the tests' own commands,
    // which fill, copy and check memory; the allocator records none.
    (
        "UNASSIGNED-BestPractices-ClearAttachment-ClearImage",
        "AMD: the tests fill images with vkCmdClearColorImage outside render passes, to check their bytes",
    ),
    (
        "UNASSIGNED-BestPractices-ClearColor-NotCompressed",
        "NVIDIA: the tests clear images to patterns of their own, not to the colours NVIDIA compresses",
    ),
    (
        "UNASSIGNED-BestPractices-CmdBuffer-highBarrierCount",
        "AMD: the render loops put a barrier after each of hundreds of copies, so that each is checked alone",
    ),
    (
        "UNASSIGNED-BestPractices-Pipeline-SortAndBind",
        "AMD, NVIDIA: a shader test binds its one compute pipeline in each frame's command buffer, and without a swapchain the layer's frame (from one present to the next) is the whole test",
    ),
];

/// Best-practices advice that a test may disregard on purpose, allowed per
/// context with `VulkanContext::allow`; any other test still fails on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// `vkAllocateMemory` under 256 KiB, or a resource bound to the whole
    /// of memory under 1 MiB: tests that ask for dedicated memory for a
    /// KiB-sized resource (`DedicatedPolicy::Always`, a fake driver that
    /// prefers or requires it, a lazily allocated type) or that call
    /// `vkAllocateMemory` themselves; for those calls alone
    /// (`VulkanContext::allowing`) where the allocator also makes blocks in
    /// the context, context-wide only where every allocation is such a
    /// call. The allocator's own blocks are not,
    /// in these tests: with the default `Config` on heaps of 256 MiB and
    /// more, and in custom pools of 4 MiB blocks (a smaller `block_size`,
    /// or a heap of a few MiB, would make small blocks on purpose).
    SmallMemory,
    /// A call that returns an error: tests that make `vkAllocateMemory` or
    /// `vkMapMemory` fail (the fake layer's injected failures, a full heap).
    FailingCalls,
    /// More than 250 memory objects: the layer test that makes 1024.
    ManyMemoryObjects,
    /// NVIDIA's advice to give every `vkAllocateMemory` a priority: on a
    /// device without `VK_EXT_memory_priority`, where no one can (every
    /// context allows it there), and for a test's own `vkAllocateMemory`
    /// calls (for those calls alone, `VulkanContext::allowing`, where an
    /// allocator allocates too). The allocator gives every allocation one
    /// wherever the extension is enabled.
    NoMemoryPriority,
    /// NVIDIA's advice to reuse memory just freed rather than allocate
    /// memory no larger in the same type: tests that free memory objects
    /// and make others at once on purpose (a custom pool made right after
    /// another is destroyed, blocks made again after a refused pool gave
    /// its first back), for those calls alone
    /// (`VulkanContext::allowing`), and layer tests without an allocator
    /// that call `vkAllocateMemory` themselves.
    ReusedMemory,
    /// Best practices' advice against linear-tiling images: tests that make
    /// them on purpose (the allocator never picks a tiling).
    LinearImages,
}

impl Advice {
    /// The message ids of this advice.
    pub fn ids(self) -> &'static [&'static str] {
        match self {
            Advice::SmallMemory => &[
                "UNASSIGNED-BestPractices-vkAllocateMemory-small-allocation",
                "UNASSIGNED-BestPractices-vkBindMemory-small-dedicated-allocation",
            ],
            Advice::FailingCalls => &["UNASSIGNED-BestPractices-Error-Result"],
            Advice::ManyMemoryObjects => {
                &["UNASSIGNED-BestPractices-vkAllocateMemory-too-many-objects"]
            }
            Advice::NoMemoryPriority => &["UNASSIGNED-BestPractices-AllocateMemory-SetPriority"],
            Advice::ReusedMemory => &["UNASSIGNED-BestPractices-AllocateMemory-ReuseAllocations"],
            Advice::LinearImages => &["UNASSIGNED-BestPractices-CreateImage-TilingLinear"],
        }
    }
}

/// Whether `message` (as recorded: `SEVERITY [id] text`) carries `id`.
pub fn has_id(message: &str, id: &str) -> bool {
    message
        .split_once(" [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .is_some_and(|(found, _)| found == id)
}

/// Drops from `messages` those whose id is one of `ids`.
pub fn drop_ids(messages: &mut Vec<String>, ids: &[&str]) {
    messages.retain(|message| !ids.iter().any(|id| has_id(message, id)));
}

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
        let id = lossy(id);
        if IGNORED.iter().any(|(ignored, _)| *ignored == id) {
            return;
        }
        let entry = format!("{level} [{id}] {}", lossy(text));
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
