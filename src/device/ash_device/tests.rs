//! Unit tests of the ash backend that need no Vulkan driver: its accessors
//! and `Debug`, the batching of mapped ranges into one driver call and the
//! reading of a failed flush, on a function table whose only entry points
//! are stubs, and the translation of Vulkan's memory properties, dedicated
//! requirements and priorities into the allocator's, which of
//! maintenance4's requirement queries are looked up and which image create
//! infos they are given. They are apart from
//! `ash_device.rs` so that the backend reads without its test stubs; the
//! Vulkan suite (`tests/vulkan.rs`) runs the backend on a real device.

use ash::vk;

use gpu_alloc_types::MemoryPropertyFlags as Props;
use gpu_alloc_types::{MappedMemoryRange, MemoryDevice};

use super::info_requirements::{takes_image_info, InfoRequirements};
use super::{amd_device_coherent_types, memory_priority, memory_property_flags};
use super::{is_vulkan_1_3, known_max_buffer_size};
use super::{AshMemoryDevice, DedicatedHint, DeviceError, DeviceFeatures, MemoryDeviceExt};

use std::cell::{Cell, RefCell};
use std::ffi::{c_void, CStr};

thread_local! {
    /// Each stub call's ranges, as (memory, offset, size).
    static CALLS: RefCell<Vec<Vec<(u64, u64, u64)>>> = const { RefCell::new(Vec::new()) };
    /// What the stub returns.
    static RESULT: Cell<vk::Result> = const { Cell::new(vk::Result::SUCCESS) };
}

/// Stands in for `vkFlushMappedMemoryRanges` and
/// `vkInvalidateMappedMemoryRanges`: records the call's ranges and
/// returns [`RESULT`].
unsafe extern "system" fn record_ranges(
    _device: vk::Device,
    count: u32,
    ranges: *const vk::MappedMemoryRange<'_>,
) -> vk::Result {
    // SAFETY: ash passes its slice's pointer and length.
    let ranges = unsafe { std::slice::from_raw_parts(ranges, count as usize) };
    let ranges = ranges
        .iter()
        .map(|r| (vk::Handle::as_raw(r.memory), r.offset, r.size))
        .collect();
    CALLS.with(|calls| calls.borrow_mut().push(ranges));
    RESULT.get()
}

/// Stands in for `vkGetDeviceProcAddr`, which `AshMemoryDevice::new`
/// asks whether the device has the timeline-semaphore commands: none.
unsafe extern "system" fn no_device_command(
    _device: vk::Device,
    _name: *const std::ffi::c_char,
) -> vk::PFN_vkVoidFunction {
    None
}

/// A backend whose device has only the two range entry points (the
/// stub above); every other entry point panics if called.
fn recording_device() -> AshMemoryDevice {
    stub_device(vk::PhysicalDevice::null(), DeviceFeatures::default())
}

/// An instance table whose only command is `vkGetDeviceProcAddr`, the
/// stub `proc_addr` (an `unsafe extern "system" fn` of its signature).
fn instance_with_proc_addr(proc_addr: *const c_void) -> ash::Instance {
    let load = |name: &CStr| -> *const c_void {
        if name == c"vkGetDeviceProcAddr" {
            proc_addr
        } else {
            std::ptr::null()
        }
    };
    // SAFETY: the loader only looks names up.
    unsafe { ash::Instance::load_with(load, vk::Instance::null()) }
}

/// [`recording_device`] made with `physical_device` and `features`
/// (`debug_utils` off: its table would be loaded through the instance,
/// whose entry points are all missing).
fn stub_device(physical_device: vk::PhysicalDevice, features: DeviceFeatures) -> AshMemoryDevice {
    let load = |name: &CStr| -> *const c_void {
        if name == c"vkFlushMappedMemoryRanges" || name == c"vkInvalidateMappedMemoryRanges" {
            record_ranges as *const c_void
        } else {
            std::ptr::null()
        }
    };
    let instance = instance_with_proc_addr(no_device_command as *const c_void);
    // SAFETY: the loader only looks names up; nothing is called but the
    // stubs, which need no live device.
    unsafe {
        let device = ash::Device::load_with(load, vk::Device::null());
        AshMemoryDevice::new(&instance, &device, physical_device, features)
    }
}

/// What the backend was made with is what its accessors give back, and
/// what its `Debug` shows: callers read the physical device and the
/// enabled features back from the allocator's device (to make another
/// allocator, or to know whether device addresses and budgets are on),
/// and log the allocator, whose `Debug` shows its device.
#[test]
fn the_backend_gives_back_what_it_was_made_with() {
    let physical_device = <vk::PhysicalDevice as vk::Handle>::from_raw(0x5a5a);
    let features = DeviceFeatures {
        buffer_device_address: true,
        memory_budget: true,
        protected_memory: true,
        ..DeviceFeatures::default()
    };
    let device = stub_device(physical_device, features);
    assert_eq!(device.physical_device(), physical_device);
    assert_eq!(device.features(), features);
    let shown = format!("{device:?}");
    for needle in [
        "AshMemoryDevice",
        &format!("{physical_device:?}"),
        "buffer_device_address: true",
        "memory_budget: true",
        "protected_memory: true",
    ] {
        assert!(shown.contains(needle), "{needle:?} not in {shown}");
    }
}

/// A batch of ranges is one `vkFlushMappedMemoryRanges` (or
/// `vkInvalidateMappedMemoryRanges`) call holding all of them, as
/// `flush_allocations` promises: the backend made one call per range.
/// An empty batch makes no call (Vulkan requires at least one range).
#[test]
fn a_batch_of_ranges_is_one_driver_call() {
    let device = recording_device();
    let memories = [
        <vk::DeviceMemory as vk::Handle>::from_raw(7),
        <vk::DeviceMemory as vk::Handle>::from_raw(9),
    ];
    let ranges = [
        MappedMemoryRange {
            memory: &memories[0],
            offset: 0,
            size: 256,
        },
        MappedMemoryRange {
            memory: &memories[0],
            offset: 512,
            size: 768,
        },
        MappedMemoryRange {
            memory: &memories[1],
            offset: 256,
            size: 256,
        },
    ];
    let want = vec![(7, 0, 256), (7, 512, 768), (9, 256, 256)];
    // SAFETY: the stubs touch no memory.
    unsafe {
        device.flush_memory_ranges(&ranges).unwrap();
        device.invalidate_memory_ranges(&ranges).unwrap();
        device.flush_memory_ranges(&ranges[2..]).unwrap();
        device.flush_memory_ranges(&[]).unwrap();
        device.invalidate_memory_ranges(&[]).unwrap();
    }
    let calls = CALLS.with(|calls| calls.take());
    assert_eq!(calls, [want.clone(), want, vec![(9, 256, 256)]]);
}

/// A failed flush or invalidate says which memory ran out: the
/// driver's `ERROR_OUT_OF_HOST_MEMORY` is host memory, and any other
/// failure device memory, as [`Error::OutOfHostMemory`](crate::Error::OutOfHostMemory)
/// or [`Error::OutOfDeviceMemory`](crate::Error::OutOfDeviceMemory)
/// from `flush_allocations` and `invalidate_allocations`: freeing host
/// memory is the remedy for one, GPU memory for the other.
#[test]
fn a_failed_flush_names_the_memory_that_ran_out() {
    let device = recording_device();
    let memory = <vk::DeviceMemory as vk::Handle>::from_raw(7);
    let ranges = [MappedMemoryRange {
        memory: &memory,
        offset: 0,
        size: 256,
    }];
    for (result, want) in [
        (
            vk::Result::ERROR_OUT_OF_HOST_MEMORY,
            DeviceError::OutOfHostMemory,
        ),
        (
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
            DeviceError::OutOfDeviceMemory,
        ),
    ] {
        RESULT.set(result);
        // SAFETY: the stubs touch no memory.
        let (flushed, invalidated) = unsafe {
            (
                device.flush_memory_ranges(&ranges),
                device.invalidate_memory_ranges(&ranges),
            )
        };
        RESULT.set(vk::Result::SUCCESS);
        assert_eq!(flushed.map_err(DeviceError::from), Err(want), "{result:?}");
        assert_eq!(
            invalidated.map_err(DeviceError::from),
            Err(want),
            "{result:?}"
        );
    }
}

#[test]
fn memory_priorities_stay_within_the_valid_range() {
    assert_eq!(memory_priority(0.25), 0.25);
    assert_eq!(memory_priority(-1.0), 0.0);
    assert_eq!(memory_priority(f32::INFINITY), 1.0);
    assert_eq!(memory_priority(f32::NAN), 0.5);
}

/// The driver's `VkMemoryDedicatedRequirements` reaches the allocator
/// flag by flag: `requiresDedicatedAllocation` is what makes an image
/// its own memory (the ash helpers' only source for it), and neither
/// flag stands for the other.
#[test]
fn dedicated_requirements_are_read_flag_by_flag() {
    let hint = |required: bool, preferred: bool| {
        DedicatedHint::from_requirements(
            &vk::MemoryDedicatedRequirements::default()
                .requires_dedicated_allocation(required)
                .prefers_dedicated_allocation(preferred),
        )
    };
    for (required, preferred) in [(false, false), (true, false), (false, true), (true, true)] {
        assert_eq!(
            hint(required, preferred),
            DedicatedHint {
                required,
                preferred
            },
            "required {required}, preferred {preferred}"
        );
    }
}

/// Either AMD flag marks a type that needs `deviceCoherentMemory`; the
/// mask has one bit per such type, at its index.
#[test]
fn amd_device_coherent_types_are_found_by_either_flag() {
    let ty = |property_flags| vk::MemoryType {
        property_flags,
        heap_index: 0,
    };
    let types = [
        ty(vk::MemoryPropertyFlags::DEVICE_LOCAL),
        ty(vk::MemoryPropertyFlags::DEVICE_LOCAL | vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD),
        ty(vk::MemoryPropertyFlags::HOST_VISIBLE),
        ty(vk::MemoryPropertyFlags::DEVICE_UNCACHED_AMD),
        ty(vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD
            | vk::MemoryPropertyFlags::DEVICE_UNCACHED_AMD),
    ];
    assert_eq!(amd_device_coherent_types(&types), 0b1_1010);
    assert_eq!(amd_device_coherent_types(&types[..1]), 0);
}

/// The protected flag reaches the allocator: it is what keeps protected
/// types out of the ranking and, without `protectedMemory`, out of use.
#[test]
fn the_protected_flag_is_read() {
    let flags = vk::MemoryPropertyFlags::DEVICE_LOCAL | vk::MemoryPropertyFlags::PROTECTED;
    assert_eq!(
        memory_property_flags(flags),
        Props::DEVICE_LOCAL | Props::PROTECTED
    );
}

/// `maxBufferSize` is asked for on Vulkan 1.3 and later devices (or with
/// VK_KHR_maintenance4), whatever their patch level or a later major
/// version; a 1.2 device is not one of them.
#[test]
fn maintenance4_is_core_from_vulkan_1_3() {
    for (version, core) in [
        (vk::make_api_version(0, 1, 1, 0), false),
        (vk::make_api_version(0, 1, 2, 999), false),
        (vk::API_VERSION_1_3, true),
        (vk::make_api_version(0, 1, 3, 230), true),
        (vk::make_api_version(0, 1, 4, 0), true),
        (vk::make_api_version(0, 2, 0, 0), true),
    ] {
        assert_eq!(is_vulkan_1_3(version), core, "{version:#x}");
    }
}

/// A device without maintenance4, or one that reported 0 (an unfilled
/// struct), has no known `maxBufferSize`: `u64::MAX`, which refuses
/// nothing. Any other value is taken as reported.
#[test]
fn an_unknown_max_buffer_size_is_no_limit() {
    assert_eq!(known_max_buffer_size(None), u64::MAX);
    assert_eq!(known_max_buffer_size(Some(0)), u64::MAX);
    for size in [1 << 30, 0xFFFF_FFFC, u64::from(u32::MAX), 1 << 40] {
        assert_eq!(known_max_buffer_size(Some(size)), size);
    }
}

/// `structure`'s address as a `pNext` pointer: chains linked by hand, as
/// C code links them (ash's `push_next` keeps a pointer whose tag its own
/// later borrows end, which Miri reports).
fn next_of<T>(structure: &T) -> *const c_void {
    std::ptr::from_ref(structure).cast()
}

/// maintenance4's image query takes plain optimal and linear images, with
/// structures it does not refuse in the chain (a format list), and no
/// create info that needs a plane aspect or that the query refuses: DRM
/// format modifier tiling, a disjoint image, a swapchain's structure
/// (VUID-VkDeviceImageMemoryRequirements-pCreateInfo-06416), an explicit
/// DRM modifier's (-06776), an Android (-06996) or QNX Screen (-08962)
/// external format's, wherever it sits in the chain. Those images are
/// made and destroyed instead.
#[test]
fn the_image_query_takes_only_create_infos_it_may() {
    let plain = vk::ImageCreateInfo::default().tiling(vk::ImageTiling::OPTIMAL);
    let formats = [vk::Format::R8G8B8A8_UNORM];
    let list = vk::ImageFormatListCreateInfo::default().view_formats(&formats);
    let chained = |first: *const c_void| vk::ImageCreateInfo {
        p_next: first,
        ..plain
    };
    let swapchain = vk::ImageSwapchainCreateInfoKHR::default();
    // The swapchain's structure second, behind a format list.
    let list_then_swapchain = vk::ImageFormatListCreateInfo {
        p_next: next_of(&swapchain),
        ..list
    };
    let explicit = vk::ImageDrmFormatModifierExplicitCreateInfoEXT::default();
    let android = vk::ExternalFormatANDROID::default().external_format(1);
    let qnx = vk::ExternalFormatQNX::default().external_format(1);
    // SAFETY: every call below reads a chain of live structures.
    unsafe {
        assert!(takes_image_info(&plain));
        assert!(takes_image_info(&plain.tiling(vk::ImageTiling::LINEAR)));
        assert!(!takes_image_info(
            &plain.tiling(vk::ImageTiling::DRM_FORMAT_MODIFIER_EXT)
        ));
        assert!(!takes_image_info(
            &plain.flags(vk::ImageCreateFlags::DISJOINT)
        ));
        assert!(takes_image_info(&chained(next_of(&list))));
        assert!(!takes_image_info(&chained(next_of(&list_then_swapchain))));
        assert!(!takes_image_info(&chained(next_of(&explicit))));
        assert!(!takes_image_info(&chained(next_of(&android))));
        assert!(!takes_image_info(&chained(next_of(&qnx))));
    }
}

thread_local! {
    /// The command names [`answering_proc_addr`] answers.
    static ANSWERED: RefCell<Vec<&'static CStr>> = const { RefCell::new(Vec::new()) };
    /// The names of the requirement queries called, in order.
    static QUERIED: RefCell<Vec<&'static str>> = const { RefCell::new(Vec::new()) };
}

macro_rules! requirement_query_stub {
    ($name:ident, $info:ty, $command:literal) => {
        /// Records that the command of its name was called; writes nothing.
        unsafe extern "system" fn $name(
            _device: vk::Device,
            _info: *const $info,
            _requirements: *mut vk::MemoryRequirements2<'_>,
        ) {
            QUERIED.with(|queried| queried.borrow_mut().push($command));
        }
    };
}

requirement_query_stub!(
    core_buffer_query,
    vk::DeviceBufferMemoryRequirements<'_>,
    "vkGetDeviceBufferMemoryRequirements"
);
requirement_query_stub!(
    khr_buffer_query,
    vk::DeviceBufferMemoryRequirements<'_>,
    "vkGetDeviceBufferMemoryRequirementsKHR"
);
requirement_query_stub!(
    core_image_query,
    vk::DeviceImageMemoryRequirements<'_>,
    "vkGetDeviceImageMemoryRequirements"
);
requirement_query_stub!(
    khr_image_query,
    vk::DeviceImageMemoryRequirements<'_>,
    "vkGetDeviceImageMemoryRequirementsKHR"
);

macro_rules! address_query_stub {
    ($name:ident, $command:literal, $address:literal) => {
        /// Records that the command of its name was called, and answers
        /// an address of its own plus the buffer's raw handle.
        unsafe extern "system" fn $name(
            _device: vk::Device,
            info: *const vk::BufferDeviceAddressInfo<'_>,
        ) -> vk::DeviceAddress {
            QUERIED.with(|queried| queried.borrow_mut().push($command));
            // SAFETY: the backend passes a valid structure.
            $address + vk::Handle::as_raw(unsafe { (*info).buffer })
        }
    };
}

address_query_stub!(core_address_query, "vkGetBufferDeviceAddress", 0x1_0000);
address_query_stub!(khr_address_query, "vkGetBufferDeviceAddressKHR", 0x2_0000);

/// Stands in for `vkGetDeviceProcAddr`: the stub of each name in
/// [`ANSWERED`], `NULL` for any other.
unsafe extern "system" fn answering_proc_addr(
    _device: vk::Device,
    name: *const std::ffi::c_char,
) -> vk::PFN_vkVoidFunction {
    // SAFETY: `find` passes NUL-terminated names.
    let name = unsafe { CStr::from_ptr(name) };
    if !ANSWERED.with(|answered| answered.borrow().contains(&name)) {
        return None;
    }
    let stub = match name.to_bytes() {
        b"vkGetDeviceBufferMemoryRequirements" => core_buffer_query as *const c_void,
        b"vkGetDeviceBufferMemoryRequirementsKHR" => khr_buffer_query as *const c_void,
        b"vkGetDeviceImageMemoryRequirements" => core_image_query as *const c_void,
        b"vkGetDeviceImageMemoryRequirementsKHR" => khr_image_query as *const c_void,
        b"vkGetBufferDeviceAddress" => core_address_query as *const c_void,
        b"vkGetBufferDeviceAddressKHR" => khr_address_query as *const c_void,
        // Looked up, never called.
        b"vkGetSemaphoreCounterValue" | b"vkGetSemaphoreCounterValueKHR" => {
            no_device_command as *const c_void
        }
        _ => return None,
    };
    // SAFETY: a function pointer, given back as the void function
    // `vkGetDeviceProcAddr` returns.
    Some(unsafe { std::mem::transmute::<*const c_void, unsafe extern "system" fn()>(stub) })
}

/// The requirement queries `InfoRequirements::find` picks on a device
/// answering `answered` to `vkGetDeviceProcAddr`, as the names of the
/// commands a buffer and an image query then call; `None` if it finds none.
fn queries_found(answered: &[&'static CStr]) -> Option<Vec<&'static str>> {
    ANSWERED.with(|names| *names.borrow_mut() = answered.to_vec());
    QUERIED.with(|queried| queried.borrow_mut().clear());
    let instance = instance_with_proc_addr(answering_proc_addr as *const c_void);
    // SAFETY: the stubs need no live device, and read nothing they are
    // given.
    unsafe {
        let queries = InfoRequirements::find(&instance, vk::Device::null())?;
        let _ = queries.buffer(&vk::BufferCreateInfo::default());
        let _ = queries.image(&vk::ImageCreateInfo::default());
    }
    Some(QUERIED.with(|queried| queried.borrow().clone()))
}

/// `vkGetDeviceProcAddr` may answer a core command of a version above the
/// one the instance asked for (a Vulkan 1.2 instance on a 1.3 driver,
/// `VK_KHR_maintenance4` enabled), and that pointer must not be called
/// (the spec's `vkGetDeviceProcAddr` table, footnote 2): the `KHR` names,
/// which it answers only with the extension enabled, come first, and the
/// core ones serve a Vulkan 1.3 device without the extension.
#[test]
fn the_queries_are_the_khr_ones_where_the_device_answers_both_names() {
    let core = [
        c"vkGetDeviceBufferMemoryRequirements",
        c"vkGetDeviceImageMemoryRequirements",
    ];
    let khr = [
        c"vkGetDeviceBufferMemoryRequirementsKHR",
        c"vkGetDeviceImageMemoryRequirementsKHR",
    ];
    let khr_called = vec![
        "vkGetDeviceBufferMemoryRequirementsKHR",
        "vkGetDeviceImageMemoryRequirementsKHR",
    ];
    let core_called = vec![
        "vkGetDeviceBufferMemoryRequirements",
        "vkGetDeviceImageMemoryRequirements",
    ];
    assert_eq!(
        queries_found(&[core, khr].concat()),
        Some(khr_called.clone())
    );
    assert_eq!(queries_found(&khr), Some(khr_called));
    assert_eq!(queries_found(&core), Some(core_called));
    assert_eq!(queries_found(&[]), None);
    assert_eq!(queries_found(&core[..1]), None, "no image query");
}

/// Timeline waits go through `VK_KHR_timeline_semaphore`'s commands
/// wherever the device answers their names (the extension is enabled),
/// also where it answers the core names too, which under an instance of a
/// lower `apiVersion` than 1.2 it may do with pointers that must not be
/// called (the spec's `vkGetDeviceProcAddr` table, footnote 2); through
/// the core ones (ash's table) only where the `KHR` names are not
/// answered.
#[test]
fn timeline_waits_use_the_khr_commands_wherever_answered() {
    let khr_found = |answered: &[&'static CStr]| {
        ANSWERED.with(|names| *names.borrow_mut() = answered.to_vec());
        let instance = instance_with_proc_addr(answering_proc_addr as *const c_void);
        // SAFETY: the loader only looks names up; nothing is called.
        unsafe {
            let device = ash::Device::load_with(|_| std::ptr::null(), vk::Device::null());
            super::timeline_khr(&instance, &device).is_some()
        }
    };
    let core = c"vkGetSemaphoreCounterValue";
    let khr = c"vkGetSemaphoreCounterValueKHR";
    assert!(khr_found(&[core, khr]), "both answered");
    assert!(khr_found(&[khr]), "the extension alone");
    assert!(!khr_found(&[core]), "core alone");
    assert!(!khr_found(&[]), "neither");
}

/// Buffer addresses (for ring allocations' `device_address`) are read
/// through `vkGetBufferDeviceAddressKHR` wherever the device answers that
/// name, also where it answers the core name too, which under an instance
/// of a lower `apiVersion` than 1.2 it may do with a pointer that must not
/// be called (the spec's `vkGetDeviceProcAddr` table, footnote 2); through
/// the core command where only it is answered; and never without
/// `DeviceFeatures::buffer_device_address` (VUID-vkGetBufferDeviceAddress-bufferDeviceAddress-03324),
/// nor where neither name is answered: the backend then cannot tell.
#[test]
fn buffer_addresses_use_the_khr_command_wherever_answered() {
    let address_read = |answered: &[&'static CStr], enabled: bool| {
        ANSWERED.with(|names| *names.borrow_mut() = answered.to_vec());
        QUERIED.with(|queried| queried.borrow_mut().clear());
        let instance = instance_with_proc_addr(answering_proc_addr as *const c_void);
        let features = DeviceFeatures {
            buffer_device_address: enabled,
            ..DeviceFeatures::default()
        };
        let buffer = <vk::Buffer as vk::Handle>::from_raw(0x40);
        // SAFETY: the loader only looks names up; the stubs need no live
        // device and read only the structure they are given.
        let address = unsafe {
            let device = ash::Device::load_with(|_| std::ptr::null(), vk::Device::null());
            AshMemoryDevice::new(&instance, &device, vk::PhysicalDevice::null(), features)
                .buffer_device_address(buffer)
        };
        (address, QUERIED.with(|queried| queried.borrow().clone()))
    };
    let core = c"vkGetBufferDeviceAddress";
    let khr = c"vkGetBufferDeviceAddressKHR";
    let khr_called = (Some(0x2_0040), vec!["vkGetBufferDeviceAddressKHR"]);
    assert_eq!(
        address_read(&[core, khr], true),
        khr_called,
        "both answered"
    );
    assert_eq!(
        address_read(&[khr], true),
        khr_called,
        "the extension alone"
    );
    let core_called = (Some(0x1_0040), vec!["vkGetBufferDeviceAddress"]);
    assert_eq!(address_read(&[core], true), core_called, "core alone");
    assert_eq!(address_read(&[], true), (None, vec![]), "neither");
    assert_eq!(
        address_read(&[core, khr], false),
        (None, vec![]),
        "not enabled"
    );
}

mod signals;
