//! The fault injection a test asks of the fake-memory layer
//! ([`ContextOptions`]) and the layer configuration string it becomes.

use super::super::profile::Profile;

/// The fake-memory layer's configuration marker (see `layers/fake-memory`).
const PROFILE_MARKER: &str = "vk-suballoc-fake-memory:";

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
    pub(super) fn is_empty(&self) -> bool {
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
    pub(super) fn layer_config(&self, profile: Profile) -> String {
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
