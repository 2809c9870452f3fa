//! How the ash backend reads a frame's signal from the driver's results,
//! on function tables whose fence and semaphore commands are stubs: a
//! fence not ready and a wait's `VK_TIMEOUT` are "not yet", never an
//! error, and `VK_ERROR_DEVICE_LOST` (and any other failure) is an error,
//! never "not yet" (which `collect` would poll for ever) nor "done"
//! (which would release memory the GPU may still use); a timeline value
//! is reached at or past the frame's. Through the core commands and
//! through `VK_KHR_timeline_semaphore`'s alike. The fake device has its
//! own copy of these rules; the Vulkan suite cannot lose a device.

use std::cell::Cell;
use std::ffi::{c_char, c_void, CStr};

use ash::vk;

use super::{instance_with_proc_addr, AshMemoryDevice, DeviceError, DeviceFeatures};
use crate::device::{FrameSignal, MemoryDeviceExt};

thread_local! {
    /// What every stub returns.
    static RESULT: Cell<vk::Result> = const { Cell::new(vk::Result::SUCCESS) };
    /// The counter value the semaphore stubs report.
    static COUNTER: Cell<u64> = const { Cell::new(0) };
    /// The name of the last stub called.
    static CALLED: Cell<&'static str> = const { Cell::new("") };
}

unsafe extern "system" fn fence_status(_device: vk::Device, _fence: vk::Fence) -> vk::Result {
    CALLED.set("vkGetFenceStatus");
    RESULT.get()
}

unsafe extern "system" fn wait_for_fences(
    _device: vk::Device,
    _count: u32,
    _fences: *const vk::Fence,
    _wait_all: vk::Bool32,
    _timeout: u64,
) -> vk::Result {
    CALLED.set("vkWaitForFences");
    RESULT.get()
}

macro_rules! semaphore_stubs {
    ($counter:ident, $wait:ident, $counter_name:literal, $wait_name:literal) => {
        /// Reports [`COUNTER`] (on success) and returns [`RESULT`].
        unsafe extern "system" fn $counter(
            _device: vk::Device,
            _semaphore: vk::Semaphore,
            value: *mut u64,
        ) -> vk::Result {
            CALLED.set($counter_name);
            if RESULT.get() == vk::Result::SUCCESS {
                // SAFETY: the backend passes room for the value.
                unsafe { value.write(COUNTER.get()) };
            }
            RESULT.get()
        }

        unsafe extern "system" fn $wait(
            _device: vk::Device,
            _info: *const vk::SemaphoreWaitInfo<'_>,
            _timeout: u64,
        ) -> vk::Result {
            CALLED.set($wait_name);
            RESULT.get()
        }
    };
}

semaphore_stubs!(
    core_counter,
    core_wait,
    "vkGetSemaphoreCounterValue",
    "vkWaitSemaphores"
);
semaphore_stubs!(
    khr_counter,
    khr_wait,
    "vkGetSemaphoreCounterValueKHR",
    "vkWaitSemaphoresKHR"
);

/// The stub of a core command `name`, or null.
fn core_stub(name: &CStr) -> *const c_void {
    match name.to_bytes() {
        b"vkGetFenceStatus" => fence_status as *const c_void,
        b"vkWaitForFences" => wait_for_fences as *const c_void,
        b"vkGetSemaphoreCounterValue" => core_counter as *const c_void,
        b"vkWaitSemaphores" => core_wait as *const c_void,
        _ => std::ptr::null(),
    }
}

/// Stands in for `vkGetDeviceProcAddr` on a device with
/// `VK_KHR_timeline_semaphore` enabled: its commands' stubs.
unsafe extern "system" fn khr_proc_addr(
    _device: vk::Device,
    name: *const c_char,
) -> vk::PFN_vkVoidFunction {
    // SAFETY: the backend and ash pass NUL-terminated names.
    let stub = match unsafe { CStr::from_ptr(name) }.to_bytes() {
        b"vkGetSemaphoreCounterValueKHR" => khr_counter as *const c_void,
        b"vkWaitSemaphoresKHR" => khr_wait as *const c_void,
        _ => return None,
    };
    // SAFETY: a function pointer, given back as the void function
    // `vkGetDeviceProcAddr` returns.
    Some(unsafe { std::mem::transmute::<*const c_void, unsafe extern "system" fn()>(stub) })
}

/// Stands in for `vkGetDeviceProcAddr` on a device without the extension.
unsafe extern "system" fn no_khr_proc_addr(
    _device: vk::Device,
    _name: *const c_char,
) -> vk::PFN_vkVoidFunction {
    None
}

/// A backend whose fence and core semaphore commands are the stubs, and,
/// with `khr`, whose device has `VK_KHR_timeline_semaphore` enabled.
fn signal_device(khr: bool) -> AshMemoryDevice {
    let proc_addr = if khr {
        khr_proc_addr as *const c_void
    } else {
        no_khr_proc_addr as *const c_void
    };
    let instance = instance_with_proc_addr(proc_addr);
    // SAFETY: the loader only looks names up; nothing is called but the
    // stubs, which need no live device.
    unsafe {
        let device = ash::Device::load_with(core_stub, vk::Device::null());
        AshMemoryDevice::new(
            &instance,
            &device,
            vk::PhysicalDevice::null(),
            DeviceFeatures::default(),
        )
    }
}

/// What the backend answers, polling and waiting, when the stubs return
/// `result` (and report `counter`), and the stub it called.
fn read(
    device: &AshMemoryDevice,
    signal: FrameSignal,
    result: vk::Result,
    counter: u64,
) -> [(Result<bool, DeviceError>, &'static str); 2] {
    RESULT.set(result);
    COUNTER.set(counter);
    // SAFETY: the stubs touch no Vulkan object.
    let polled = unsafe { device.is_signalled(signal) };
    let polled = (polled, CALLED.get());
    // SAFETY: as above.
    let waited = unsafe { device.wait_signalled(signal, 1_000) };
    let waited = (waited, CALLED.get());
    RESULT.set(vk::Result::SUCCESS);
    [polled, waited]
}

/// A fence's poll: `VK_NOT_READY` is "not yet"; its wait: `VK_TIMEOUT` is.
#[test]
fn a_fence_not_yet_signalled_is_not_done_and_a_lost_device_is_an_error() {
    let device = signal_device(false);
    let fence = FrameSignal::Fence(<vk::Fence as vk::Handle>::from_raw(3));
    let (poll, wait) = ("vkGetFenceStatus", "vkWaitForFences");
    let lost = Err(DeviceError::DeviceLost);
    let host = Err(DeviceError::OutOfHostMemory);
    for (result, polled, waited) in [
        (vk::Result::SUCCESS, Some(Ok(true)), Some(Ok(true))),
        (vk::Result::NOT_READY, Some(Ok(false)), None),
        (vk::Result::TIMEOUT, None, Some(Ok(false))),
        (vk::Result::ERROR_DEVICE_LOST, Some(lost), Some(lost)),
        (vk::Result::ERROR_OUT_OF_HOST_MEMORY, Some(host), Some(host)),
    ] {
        let [got_polled, got_waited] = read(&device, fence, result, 0);
        if let Some(want) = polled {
            assert_eq!(got_polled, (want, poll), "{result:?}");
        }
        if let Some(want) = waited {
            assert_eq!(got_waited, (want, wait), "{result:?}");
        }
    }
}

/// A timeline frame is done once the counter reaches its value (values
/// only rise: past it is done too), through the extension's commands
/// wherever it is enabled, else the core ones; a wait's `VK_TIMEOUT` is
/// "not yet", a lost device an error.
#[test]
fn a_timeline_value_is_reached_at_or_past_it_and_a_lost_device_is_an_error() {
    let signal = FrameSignal::Timeline {
        semaphore: <vk::Semaphore as vk::Handle>::from_raw(5),
        value: 7,
    };
    for khr in [false, true] {
        let device = signal_device(khr);
        let (poll, wait) = if khr {
            ("vkGetSemaphoreCounterValueKHR", "vkWaitSemaphoresKHR")
        } else {
            ("vkGetSemaphoreCounterValue", "vkWaitSemaphores")
        };
        for (counter, reached) in [(0, false), (6, false), (7, true), (8, true)] {
            let [polled, _] = read(&device, signal, vk::Result::SUCCESS, counter);
            assert_eq!(polled, (Ok(reached), poll), "KHR {khr}, counter {counter}");
        }
        let [_, waited] = read(&device, signal, vk::Result::TIMEOUT, 0);
        assert_eq!(waited, (Ok(false), wait), "KHR {khr}");
        let lost = read(&device, signal, vk::Result::ERROR_DEVICE_LOST, 9);
        assert_eq!(
            lost,
            [
                (Err(DeviceError::DeviceLost), poll),
                (Err(DeviceError::DeviceLost), wait)
            ],
            "KHR {khr}"
        );
    }
}
