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

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// The fake-memory layer's configuration marker (see `layers/fake-memory`).
const PROFILE_MARKER: &str = "vk-suballoc-fake-memory:";

/// What to install when a part of the Vulkan stack is missing.
const INSTALL_HINT: &str = "install the Vulkan loader, lavapipe and the validation layer \
     (Debian/Ubuntu: `apt-get install libvulkan1 mesa-vulkan-drivers vulkan-validationlayers`), \
     or run the tests through `scripts/with-vulkan.sh cargo test`, which does it when run as root";

/// Fault injection for the fake-memory profiles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContextOptions {
    /// `vkAllocateMemory` calls (1-based, counted per device) that fail with
    /// `ERROR_OUT_OF_DEVICE_MEMORY`.
    pub fail_allocations: Vec<u32>,
    /// Resource creations and binds that fail, as the layer's options
    /// take them (`fail-create-buffer=1`, `fail-bind-image=2:host`).
    pub fail_calls: Vec<String>,
    /// Overrides the profile's `maxMemoryAllocationCount`.
    pub max_allocations: Option<u32>,
    /// Overrides the least alignment of image requirements.
    pub image_alignment: Option<u32>,
    /// Makes requirements queries report that the driver prefers
    /// (`"prefer"`) or requires (`"require"`) dedicated memory.
    pub dedicated: Option<&'static str>,
    /// Offers `VK_EXT_memory_budget` (`true`) or hides it, instead of what
    /// the profile says ([`Profile::has_memory_budget`]).
    pub memory_budget: Option<bool>,
    /// Offers `VK_EXT_memory_priority` (`true`) or hides it, instead of
    /// what the profile says ([`Profile::has_memory_priority`]).
    pub memory_priority: Option<bool>,
    /// Keeps the layer's refused binds off standard error, for a test that
    /// makes them on purpose.
    pub quiet_refusals: bool,
    /// Runs the validation layer's GPU-assisted validation too
    /// ([`validation_messages::GPU_ASSISTED`]). Not a fake-layer option:
    /// plain lavapipe takes it.
    pub gpu_assisted: bool,
}

impl ContextOptions {
    /// Adds a `vkAllocateMemory` call number (from 1) that will fail.
    pub fn fail_allocation(mut self, call: u32) -> Self {
        self.fail_allocations.push(call);
        self
    }

    /// Makes the `nth` (from 1) call of the layer's `option`
    /// (`fail-create-buffer`, `fail-create-image`, `fail-bind-buffer`,
    /// `fail-bind-image`) fail with `ERROR_OUT_OF_HOST_MEMORY` (`host`)
    /// or `ERROR_OUT_OF_DEVICE_MEMORY`.
    pub fn fail_call(mut self, option: &str, nth: u32, host: bool) -> Self {
        let error = if host { ":host" } else { "" };
        self.fail_calls.push(format!("{option}={nth}{error}"));
        self
    }

    /// Lowers `maxMemoryAllocationCount` to `count`.
    pub fn max_allocations(mut self, count: u32) -> Self {
        self.max_allocations = Some(count);
        self
    }

    /// Aligns image requirements to at least `alignment` (a power of two)
    /// instead of the profile's minimum.
    pub fn image_alignment(mut self, alignment: u32) -> Self {
        self.image_alignment = Some(alignment);
        self
    }

    /// Makes every requirements query report that the driver prefers
    /// (`"prefer"`) or requires (`"require"`) dedicated memory.
    pub fn dedicated(mut self, mode: &'static str) -> Self {
        self.dedicated = Some(mode);
        self
    }

    /// Offers `VK_EXT_memory_budget` with the layer's figures, or hides
    /// it, whatever the profile says: for tests of the layer's accounting,
    /// which they read as `heapUsage`.
    pub fn memory_budget(mut self, offered: bool) -> Self {
        self.memory_budget = Some(offered);
        self
    }

    /// Offers `VK_EXT_memory_priority` (emulated by the layer) or hides
    /// it, whatever the profile says.
    pub fn memory_priority(mut self, offered: bool) -> Self {
        self.memory_priority = Some(offered);
        self
    }

    /// Keeps the binds the layer refuses off standard error
    /// (`refusals=quiet`): a test that makes them on purpose.
    pub fn quiet_refusals(mut self) -> Self {
        self.quiet_refusals = true;
        self
    }

    /// Adds GPU-assisted validation ([`validation_messages::GPU_ASSISTED`]):
    /// shaders instrumented to report, among others, an access through a
    /// device address outside every live buffer.
    pub fn gpu_assisted(mut self) -> Self {
        self.gpu_assisted = true;
        self
    }

    /// Whether the options ask nothing of the fake-memory layer (GPU-assisted
    /// validation is the validation layer's).
    fn is_empty(&self) -> bool {
        self.fail_allocations.is_empty()
            && self.fail_calls.is_empty()
            && self.max_allocations.is_none()
            && self.image_alignment.is_none()
            && self.dedicated.is_none()
            && self.memory_budget.is_none()
            && self.memory_priority.is_none()
            && !self.quiet_refusals
    }

    /// The fake-memory layer configuration string for `profile`.
    fn layer_config(&self, profile: Profile) -> String {
        let mut config = format!("{PROFILE_MARKER}{}", profile.name());
        for call in &self.fail_allocations {
            config.push_str(&format!(",fail-allocation={call}"));
        }
        for failure in &self.fail_calls {
            config.push_str(&format!(",{failure}"));
        }
        if let Some(count) = self.max_allocations {
            config.push_str(&format!(",max-allocations={count}"));
        }
        if let Some(alignment) = self.image_alignment {
            config.push_str(&format!(",image-alignment={alignment}"));
        }
        if let Some(mode) = self.dedicated {
            config.push_str(&format!(",dedicated={mode}"));
        }
        if let Some(offered) = self.memory_budget {
            let value = if offered { "on" } else { "off" };
            config.push_str(&format!(",budget={value}"));
        }
        if let Some(offered) = self.memory_priority {
            let value = if offered { "on" } else { "off" };
            config.push_str(&format!(",priority={value}"));
        }
        if self.quiet_refusals {
            config.push_str(",refusals=quiet");
        }
        config
    }
}

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

    /// Lets this context's messages of `advice` through: a test that
    /// disregards that best practice on purpose (see [`Advice`]).
    pub fn allow(&self, advice: Advice) {
        let mut allowed = self.allowed.lock().unwrap_or_else(PoisonError::into_inner);
        for id in advice.ids() {
            if !allowed.contains(id) {
                allowed.push(id);
            }
        }
    }

    /// Runs `call` and drops the messages of `advice` recorded during it,
    /// and only those: for a test's own Vulkan call that disregards that
    /// advice on purpose (a raw `vkAllocateMemory` without a priority) in a
    /// test where the allocator's calls must still heed it, which a
    /// context-wide [`allow`](Self::allow) would let pass too (it drops
    /// the advice from every message taken after it, earlier ones
    /// included). Messages recorded before `call` stay, in order, as do
    /// those of other ids recorded during it. For a call on the test's own
    /// thread: another thread's messages recorded meanwhile are filtered
    /// alike.
    pub fn allowing<R>(&self, advice: &[Advice], call: impl FnOnce() -> R) -> R {
        let before = validation_messages::take(&self.messages);
        let result = call();
        let mut during = validation_messages::take(&self.messages);
        let ids: Vec<&str> = advice
            .iter()
            .flat_map(|advice| advice.ids())
            .copied()
            .collect();
        validation_messages::drop_ids(&mut during, &ids);
        let mut log = self.messages.lock().unwrap_or_else(PoisonError::into_inner);
        let after = std::mem::take(&mut *log);
        log.extend(before);
        log.extend(during);
        log.extend(after);
        result
    }

    /// For a test that calls `vkAllocateMemory` itself and makes no
    /// allocator: allows, for the whole context, the NVIDIA advice the
    /// allocator heeds and such a test need not (a priority on every
    /// allocation, [`Advice::NoMemoryPriority`]; memory just freed reused,
    /// [`Advice::ReusedMemory`]). Where an allocator allocates too, wrap
    /// the test's own calls in [`allowing`](Self::allowing) instead, so
    /// that the allocator's still draw the advice.
    pub fn allow_own_allocations(&self) {
        self.allow(Advice::NoMemoryPriority);
        self.allow(Advice::ReusedMemory);
    }

    /// Takes every validation message recorded so far, less the allowed
    /// advice ([`VulkanContext::allow`]).
    pub fn take_messages(&self) -> Vec<String> {
        let allowed = self.allowed.lock().unwrap_or_else(PoisonError::into_inner);
        let mut messages = validation_messages::take(&self.messages);
        validation_messages::drop_ids(&mut messages, &allowed);
        messages
    }

    /// Panics, listing them, if any validation message was recorded.
    pub fn assert_no_validation_messages(&self) {
        let messages = self.take_messages();
        assert!(
            messages.is_empty(),
            "{} validation message(s) on {}:\n{}",
            messages.len(),
            self.profile,
            messages.join("\n")
        );
    }

    /// Takes the recorded messages and checks them against `expected` ids
    /// (VUIDs, whole): each must be the id of some message, and every
    /// message must have one of them as its id (a message of another id
    /// whose text names one, as an object's debug name may, is unexpected).
    /// Returns the messages.
    pub fn expect_validation_messages(&self, expected: &[&str]) -> Vec<String> {
        let messages = self.take_messages();
        let has_id = validation_messages::has_id;
        for id in expected {
            assert!(
                messages.iter().any(|message| has_id(message, id)),
                "expected {id} on {}, got:\n{}",
                self.profile,
                messages.join("\n")
            );
        }
        let unexpected: Vec<&String> = messages
            .iter()
            .filter(|message| !expected.iter().any(|id| has_id(message, id)))
            .collect();
        assert!(
            unexpected.is_empty(),
            "unexpected validation message(s) on {}:\n{}",
            self.profile,
            unexpected
                .iter()
                .map(|message| message.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
        messages
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
fn pick_device(instance: &ash::Instance) -> vk::PhysicalDevice {
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
