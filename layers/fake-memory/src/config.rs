//! Which profile an instance gets, and its fault-injection options.
//!
//! The configuration is a short string, `<profile>[,<option>...]`, for example
//! `discrete` or `mobile,fail-allocation=3,max-allocations=16`. It is read once,
//! at `vkCreateInstance`, from the first of:
//!
//! 1. `VkApplicationInfo::pEngineName`, then `pApplicationName`, if either
//!    contains the marker [`MARKER`] (`vk-suballoc-fake-memory:`): the string
//!    is what follows the marker. This lets tests that run in parallel threads
//!    give each instance its own profile without touching the environment.
//! 2. The environment variable [`ENV_VAR`] (`VK_SUBALLOC_FAKE_MEMORY`).
//!
//! Without either, or with the profile `passthrough`, the layer changes
//! nothing. Options:
//! - `fail-allocation=N`: the `N`th `vkAllocateMemory` call on each device of
//!   the instance (counting from 1) returns `ERROR_OUT_OF_DEVICE_MEMORY`.
//!   May be given several times.
//! - `max-allocations=N`: overrides the profile's `maxMemoryAllocationCount`.
//! - `fail-create-buffer=N`, `fail-create-image=N`, `fail-bind-buffer=N`,
//!   `fail-bind-image=N`: the `N`th `vkCreateBuffer`, `vkCreateImage`,
//!   buffer bind (`vkBindBufferMemory` or `vkBindBufferMemory2[KHR]`) or
//!   image bind on each device of the instance (counting from 1) returns
//!   `ERROR_OUT_OF_DEVICE_MEMORY` (also with `N:device`), or with `N:host`
//!   `ERROR_OUT_OF_HOST_MEMORY`, making or binding nothing
//!   (`call_failures.rs`). A `vkBind*Memory2` call is one bind, however
//!   many binds it holds (they fail together). Each may be given several
//!   times.
//! - `dedicated=prefer` / `dedicated=require`: every buffer and image
//!   requirements query that asks (`VkMemoryDedicatedRequirements` in the
//!   output chain) reports that the driver prefers, or requires, a dedicated
//!   allocation, as some drivers do for large images (`prefer` never
//!   clears a `requiresDedicatedAllocation` the driver reported). With `require` the
//!   layer also refuses (`VK_ERROR_VALIDATION_FAILED_EXT`) every bind of a
//!   buffer or image into memory not dedicated to it
//!   (VUID-vkBindBufferMemory-buffer-01444, VUID-vkBindImageMemory-image-01445),
//!   as a driver that requires dedicated memory relies on. Whatever the
//!   option, memory allocated with `VkMemoryDedicatedAllocateInfo` takes
//!   only its resource, at offset 0 (see `dedicated_binds.rs`).
//! - `image-alignment=N` (a power of two): image requirements are aligned to
//!   at least `N`, whatever their size and tiling, instead of the profile's
//!   alignments (`Profile::image_alignment`: by size and tiling, as the
//!   modelled driver answers). Real drivers align
//!   optimal images to at least `bufferImageGranularity`; a smaller value
//!   makes the granularity rule matter on lavapipe.
//! - `budget=on` / `budget=off`: offer `VK_EXT_memory_budget` (filled from
//!   the layer's accounting) or hide it, instead of what the profile says
//!   ([`Profile::memory_budget`]). Tests that read the layer's `heapUsage`
//!   turn it on for every profile.
//! - `priority=on` / `priority=off`: offer `VK_EXT_memory_priority` (emulated
//!   by the layer, `memory_priority.rs`) or hide it, instead of what the
//!   profile says ([`Profile::memory_priority`]).
//! - `refusals=quiet`: a bind the layer refuses (`dedicated_binds.rs`) is
//!   not described on standard error; for the tests that make such binds
//!   on purpose, whose lines would fill a passing run's log. By default
//!   (`refusals=loud`) each refusal says why.

use std::fmt;

use crate::call_failures::{CallFailure, ResourceCall};
use crate::profile::{ImageAlignment, Profile};

/// Marker that introduces a configuration in the application or engine name.
pub const MARKER: &str = "vk-suballoc-fake-memory:";

/// Environment variable read when the application info carries no marker.
pub const ENV_VAR: &str = "VK_SUBALLOC_FAKE_MEMORY";

/// The profile name that turns the layer into a pure pass-through.
pub const PASSTHROUGH: &str = "passthrough";

/// An instance's faked memory architecture and fault injection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerConfig {
    /// The memory architecture to present.
    pub profile: &'static Profile,
    /// 1-based `vkAllocateMemory` call numbers (per device) that fail.
    pub fail_allocations: Vec<u64>,
    /// Resource creations and binds that fail (`fail-create-buffer` and
    /// the like).
    pub fail_calls: Vec<CallFailure>,
    /// Overrides `Profile::max_memory_allocation_count`.
    pub max_allocations: Option<u32>,
    /// Overrides `Profile::image_alignment`: every image aligned to this.
    pub image_alignment: Option<u32>,
    /// What requirements queries report about dedicated allocations.
    pub dedicated: Option<DedicatedOverride>,
    /// Overrides `Profile::memory_budget`.
    pub memory_budget: Option<bool>,
    /// Overrides `Profile::memory_priority`.
    pub memory_priority: Option<bool>,
    /// Whether refused binds go unreported on standard error
    /// (`refusals=quiet`).
    pub quiet_refusals: bool,
}

/// The `dedicated=` option: what `VkMemoryDedicatedRequirements` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DedicatedOverride {
    /// `prefersDedicatedAllocation`.
    Prefer,
    /// `prefersDedicatedAllocation` and `requiresDedicatedAllocation`.
    Require,
}

impl LayerConfig {
    /// The allocation count limit in force: the override, else the profile's.
    pub fn max_memory_allocation_count(&self) -> u32 {
        self.max_allocations
            .unwrap_or(self.profile.max_memory_allocation_count)
    }

    /// Whether `VK_EXT_memory_budget` is offered: the override, else the
    /// profile's.
    pub fn memory_budget(&self) -> bool {
        self.memory_budget.unwrap_or(self.profile.memory_budget)
    }

    /// Whether `VK_EXT_memory_priority` is offered: the override, else the
    /// profile's.
    pub fn memory_priority(&self) -> bool {
        self.memory_priority.unwrap_or(self.profile.memory_priority)
    }

    /// The alignment of image requirements: the override's (every image
    /// alike), else the profile's.
    pub fn image_alignment(&self) -> ImageAlignment {
        self.image_alignment
            .map_or(self.profile.image_alignment, |alignment| {
                ImageAlignment::flat(u64::from(alignment))
            })
    }
}

/// Why a configuration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The profile name is none of `discrete`, `integrated`, `mobile`, `amd`,
    /// `rebar`, `arc`, `apple`, `mali`, `passthrough`.
    UnknownProfile(String),
    /// An option other than `fail-allocation`, `max-allocations`,
    /// `fail-create-buffer`, `fail-create-image`, `fail-bind-buffer`,
    /// `fail-bind-image`, `image-alignment`, `dedicated`, `budget`,
    /// `priority` and `refusals`
    /// (or a `dedicated` value other than `prefer` and `require`, a `budget`
    /// or `priority` value other than `on` and `off`, a `refusals` value
    /// other than `quiet` and `loud`).
    UnknownOption(String),
    /// An option value that is not a positive integer (or, for
    /// `image-alignment`, not a power of two; for the `fail-create-*` and
    /// `fail-bind-*` options, not one with an optional `:host` or
    /// `:device`).
    BadNumber(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownProfile(name) => write!(
                f,
                "unknown profile {name:?} (expected discrete, integrated, mobile, amd, rebar, arc, apple, mali or {PASSTHROUGH})"
            ),
            Self::UnknownOption(option) => write!(
                f,
                "unknown option {option:?} (expected fail-allocation=N, max-allocations=N, fail-create-buffer=N[:host], fail-create-image=N[:host], fail-bind-buffer=N[:host], fail-bind-image=N[:host], image-alignment=N, dedicated=prefer|require, budget=on|off, priority=on|off or refusals=quiet|loud)"
            ),
            Self::BadNumber(option) => write!(f, "option {option:?} needs a positive integer"),
        }
    }
}

/// Extracts the configuration that follows [`MARKER`] in `name`, if any.
pub fn after_marker(name: &str) -> Option<&str> {
    name.find(MARKER).map(|at| &name[at + MARKER.len()..])
}

/// Parses a configuration string. `Ok(None)` means pass-through.
///
/// # Errors
/// A [`ConfigError`] naming the part that is not understood.
pub fn parse(spec: &str) -> Result<Option<LayerConfig>, ConfigError> {
    let mut parts = spec.split(',').map(str::trim);
    let name = parts.next().unwrap_or_default();
    if name.is_empty() || name == PASSTHROUGH {
        return Ok(None);
    }
    let profile =
        Profile::by_name(name).ok_or_else(|| ConfigError::UnknownProfile(name.to_owned()))?;
    let mut config = LayerConfig {
        profile,
        fail_allocations: Vec::new(),
        fail_calls: Vec::new(),
        max_allocations: None,
        image_alignment: None,
        dedicated: None,
        memory_budget: None,
        memory_priority: None,
        quiet_refusals: false,
    };
    for option in parts.filter(|part| !part.is_empty()) {
        let (key, value) = option
            .split_once('=')
            .ok_or_else(|| ConfigError::UnknownOption(option.to_owned()))?;
        if key.trim() == "dedicated" {
            config.dedicated = Some(match value.trim() {
                "prefer" => DedicatedOverride::Prefer,
                "require" => DedicatedOverride::Require,
                _ => return Err(ConfigError::UnknownOption(option.to_owned())),
            });
            continue;
        }
        if let Some(call) = ResourceCall::of_option(key.trim()) {
            let failure = CallFailure::parse(call, value.trim())
                .ok_or_else(|| ConfigError::BadNumber(option.to_owned()))?;
            config.fail_calls.push(failure);
            continue;
        }
        if key.trim() == "refusals" {
            config.quiet_refusals = match value.trim() {
                "quiet" => true,
                "loud" => false,
                _ => return Err(ConfigError::UnknownOption(option.to_owned())),
            };
            continue;
        }
        if key.trim() == "budget" || key.trim() == "priority" {
            let offered = match value.trim() {
                "on" => true,
                "off" => false,
                _ => return Err(ConfigError::UnknownOption(option.to_owned())),
            };
            if key.trim() == "budget" {
                config.memory_budget = Some(offered);
            } else {
                config.memory_priority = Some(offered);
            }
            continue;
        }
        let number = value
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| ConfigError::BadNumber(option.to_owned()))?;
        match key.trim() {
            "fail-allocation" => config.fail_allocations.push(u64::from(number)),
            "max-allocations" => config.max_allocations = Some(number),
            "image-alignment" if number.is_power_of_two() => {
                config.image_alignment = Some(number);
            }
            "image-alignment" => return Err(ConfigError::BadNumber(option.to_owned())),
            _ => return Err(ConfigError::UnknownOption(option.to_owned())),
        }
    }
    Ok(Some(config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{APPLE, ARC, DISCRETE, MALI, MOBILE};

    #[test]
    fn plain_profile() {
        let config = parse("discrete").unwrap().unwrap();
        assert_eq!(config.profile, &DISCRETE);
    }

    #[test]
    fn every_profile_by_name() {
        for (name, profile) in [("arc", &ARC), ("apple", &APPLE), ("mali", &MALI)] {
            let config = parse(name).unwrap().unwrap();
            assert_eq!(config.profile, profile);
            assert_eq!(
                config.max_memory_allocation_count(),
                profile.max_memory_allocation_count
            );
        }
        let config = parse("arc,max-allocations=8").unwrap().unwrap();
        assert_eq!(config.max_memory_allocation_count(), 8);
        assert!(matches!(
            parse("intel-arc"),
            Err(ConfigError::UnknownProfile(_))
        ));
        let message = ConfigError::UnknownProfile("x".into()).to_string();
        assert!(
            ["arc", "apple", "mali"]
                .iter()
                .all(|name| message.contains(name)),
            "{message}"
        );
    }

    #[test]
    fn options() {
        let config = parse(
            "mobile,fail-allocation=3, fail-allocation=5,max-allocations=16,image-alignment=256,dedicated=require,budget=on,priority=on,refusals=quiet",
        )
        .unwrap();
        assert_eq!(
            config,
            Some(LayerConfig {
                profile: &MOBILE,
                fail_allocations: vec![3, 5],
                fail_calls: Vec::new(),
                max_allocations: Some(16),
                image_alignment: Some(256),
                dedicated: Some(DedicatedOverride::Require),
                memory_budget: Some(true),
                memory_priority: Some(true),
                quiet_refusals: true,
            })
        );
        let config = config.unwrap();
        assert_eq!(config.image_alignment(), ImageAlignment::flat(256));
        assert!(config.memory_budget(), "budget=on overrides mobile's none");
        assert!(!parse("mobile").unwrap().unwrap().memory_budget());
        assert!(parse("discrete").unwrap().unwrap().memory_budget());
        assert!(!parse("discrete,budget=off")
            .unwrap()
            .unwrap()
            .memory_budget());
        assert!(
            config.memory_priority(),
            "priority=on overrides mobile's none"
        );
        assert!(!parse("mobile").unwrap().unwrap().memory_priority());
        assert!(parse("amd").unwrap().unwrap().memory_priority());
        assert!(!parse("rebar,priority=off")
            .unwrap()
            .unwrap()
            .memory_priority());
    }

    #[test]
    fn resource_call_failures() {
        let config = parse(
            "discrete,fail-create-buffer=2,fail-bind-image=1:host,fail-create-image=4,fail-bind-buffer=3:device,fail-create-buffer=5",
        )
        .unwrap()
        .unwrap();
        let device = ash::vk::Result::ERROR_OUT_OF_DEVICE_MEMORY;
        let host = ash::vk::Result::ERROR_OUT_OF_HOST_MEMORY;
        let failure = |call, nth, result| CallFailure { call, nth, result };
        assert_eq!(
            config.fail_calls,
            vec![
                failure(ResourceCall::CreateBuffer, 2, device),
                failure(ResourceCall::BindImage, 1, host),
                failure(ResourceCall::CreateImage, 4, device),
                failure(ResourceCall::BindBuffer, 3, device),
                failure(ResourceCall::CreateBuffer, 5, device),
            ]
        );
        for bad in [
            "discrete,fail-create-buffer=0",
            "discrete,fail-bind-image=1:objects",
            "discrete,fail-create-image=x",
        ] {
            assert!(
                matches!(parse(bad), Err(ConfigError::BadNumber(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            parse("discrete,fail-create-sampler=1"),
            Err(ConfigError::UnknownOption(_))
        ));
        let message = ConfigError::UnknownOption("x".into()).to_string();
        assert!(message.contains("fail-bind-image=N[:host]"), "{message}");
    }

    #[test]
    fn passthrough_and_errors() {
        assert_eq!(parse(""), Ok(None));
        assert_eq!(parse("passthrough"), Ok(None));
        assert!(matches!(
            parse("nvidia"),
            Err(ConfigError::UnknownProfile(_))
        ));
        assert!(matches!(
            parse("discrete,fail=1"),
            Err(ConfigError::UnknownOption(_))
        ));
        assert!(matches!(
            parse("discrete,fail-allocation=0"),
            Err(ConfigError::BadNumber(_))
        ));
        assert!(matches!(
            parse("discrete,max-allocations"),
            Err(ConfigError::UnknownOption(_))
        ));
        assert!(matches!(
            parse("discrete,image-alignment=384"),
            Err(ConfigError::BadNumber(_))
        ));
        assert!(matches!(
            parse("discrete,dedicated=always"),
            Err(ConfigError::UnknownOption(_))
        ));
        assert!(matches!(
            parse("discrete,budget=yes"),
            Err(ConfigError::UnknownOption(_))
        ));
        assert!(matches!(
            parse("discrete,refusals=silent"),
            Err(ConfigError::UnknownOption(_))
        ));
        assert!(
            !parse("discrete,refusals=quiet,refusals=loud")
                .unwrap()
                .unwrap()
                .quiet_refusals,
            "the last one counts; loud by default"
        );
        assert!(!parse("discrete").unwrap().unwrap().quiet_refusals);
    }

    #[test]
    fn marker_is_found_anywhere_in_the_name() {
        assert_eq!(
            after_marker("tests vk-suballoc-fake-memory:mobile"),
            Some("mobile")
        );
        assert_eq!(after_marker("vk-suballoc tests"), None);
    }
}
