//! vulkano 0.34's allocator as a peer: its `StandardMemoryAllocator` on the
//! bench's device, and its `FreeListAllocator` and `BuddyAllocator` as bare
//! cores.
//!
//! | row | call | set-up |
//! |---|---|---|
//! | vulkano | `MemoryAllocator::allocate(MemoryRequirements, AllocationType, AllocationCreateInfo, None)` / `deallocate` | `StandardMemoryAllocator::new_default` (a `FreeListAllocator` per 256 MiB block); a lock per memory type on every call, which vulkano has no way around |
//! | core: vulkano `FreeListAllocator` | `Suballocator::allocate(DeviceLayout, AllocationType, granularity)` / `deallocate` | one 4 GiB region, no Vulkan, no lock |
//! | core: vulkano `BuddyAllocator` | the same | the same |
//!
//! vulkano is built on ash 0.37 and loads its own function tables, so it
//! gets its own `Instance` and `Device` objects over the bench's `VkInstance`
//! and `VkDevice` (`from_handle`), through a [`Loader`] that forwards to the
//! bench's Vulkan loader but answers `vkGetDeviceProcAddr` with
//! [`vulkan::counted_get_device_proc_addr`]: vulkano's `vkAllocateMemory` and
//! `vkFreeMemory` are the counting hooks every other allocator calls. The
//! handles cross between the two ash versions as raw integers.
//!
//! The cores are given the resource kind (`Linear` for buffers, `NonLinear`
//! for optimal images) and the device's `bufferImageGranularity`, as
//! vulkano's allocator gives them; our core and offset-allocator's row know
//! nothing of granularity.

use std::ffi::c_char;
use std::sync::{Arc, OnceLock};

use ash::vk;
use vulkano::device::physical::PhysicalDevice;
use vulkano::device::{Device, DeviceCreateInfo, DeviceOwned, QueueCreateInfo};
use vulkano::instance::{Instance, InstanceCreateInfo, InstanceExtensions};
use vulkano::library::Loader;
use vulkano::memory::allocator::suballocator::Region;
use vulkano::memory::allocator::{
    AllocationCreateInfo, AllocationType, DeviceLayout, MemoryAlloc, MemoryAllocator,
    MemoryTypeFilter, StandardMemoryAllocator, Suballocation, Suballocator,
};
use vulkano::memory::{DeviceAlignment, MemoryRequirements};
use vulkano::{Version, VulkanLibrary, VulkanObject};

use crate::backends::{Backend, CORE_CAPACITY};
use crate::trace::{Kind, MemUse, Req};
use crate::vulkan::{self, VulkanContext};

/// ash 0.37's `VkInstance`, as vulkano names it.
type Vk037Instance = <Instance as VulkanObject>::Handle;

/// vulkano's allocation type for a trace request's resource: buffers are
/// linear, the traces' images optimal-tiling.
#[inline]
fn allocation_type(kind: Kind) -> AllocationType {
    match kind {
        Kind::Buffer => AllocationType::Linear,
        Kind::Image => AllocationType::NonLinear,
    }
}

/// The request's size and alignment (Vulkan reports a power of two).
#[inline]
fn layout(req: &Req) -> Option<DeviceLayout> {
    DeviceLayout::from_size_alignment(req.requirements.size, req.requirements.alignment)
}

// ------------------------------------------------------------ the Vulkan peer

/// vulkano's view of the bench's Vulkan loader: every lookup is the
/// loader's own, but `vkGetDeviceProcAddr` is the bench's counting one.
struct CountedLoader {
    get_instance_proc_addr: vk::PFN_vkGetInstanceProcAddr,
}

// SAFETY: the returned functions are the system loader's (kept loaded by
// the context's `ash::Entry`, which outlives every allocator) or the bench's
// own, which forwards to them.
unsafe impl Loader for CountedLoader {
    unsafe fn get_instance_proc_addr(
        &self,
        instance: Vk037Instance,
        name: *const c_char,
    ) -> vk::PFN_vkVoidFunction {
        // SAFETY: a NUL-terminated name (vulkano's literals).
        if unsafe { std::ffi::CStr::from_ptr(name) } == c"vkGetDeviceProcAddr" {
            let hook: vk::PFN_vkGetDeviceProcAddr = vulkan::counted_get_device_proc_addr;
            // SAFETY: a function pointer handed out as the void function
            // type; vulkano casts it back to `PFN_vkGetDeviceProcAddr`.
            return unsafe {
                std::mem::transmute::<vk::PFN_vkGetDeviceProcAddr, vk::PFN_vkVoidFunction>(hook)
            };
        }
        let instance = <vk::Instance as vk::Handle>::from_raw(vulkano::Handle::as_raw(instance));
        // SAFETY: the loader's own `vkGetInstanceProcAddr`, same arguments.
        unsafe { (self.get_instance_proc_addr)(instance, name) }
    }
}

/// vulkano's `Device` over the context's `VkDevice`, made once per process
/// (the bench opens one context). It is never dropped: vulkano's `Drop` for
/// `Device` and `Instance` would destroy the bench's own handles.
static DEVICE: OnceLock<(u64, Arc<Device>)> = OnceLock::new();

fn vulkano_device(ctx: &VulkanContext) -> Arc<Device> {
    let raw_device = vk::Handle::as_raw(ctx.device.handle());
    let (raw, device) = DEVICE.get_or_init(|| (raw_device, wrap_device(ctx)));
    assert_eq!(*raw, raw_device, "one Vulkan context per process");
    device.clone()
}

fn wrap_device(ctx: &VulkanContext) -> Arc<Device> {
    let loader = CountedLoader {
        get_instance_proc_addr: ctx.entry().static_fn().get_instance_proc_addr,
    };
    let library = VulkanLibrary::with_loader(loader).expect("vulkano: the Vulkan loader");
    // What the context created the instance with (vulkan.rs).
    let mut instance_info = InstanceCreateInfo {
        max_api_version: Some(Version::V1_3),
        ..Default::default()
    };
    if ctx.validation {
        instance_info.enabled_layers = vec!["VK_LAYER_KHRONOS_validation".to_owned()];
        instance_info.enabled_extensions = InstanceExtensions {
            ext_debug_utils: true,
            ..InstanceExtensions::empty()
        };
    }
    // SAFETY: the context's instance, made through the same loader with
    // this create info; never destroyed through vulkano (see `DEVICE`).
    let instance = unsafe {
        Instance::from_handle(
            library,
            vulkano::Handle::from_raw(vk::Handle::as_raw(ctx.instance.handle())),
            instance_info,
        )
    };
    let wanted = vk::Handle::as_raw(ctx.physical_device);
    let physical: Arc<PhysicalDevice> = instance
        .enumerate_physical_devices()
        .expect("vulkano: vkEnumeratePhysicalDevices")
        .find(|p| vulkano::Handle::as_raw(p.handle()) == wanted)
        .expect("vulkano sees the context's physical device");
    // What the context created the device with: one queue of family 0, no
    // extension, no feature but timeline semaphores where the device has
    // them.
    let device_info = DeviceCreateInfo {
        queue_create_infos: vec![QueueCreateInfo {
            queue_family_index: 0,
            queues: vec![1.0],
            ..Default::default()
        }],
        enabled_features: vulkano::device::Features {
            timeline_semaphore: ctx.timeline_semaphore,
            ..vulkano::device::Features::empty()
        },
        ..Default::default()
    };
    // SAFETY: the context's device, made from this physical device with
    // that create info; never destroyed through vulkano (see `DEVICE`).
    let (device, _queues) = unsafe {
        Device::from_handle(
            physical,
            vulkano::Handle::from_raw(vk::Handle::as_raw(ctx.device.handle())),
            device_info,
        )
    };
    device
}

/// vulkano's `StandardMemoryAllocator`, called through `MemoryAllocator`.
pub struct Vulkano {
    allocator: StandardMemoryAllocator,
    device_local: AllocationCreateInfo,
    upload: AllocationCreateInfo,
}

impl Vulkano {
    pub fn new(ctx: &VulkanContext) -> Self {
        let allocator = StandardMemoryAllocator::new_default(vulkano_device(ctx));
        let device_local = AllocationCreateInfo {
            memory_type_filter: MemoryTypeFilter::PREFER_DEVICE,
            ..Default::default()
        };
        // vulkano's documented filter for uploads (every host-visible
        // block is mapped at creation, as the other allocators map them).
        let upload = AllocationCreateInfo {
            memory_type_filter: MemoryTypeFilter::PREFER_DEVICE
                | MemoryTypeFilter::HOST_SEQUENTIAL_WRITE,
            ..Default::default()
        };
        Self {
            allocator,
            device_local,
            upload,
        }
    }
}

impl Backend for Vulkano {
    type Handle = MemoryAlloc;

    #[inline]
    fn allocate(&mut self, req: &Req) -> Option<Self::Handle> {
        let create_info = match req.usage {
            MemUse::DeviceLocal => &self.device_local,
            MemUse::Upload => &self.upload,
        };
        // No dedicated hint, as the other allocators get none.
        let requirements = MemoryRequirements {
            layout: layout(req)?,
            memory_type_bits: req.requirements.memory_type_bits,
            prefers_dedicated_allocation: false,
            requires_dedicated_allocation: false,
        };
        self.allocator
            .allocate(
                requirements,
                allocation_type(req.kind),
                create_info.clone(),
                None,
            )
            .ok()
    }

    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        // SAFETY: a live allocation of this allocator, unused by the GPU.
        unsafe { self.allocator.deallocate(handle) };
    }

    fn placement(&self, handle: &Self::Handle) -> (vk::DeviceMemory, u64) {
        let memory = vulkano::Handle::as_raw(handle.device_memory.handle());
        let offset = handle.suballocation.map_or(0, |s| s.offset);
        (vk::Handle::from_raw(memory), offset)
    }

    /// vulkano's own count of the `DeviceMemory` objects alive on its
    /// device: only this allocator's, as the previous ones were dropped.
    fn own_memory_objects(&self) -> Option<u64> {
        Some(u64::from(self.allocator.device().allocation_count()))
    }
}

// ---------------------------------------------------------------------- cores

/// A vulkano suballocator (`FreeListAllocator`, `BuddyAllocator`) over one
/// 4 GiB region.
pub struct VulkanoCore<S> {
    core: S,
    granularity: DeviceAlignment,
}

impl<S: Suballocator> VulkanoCore<S> {
    /// `granularity`: the device's `bufferImageGranularity`.
    pub fn new(granularity: u64) -> Self {
        Self {
            core: S::new(Region::new(0, CORE_CAPACITY).expect("a 4 GiB region")),
            granularity: DeviceAlignment::new(granularity.max(1))
                .expect("bufferImageGranularity is a power of two"),
        }
    }
}

impl<S: Suballocator> Backend for VulkanoCore<S> {
    type Handle = Suballocation;

    /// The request's exact size and alignment, as vulkano's allocator
    /// passes them to the suballocator of a block.
    #[inline]
    fn allocate(&mut self, req: &Req) -> Option<Self::Handle> {
        self.core
            .allocate(layout(req)?, allocation_type(req.kind), self.granularity)
            .ok()
    }

    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        // SAFETY: a live suballocation of this suballocator.
        unsafe { self.core.deallocate(handle) };
    }

    fn placement(&self, handle: &Self::Handle) -> (vk::DeviceMemory, u64) {
        (vk::DeviceMemory::null(), handle.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::Which;
    use vulkano::memory::allocator::{BuddyAllocator, FreeListAllocator};

    fn req(size: u64, alignment: u64, kind: Kind) -> Req {
        Req::device_local(size, alignment, kind)
    }

    /// A buffer and an optimal image placed one after the other never share
    /// a granularity page: the cores are told the kinds and the granularity.
    fn kinds_do_not_share_a_page<S: Suballocator>() {
        let mut core = VulkanoCore::<S>::new(1024);
        let buffer = core.allocate(&req(100, 16, Kind::Buffer)).unwrap();
        let image = core.allocate(&req(100, 16, Kind::Image)).unwrap();
        let (_, b) = core.placement(&buffer);
        let (_, i) = core.placement(&image);
        assert!(
            b / 1024 != i / 1024 && (b + 99) / 1024 != i / 1024,
            "{b} {i}"
        );
        core.free(buffer);
        core.free(image);
    }

    #[test]
    fn the_free_list_core_honours_the_granularity() {
        kinds_do_not_share_a_page::<FreeListAllocator>();
    }

    #[test]
    fn the_buddy_core_honours_the_granularity() {
        kinds_do_not_share_a_page::<BuddyAllocator>();
    }

    /// What the READMEs say of vulkano 0.34: its `FreeListAllocator` checks
    /// the range before a new allocation for a granularity conflict, not
    /// the one after. A buffer put in the gap an image left before another
    /// image ends on that image's page. If a vulkano update fixes this, the
    /// test fails and the READMEs' sentence goes.
    #[test]
    fn vulkanos_free_list_overlooks_the_following_range_for_granularity() {
        let mut core = VulkanoCore::<FreeListAllocator>::new(1024);
        let first = core.allocate(&req(1000, 16, Kind::Buffer)).unwrap();
        let gap = core.allocate(&req(100, 16, Kind::Image)).unwrap();
        let image = core.allocate(&req(100, 16, Kind::Image)).unwrap();
        assert_eq!((first.offset, gap.offset, image.offset), (0, 1024, 1136));
        core.free(gap);
        let buffer = core.allocate(&req(100, 16, Kind::Buffer)).unwrap();
        assert_eq!(buffer.offset, 1008);
        let last_byte = buffer.offset + 99;
        assert_eq!(last_byte / 1024, image.offset / 1024, "one page, two kinds");
    }

    #[test]
    fn vulkano_is_a_peer_and_its_suballocators_are_cores() {
        assert!(Which::Vulkano.is_peer());
        for core in [Which::VulkanoFreeListCore, Which::VulkanoBuddyCore] {
            assert!(!core.is_vulkan());
            assert_eq!(Which::parse(core.key()), Some(core));
        }
        assert_eq!(Which::parse("vulkano"), Some(Which::Vulkano));
    }
}
