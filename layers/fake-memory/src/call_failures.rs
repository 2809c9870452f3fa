//! Failures of chosen resource calls, as a driver short of memory answers
//! them: the `fail-create-buffer=N`, `fail-create-image=N`,
//! `fail-bind-buffer=N` and `fail-bind-image=N` options (`config.rs`) fail
//! the `N`th `vkCreateBuffer`, `vkCreateImage`, buffer bind or image bind
//! of each device with `VK_ERROR_OUT_OF_DEVICE_MEMORY` (or, with a `:host`
//! suffix, `VK_ERROR_OUT_OF_HOST_MEMORY`), making or binding nothing and
//! leaving the driver uncalled: a test sees that an application's
//! create-and-bind helpers destroy what they made and free what they
//! allocated when one of those calls fails. Lavapipe never fails them.
//!
//! Each kind is counted per device from 1, failed calls included. A buffer
//! bind is a `vkBindBufferMemory` or a `vkBindBufferMemory2[KHR]` call
//! (all of whose binds fail together), an image bind likewise; a bind the
//! layer refuses for the dedicated-memory rules (`dedicated_binds.rs`)
//! counts too and is refused as such. These are the two error codes each
//! of the four commands may return for want of memory; no other code is
//! offered (`VK_ERROR_TOO_MANY_OBJECTS` is not among any of theirs).
//!
//! `vkCreateBuffer` is intercepted here for that alone; the other three
//! commands' intercepts (`image_kinds.rs`, `dedicated_binds.rs`) ask
//! [`CallCounts::count`] first.

use std::sync::Mutex;

use ash::vk;

use crate::dispatch_registry::{device_state, DeviceState};
use crate::ffi_guard::guard;
use crate::memory_accounting::lock;

/// A command whose calls the configuration can make fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceCall {
    /// `vkCreateBuffer`.
    CreateBuffer,
    /// `vkCreateImage`.
    CreateImage,
    /// `vkBindBufferMemory`, `vkBindBufferMemory2[KHR]`.
    BindBuffer,
    /// `vkBindImageMemory`, `vkBindImageMemory2[KHR]`.
    BindImage,
}

impl ResourceCall {
    /// Every kind, in the order of their counters.
    pub const ALL: [Self; 4] = [
        Self::CreateBuffer,
        Self::CreateImage,
        Self::BindBuffer,
        Self::BindImage,
    ];

    /// The configuration option that makes its calls fail.
    pub fn option(self) -> &'static str {
        match self {
            Self::CreateBuffer => "fail-create-buffer",
            Self::CreateImage => "fail-create-image",
            Self::BindBuffer => "fail-bind-buffer",
            Self::BindImage => "fail-bind-image",
        }
    }

    /// The kind whose option is `option`, if any.
    pub fn of_option(option: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|call| call.option() == option)
    }

    /// Its counter's index: its place in [`ALL`](Self::ALL), the order
    /// of declaration.
    fn index(self) -> usize {
        self as usize
    }
}

/// One call chosen to fail: the `nth` (from 1, per device) of `call`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallFailure {
    /// The command.
    pub call: ResourceCall,
    /// Which of its calls, from 1.
    pub nth: u64,
    /// `ERROR_OUT_OF_DEVICE_MEMORY`, or `ERROR_OUT_OF_HOST_MEMORY`.
    pub result: vk::Result,
}

impl CallFailure {
    /// Parses an option's value: `N` (out of device memory) or `N:host`
    /// (out of host memory), `N` from 1. `None` for any other value.
    pub fn parse(call: ResourceCall, value: &str) -> Option<Self> {
        let (number, result) = match value.split_once(':') {
            None => (value, vk::Result::ERROR_OUT_OF_DEVICE_MEMORY),
            Some((number, "host")) => (number, vk::Result::ERROR_OUT_OF_HOST_MEMORY),
            Some((number, "device")) => (number, vk::Result::ERROR_OUT_OF_DEVICE_MEMORY),
            Some(_) => return None,
        };
        let nth = number.trim().parse::<u64>().ok().filter(|n| *n > 0)?;
        Some(Self { call, nth, result })
    }
}

/// The calls of each [`ResourceCall`] one device has made.
#[derive(Debug, Default)]
pub struct CallCounts {
    counts: Mutex<[u64; 4]>,
}

impl CallCounts {
    /// Counts a call of `call`, and returns the result it fails with when
    /// `failures` chose it.
    pub fn count(&self, failures: &[CallFailure], call: ResourceCall) -> Option<vk::Result> {
        let nth = {
            let mut counts = lock(&self.counts);
            let slot = &mut counts[call.index()];
            *slot = slot.saturating_add(1);
            *slot
        };
        failures
            .iter()
            .find(|failure| failure.call == call && failure.nth == nth)
            .map(|failure| failure.result)
    }
}

/// Counts a call of `call` on a faked device, and returns the result it
/// fails with when the configuration chose it (`None` in pass-through).
pub(crate) fn chosen_failure(state: &DeviceState, call: ResourceCall) -> Option<vk::Result> {
    let fake = state.fake.as_ref()?;
    fake.call_counts.count(&fake.config.fail_calls, call)
}

/// `vkCreateBuffer`: fails a call the configuration chose (writing a null
/// handle), else creates.
pub(crate) unsafe extern "system" fn create_buffer(
    device: vk::Device,
    create_info: *const vk::BufferCreateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    buffer: *mut vk::Buffer,
) -> vk::Result {
    guard(
        "vkCreateBuffer",
        vk::Result::ERROR_OUT_OF_HOST_MEMORY,
        || {
            // SAFETY: a live device, from the caller.
            let Some(state) = (unsafe { device_state(device) }) else {
                return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
            };
            let Some(next) = state.next.create_buffer else {
                return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
            };
            // SAFETY: the caller's output handle.
            let failed = unsafe { failed_creation(&state, ResourceCall::CreateBuffer, buffer) };
            if let Some(result) = failed {
                return result;
            }
            // SAFETY: forwarding the caller's arguments.
            unsafe { next(device, create_info, allocator, buffer) }
        },
    )
}

/// Counts a creation of `call` ([`chosen_failure`]) and, when the
/// configuration chose it to fail, writes a null handle to `handle`
/// (unless it is null: what a failed creation leaves there) and returns
/// the result to fail with.
///
/// # Safety
/// `handle` is null or valid for a write.
pub(crate) unsafe fn failed_creation<H: vk::Handle>(
    state: &DeviceState,
    call: ResourceCall,
    handle: *mut H,
) -> Option<vk::Result> {
    let result = chosen_failure(state, call)?;
    if !handle.is_null() {
        // SAFETY: the contract.
        unsafe { handle.write(H::from_raw(0)) };
    }
    Some(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_counted_apart_and_fails_once() {
        let failures = [
            CallFailure::parse(ResourceCall::CreateBuffer, "2").unwrap(),
            CallFailure::parse(ResourceCall::BindImage, "1:host").unwrap(),
        ];
        let counts = CallCounts::default();
        let count = |call| counts.count(&failures, call);
        assert_eq!(count(ResourceCall::CreateBuffer), None);
        assert_eq!(count(ResourceCall::CreateImage), None);
        assert_eq!(
            count(ResourceCall::CreateBuffer),
            Some(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY)
        );
        assert_eq!(count(ResourceCall::CreateBuffer), None);
        assert_eq!(
            count(ResourceCall::BindImage),
            Some(vk::Result::ERROR_OUT_OF_HOST_MEMORY)
        );
        assert_eq!(count(ResourceCall::BindImage), None);
        assert_eq!(count(ResourceCall::BindBuffer), None);
    }

    #[test]
    fn values_are_a_call_number_and_an_error() {
        let call = ResourceCall::BindBuffer;
        let parse = |value| CallFailure::parse(call, value);
        let device = vk::Result::ERROR_OUT_OF_DEVICE_MEMORY;
        let host = vk::Result::ERROR_OUT_OF_HOST_MEMORY;
        assert_eq!(parse("3").map(|f| (f.nth, f.result)), Some((3, device)));
        assert_eq!(parse("3:device").map(|f| f.result), Some(device));
        assert_eq!(parse("7:host").map(|f| (f.nth, f.result)), Some((7, host)));
        for bad in ["0", "", "x", "3:objects", "3:", ":host", "-1"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        for call in ResourceCall::ALL {
            assert_eq!(ResourceCall::of_option(call.option()), Some(call));
        }
        assert_eq!(ResourceCall::of_option("fail-allocation"), None);
    }
}
