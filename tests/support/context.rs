//! A Vulkan instance and device on lavapipe, under the validation layer and,
//! for the fake profiles, the fake-memory layer.

use std::ffi::{CStr, CString};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use ash::vk;

use super::fake_layer_setup;
use super::layer_settings;
use super::profile::Profile;
use super::stack_turn::StackTurn;
use super::validation_messages::{self, Advice, MessageLog};

mod device_choice;
mod messages;
mod options;

use device_choice::pick_device;
pub use device_choice::{on_custom_device, TEST_DEVICE};
pub use options::ContextOptions;

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// What to install when a part of the Vulkan stack is missing.
const INSTALL_HINT: &str = "install the Vulkan loader, lavapipe and the validation layer \
     (Debian/Ubuntu: `apt-get install libvulkan1 mesa-vulkan-drivers vulkan-validationlayers`), \
     or run the tests through `scripts/with-vulkan.sh cargo test`, which does it when run as root";

/// One heap's figures from `VK_EXT_memory_budget`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapBudget {
    /// `heapBudget`: what the process may use.
    pub budget: u64,
    /// `heapUsage`: what it uses now.
    pub usage: u64,
}

/// One test's Vulkan objects: a Vulkan 1.3 instance (or of the version
/// [`VulkanContext::with_api_version`] asks for) with
/// `VK_LAYER_KHRONOS_validation`, running best practices and synchronization
/// validation besides its default checks (and, below it, the fake-memory
/// layer for the fake profiles), a debug messenger recording every warning
/// and error, and a device on lavapipe with `bufferDeviceAddress`,
/// `timelineSemaphore`, `synchronization2` and `maintenance4` (the last two
/// when available), `VK_EXT_memory_budget` when advertised,
/// `VK_EXT_memory_priority` with its feature when advertised, and one
/// graphics+compute queue.
///
/// Dropping it destroys everything, then panics if validation messages were
/// recorded and not taken (unless the thread is already panicking).
pub struct VulkanContext {
    /// The profile the device presents.
    pub profile: Profile,
    /// The loaded Vulkan library.
    pub entry: ash::Entry,
    /// The instance.
    pub instance: ash::Instance,
    /// Lavapipe.
    pub physical_device: vk::PhysicalDevice,
    /// The device.
    pub device: ash::Device,
    /// A graphics + compute queue; [`VulkanContext::run_one_time_commands`]
    /// serialises its own submissions, other users must not race it.
    pub queue: vk::Queue,
    /// The queue's family.
    pub queue_family_index: u32,
    /// The Vulkan version the device offers its core functions at: the
    /// lower of the instance's `apiVersion` and the physical device's.
    pub api_version: u32,
    /// Whether `bufferDeviceAddress` and `timelineSemaphore` are enabled
    /// (with Vulkan 1.2; [`VulkanContext::with_api_version`] 1.1 has neither).
    pub vulkan_1_2_features_enabled: bool,
    /// Whether `VK_EXT_memory_budget` is enabled on the device.
    pub memory_budget_enabled: bool,
    /// Whether `VK_EXT_memory_priority` and its `memoryPriority` feature are
    /// enabled on the device.
    pub memory_priority_enabled: bool,
    /// Whether the `synchronization2` feature is enabled.
    pub synchronization2_enabled: bool,
    /// Whether `VK_KHR_timeline_semaphore` and its feature are enabled
    /// (below Vulkan 1.2 only, when listed).
    pub timeline_semaphore_khr_enabled: bool,
    /// Whether `VK_KHR_external_memory_fd` is enabled on the device.
    pub external_memory_fd_enabled: bool,
    /// Every validation warning and error recorded so far.
    pub messages: MessageLog,
    /// Message ids of the [`Advice`] this test allows: dropped when taken.
    allowed: Mutex<Vec<&'static str>>,
    debug_utils: ash::ext::debug_utils::Instance,
    messenger: vk::DebugUtilsMessengerEXT,
    pub(super) command_pool: Mutex<vk::CommandPool>,
    /// This thread's turn on the Vulkan stack, given back after the
    /// instance is destroyed (dropped after the fields above).
    _turn: StackTurn,
}

impl std::fmt::Debug for VulkanContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanContext")
            .field("profile", &self.profile)
            .field("physical_device", &self.physical_device)
            .field("queue_family_index", &self.queue_family_index)
            .finish_non_exhaustive()
    }
}

fn layer_names(entry: &ash::Entry) -> Vec<String> {
    // SAFETY: a global query on a loaded entry.
    let layers = unsafe { entry.enumerate_instance_layer_properties() }
        .unwrap_or_else(|error| panic!("vkEnumerateInstanceLayerProperties failed: {error}"));
    layers
        .iter()
        .filter_map(|layer| layer.layer_name_as_c_str().ok())
        .map(|name| name.to_string_lossy().into_owned())
        .collect()
}

impl VulkanContext {
    /// A context for `profile` without fault injection.
    ///
    /// # Panics
    /// When the Vulkan loader, lavapipe or the validation layer is missing
    /// (saying what to install), when the fake-memory layer cannot be built,
    /// when the environment or a settings file would keep the validation
    /// layer from reporting messages (`layer_settings.rs`), or when a
    /// Vulkan call fails.
    pub fn new(profile: Profile) -> Self {
        Self::with_options(profile, ContextOptions::default())
    }

    /// A context for `profile` with fault injection `options`.
    ///
    /// # Panics
    /// As [`VulkanContext::new`]; also when `options` ask for fault injection
    /// on [`Profile::Lavapipe`], which has no layer to inject it.
    pub fn with_options(profile: Profile, options: ContextOptions) -> Self {
        Self::build(profile, options, vk::API_VERSION_1_3)
    }

    /// A context for `profile` whose instance asks for `api_version` (1.1 or
    /// later) instead of 1.3, so that the device has the core functions and
    /// structures of that version only, and the features of later versions
    /// are not enabled: the allocator as an engine written against an
    /// older Vulkan uses it.
    ///
    /// # Panics
    /// As [`VulkanContext::new`]; also for a version before 1.1.
    pub fn with_api_version(profile: Profile, api_version: u32) -> Self {
        assert!(
            api_version >= vk::API_VERSION_1_1,
            "the allocator needs Vulkan 1.1 or later"
        );
        Self::build(profile, ContextOptions::default(), api_version)
    }

    fn build(profile: Profile, options: ContextOptions, api_version: u32) -> Self {
        assert!(
            profile.uses_fake_layer() || options.is_empty(),
            "fault injection needs a fake-memory profile, not {profile}"
        );
        // Before any Vulkan call: wait for this thread's turn on the stack,
        // build the layer and point the loader at it, and set what the
        // validation layer reads from the environment.
        let turn = StackTurn::take();
        layer_settings::refuse_muting_settings();
        fake_layer_setup::prepare();
        enable_layer_settings();
        // SAFETY: loading the system Vulkan loader runs its initialisers,
        // which is what every Vulkan application does.
        let entry = unsafe { ash::Entry::load() }.unwrap_or_else(|error| {
            panic!(
                "the Vulkan loader (libvulkan.so.1) could not be loaded: {error}; {INSTALL_HINT}"
            )
        });
        let available = layer_names(&entry);
        let validation = VALIDATION_LAYER.to_string_lossy();
        assert!(
            available.iter().any(|name| *name == validation),
            "{validation} is not installed (layers found: {available:?}); {INSTALL_HINT}"
        );
        let mut layers = vec![VALIDATION_LAYER.as_ptr()];
        let fake_layer = CString::new(fake_layer_setup::LAYER_NAME).unwrap();
        if profile.uses_fake_layer() {
            assert!(
                available
                    .iter()
                    .any(|name| name == fake_layer_setup::LAYER_NAME),
                "the loader does not list {} although its manifest is in {} \
                 ({}={:?}; layers found: {available:?})",
                fake_layer_setup::LAYER_NAME,
                fake_layer_setup::manifest_dir().display(),
                fake_layer_setup::ADD_LAYER_PATH,
                std::env::var_os(fake_layer_setup::ADD_LAYER_PATH),
            );
            // After validation = closer to the driver: validation checks the
            // application against the fake architecture.
            layers.push(fake_layer.as_ptr());
        }

        let messages: MessageLog = Arc::new(Mutex::new(Vec::new()));
        let mut messenger_info = validation_messages::messenger_create_info(&messages);
        let engine_name = CString::new(if profile.uses_fake_layer() {
            options.layer_config(profile)
        } else {
            "vk-suballoc tests".to_owned()
        })
        .unwrap();
        let app_info = vk::ApplicationInfo::default()
            .application_name(c"vk-suballoc tests")
            .engine_name(&engine_name)
            .api_version(api_version);
        // VK_EXT_validation_features is the validation layer's own.
        let extensions = [
            ash::ext::debug_utils::NAME.as_ptr(),
            ash::ext::validation_features::NAME.as_ptr(),
        ];
        let mut enabled_features = validation_messages::ENABLED_FEATURES.to_vec();
        if options.gpu_assisted {
            enabled_features.extend(validation_messages::GPU_ASSISTED);
        }
        let mut features =
            vk::ValidationFeaturesEXT::default().enabled_validation_features(&enabled_features);
        let instance_info = vk::InstanceCreateInfo::default()
            .application_info(&app_info)
            .enabled_layer_names(&layers)
            .enabled_extension_names(&extensions)
            .push_next(&mut messenger_info)
            .push_next(&mut features);
        // SAFETY: a valid create info; `messages` outlives the instance (it
        // is kept in the context and dropped after the instance).
        let instance = unsafe { entry.create_instance(&instance_info, None) }
            .unwrap_or_else(|error| panic!("vkCreateInstance ({profile}) failed: {error}"));
        let debug_utils = ash::ext::debug_utils::Instance::new(&entry, &instance);
        let messenger_info = validation_messages::messenger_create_info(&messages);
        // SAFETY: a valid create info on the instance that enabled debug utils.
        let messenger = unsafe { debug_utils.create_debug_utils_messenger(&messenger_info, None) }
            .unwrap_or_else(|error| panic!("vkCreateDebugUtilsMessengerEXT failed: {error}"));

        let physical_device = pick_device(&instance);
        let device_setup =
            super::device_setup::create_device(&instance, physical_device, api_version);
        // SAFETY: family and index of a queue requested at device creation.
        let queue = unsafe {
            device_setup
                .device
                .get_device_queue(device_setup.queue_family_index, 0)
        };
        let pool_info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(device_setup.queue_family_index)
            .flags(vk::CommandPoolCreateFlags::TRANSIENT);
        // SAFETY: a valid create info on a live device.
        let command_pool = unsafe { device_setup.device.create_command_pool(&pool_info, None) }
            .unwrap_or_else(|error| panic!("vkCreateCommandPool failed: {error}"));

        let context = Self {
            profile,
            entry,
            instance,
            physical_device,
            device: device_setup.device,
            queue,
            queue_family_index: device_setup.queue_family_index,
            api_version: device_setup.api_version,
            vulkan_1_2_features_enabled: device_setup.vulkan_1_2_features_enabled,
            memory_budget_enabled: device_setup.memory_budget_enabled,
            memory_priority_enabled: device_setup.memory_priority_enabled,
            synchronization2_enabled: device_setup.synchronization2_enabled,
            timeline_semaphore_khr_enabled: device_setup.timeline_semaphore_khr_enabled,
            external_memory_fd_enabled: device_setup.external_memory_fd_enabled,
            messages,
            allowed: Mutex::new(Vec::new()),
            debug_utils,
            messenger,
            command_pool: Mutex::new(command_pool),
            _turn: turn,
        };
        if !context.memory_priority_enabled {
            // Without VK_EXT_memory_priority no allocation can say a
            // priority, which NVIDIA's best practices ask of each.
            context.allow(Advice::NoMemoryPriority);
        }
        context
    }

    /// The physical device's memory properties (through the 1.0 query).
    pub fn memory_properties(&self) -> vk::PhysicalDeviceMemoryProperties {
        // SAFETY: a live physical device of this instance.
        unsafe {
            self.instance
                .get_physical_device_memory_properties(self.physical_device)
        }
    }

    /// The physical device's properties (with the faked limits).
    pub fn properties(&self) -> vk::PhysicalDeviceProperties {
        // SAFETY: a live physical device of this instance.
        unsafe {
            self.instance
                .get_physical_device_properties(self.physical_device)
        }
    }

    /// Budget and usage of each heap from `VK_EXT_memory_budget`, `None` when
    /// the extension is not enabled (plain lavapipe).
    pub fn memory_budget(&self) -> Option<Vec<HeapBudget>> {
        if !self.memory_budget_enabled {
            return None;
        }
        let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
        let mut properties = vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
        // SAFETY: a valid output chain; the extension is enabled on the device.
        unsafe {
            self.instance
                .get_physical_device_memory_properties2(self.physical_device, &mut properties)
        };
        let heaps = properties.memory_properties.memory_heap_count as usize;
        Some(
            budget.heap_budget[..heaps]
                .iter()
                .zip(&budget.heap_usage[..heaps])
                .map(|(&budget, &usage)| HeapBudget { budget, usage })
                .collect(),
        )
    }

    /// The priorities the fake-memory layer saw in `vkAllocateMemory` calls
    /// of this device that succeeded (`VkMemoryPriorityAllocateInfoEXT`), in
    /// call order, as `(allocationSize, memoryTypeIndex, priority)`, through
    /// the layer's own command `vkGetSeenMemoryPrioritiesVKSUBALLOC`.
    ///
    /// # Panics
    /// On plain lavapipe, which has no layer to ask.
    pub fn seen_memory_priorities(&self) -> Vec<(u64, u32, f32)> {
        /// The layer's `SeenPriority`.
        #[repr(C)]
        #[derive(Clone, Copy, Default)]
        struct SeenPriority {
            allocation_size: u64,
            memory_type_index: u32,
            priority: f32,
        }
        type GetSeen =
            unsafe extern "system" fn(vk::Device, *mut u32, *mut SeenPriority) -> vk::Result;
        // SAFETY: a live device; the name is NUL-terminated.
        let function = unsafe {
            (self.instance.fp_v1_0().get_device_proc_addr)(
                self.device.handle(),
                c"vkGetSeenMemoryPrioritiesVKSUBALLOC".as_ptr(),
            )
        }
        .unwrap_or_else(|| panic!("{}: the layer's priority query is not found", self.profile));
        // SAFETY: the layer hands out this command with this signature.
        let get_seen: GetSeen = unsafe { std::mem::transmute(function) };
        let mut count = 0;
        // SAFETY: a count query with valid pointers.
        let result = unsafe { get_seen(self.device.handle(), &mut count, std::ptr::null_mut()) };
        assert_eq!(result, vk::Result::SUCCESS);
        let mut seen = vec![SeenPriority::default(); count as usize];
        // SAFETY: room for `count` records.
        let result = unsafe { get_seen(self.device.handle(), &mut count, seen.as_mut_ptr()) };
        assert_eq!(result, vk::Result::SUCCESS);
        seen.truncate(count as usize);
        seen.iter()
            .map(|s| (s.allocation_size, s.memory_type_index, s.priority))
            .collect()
    }
}

/// Adds [`validation_messages::SUBMIT_TIME_SYNC_VALIDATION`] and
/// [`validation_messages::VENDOR_SPECIFIC_CHECKS`] to `VK_LAYER_ENABLES`
/// (keeping what the caller put there), once, before the first Vulkan call:
/// the layer reads the variable at each `vkCreateInstance`.
fn enable_layer_settings() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        const VARIABLE: &str = "VK_LAYER_ENABLES";
        let current = std::env::var(VARIABLE).unwrap_or_default();
        let mut settings: Vec<&str> = current
            .split([':', ','])
            .filter(|listed| !listed.is_empty())
            .collect();
        let wanted = std::iter::once(validation_messages::SUBMIT_TIME_SYNC_VALIDATION)
            .chain(validation_messages::VENDOR_SPECIFIC_CHECKS);
        for setting in wanted {
            if !settings.contains(&setting) {
                settings.push(setting);
            }
        }
        let value = settings.join(":");
        // Every context creation waits here before its first Vulkan call,
        // and nothing else in the tests calls Vulkan first, so no Vulkan
        // code reads the environment while it changes.
        std::env::set_var(VARIABLE, value);
    });
}

impl Drop for VulkanContext {
    fn drop(&mut self) {
        // SAFETY: every object was created by this context, children first;
        // the device is idle before anything is destroyed.
        unsafe {
            let _ = self.device.device_wait_idle();
            let pool = *self
                .command_pool
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner);
            self.device.destroy_command_pool(pool, None);
            self.device.destroy_device(None);
            self.debug_utils
                .destroy_debug_utils_messenger(self.messenger, None);
            self.instance.destroy_instance(None);
        }
        let messages = self.take_messages();
        if messages.is_empty() {
            return;
        }
        let report = format!(
            "{} validation message(s) on {} were not taken:\n{}",
            messages.len(),
            self.profile,
            messages.join("\n")
        );
        if std::thread::panicking() {
            eprintln!("{report}");
        } else {
            panic!("{report}");
        }
    }
}
