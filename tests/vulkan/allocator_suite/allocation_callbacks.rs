//! `AshMemoryDevice::with_allocation_callbacks` (VMA's
//! `pAllocationCallbacks`) on a real driver: every object the allocator
//! makes, frees or destroys goes through the engine's callbacks, so that an
//! engine whose own buffers and images are made with them can hand those
//! to the allocator to destroy (with none, lavapipe frees their host
//! memory with its own allocator and aborts:
//! VUID-vkDestroyBuffer-buffer-00923), and nothing the callbacks allocated
//! is left once the allocator is dropped.

use std::alloc::Layout;
use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use ash::vk;
use vk_suballoc::device::AshMemoryDevice;
use vk_suballoc::{AllocationDesc, Allocator, Config, UploadRingDesc, Usage};

use super::super::allocator_setup::{buffer_info, context_features, image_info};
use crate::support::{test_each_profile, VulkanContext};

/// What the counting callbacks saw, through their user data pointer.
#[derive(Default)]
struct HostCounter {
    /// Allocations (and reallocations) made.
    made: AtomicU64,
    /// Blocks allocated and not freed yet.
    live: AtomicI64,
}

/// Bytes before each block the callbacks return: its size and alignment,
/// for the free. At least the block's alignment, so that the block stays
/// aligned.
fn header(alignment: usize) -> usize {
    alignment.max(16)
}

/// The layout of a block of `size` bytes aligned to `alignment`, its header
/// included; `None` for one the host cannot describe.
fn layout(size: usize, alignment: usize) -> Option<Layout> {
    Layout::from_size_align(size.checked_add(header(alignment))?, header(alignment)).ok()
}

/// `PFN_vkAllocationFunction`: the system allocator, counted. Never panics
/// (it is called from the driver).
unsafe extern "system" fn allocate(
    user_data: *mut c_void,
    size: usize,
    alignment: usize,
    _scope: vk::SystemAllocationScope,
) -> *mut c_void {
    let Some(layout) = layout(size, alignment) else {
        return ptr::null_mut();
    };
    // SAFETY: a layout of non-zero size (the header).
    let base = unsafe { std::alloc::alloc(layout) };
    if base.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: the block holds the header, whose last 16 bytes (aligned to
    // 8) take the size and alignment.
    let block = unsafe {
        let block = base.add(header(alignment));
        block.cast::<usize>().sub(2).write(size);
        block.cast::<usize>().sub(1).write(alignment);
        block
    };
    // SAFETY: the user data is the test's `HostCounter`, which outlives
    // every object made with these callbacks.
    let counter = unsafe { &*user_data.cast::<HostCounter>() };
    counter.made.fetch_add(1, Ordering::Relaxed);
    counter.live.fetch_add(1, Ordering::Relaxed);
    block.cast()
}

/// `PFN_vkFreeFunction`: frees what [`allocate`] returned.
unsafe extern "system" fn free(user_data: *mut c_void, memory: *mut c_void) {
    if memory.is_null() {
        return;
    }
    // SAFETY: `memory` came from `allocate`, whose header holds its size
    // and alignment, and the layout it was allocated with.
    unsafe {
        let size = memory.cast::<usize>().sub(2).read();
        let alignment = memory.cast::<usize>().sub(1).read();
        let layout = Layout::from_size_align_unchecked(size + header(alignment), header(alignment));
        std::alloc::dealloc(memory.cast::<u8>().sub(header(alignment)), layout);
    }
    // SAFETY: as in `allocate`.
    let counter = unsafe { &*user_data.cast::<HostCounter>() };
    counter.live.fetch_sub(1, Ordering::Relaxed);
}

/// `PFN_vkReallocationFunction`: a new block, the old one's bytes copied,
/// the old one freed (Vulkan's rules for a null original and a size of 0).
unsafe extern "system" fn reallocate(
    user_data: *mut c_void,
    original: *mut c_void,
    size: usize,
    alignment: usize,
    scope: vk::SystemAllocationScope,
) -> *mut c_void {
    if original.is_null() {
        // SAFETY: the driver's arguments.
        return unsafe { allocate(user_data, size, alignment, scope) };
    }
    if size == 0 {
        // SAFETY: as above.
        unsafe { free(user_data, original) };
        return ptr::null_mut();
    }
    // SAFETY: as above.
    let moved = unsafe { allocate(user_data, size, alignment, scope) };
    if !moved.is_null() {
        // SAFETY: `original` came from `allocate`, its size in its header;
        // both blocks hold the bytes copied.
        unsafe {
            let old_size = original.cast::<usize>().sub(2).read();
            ptr::copy_nonoverlapping(
                original.cast::<u8>(),
                moved.cast::<u8>(),
                old_size.min(size),
            );
            free(user_data, original);
        }
    }
    moved
}

test_each_profile!(
    /// With the engine's callbacks, the helpers' buffers and images, an
    /// engine-made buffer handed to `destroy_buffer`, one queued with
    /// `destroy_buffer_after_frame`, an upload ring's chunk and every
    /// memory object are made and destroyed through them (no validation
    /// message: the layer checks each destruction's callbacks against the
    /// creation's), and the callbacks' blocks balance once the allocator
    /// is dropped.
    fn objects_are_made_and_destroyed_with_the_engine_s_callbacks(profile) {
        let counter = HostCounter::default();
        let callbacks = vk::AllocationCallbacks {
            p_user_data: ptr::from_ref(&counter).cast_mut().cast(),
            pfn_allocation: Some(allocate),
            pfn_reallocation: Some(reallocate),
            pfn_free: Some(free),
            ..Default::default()
        };
        let context = VulkanContext::new(profile);
        // SAFETY: as `allocator_setup`'s: the harness enables what
        // `context_features` names, and the context outlives the allocator.
        // The callbacks are valid, thread-safe (atomics and the system
        // allocator), and `counter` outlives the allocator and every object
        // made with them; each buffer and image handed to the allocator to
        // destroy is made with them below.
        let device = unsafe {
            AshMemoryDevice::new(
                &context.instance,
                &context.device,
                context.physical_device,
                context_features(&context),
            )
            .with_allocation_callbacks(callbacks)
        };
        let allocator = Allocator::new(device, Config::default()).unwrap();
        assert!(allocator.device().allocation_callbacks().is_some());
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
        let made = || counter.made.load(Ordering::Relaxed);

        // The helpers' buffer and image, and their memory.
        let before = made();
        // SAFETY: valid create infos; never used by the GPU.
        let (buffer, allocation) =
            unsafe { allocator.create_buffer(&buffer_info(64 << 10), &desc) }.unwrap();
        // SAFETY: as above.
        let (image, image_allocation) =
            unsafe { allocator.create_image(&image_info(64, 64), &desc) }.unwrap();
        assert!(made() > before, "{profile}: the driver never called the callbacks");

        // An engine's own buffer, made with the callbacks, destroyed by the
        // allocator.
        let info = buffer_info(4096);
        let callbacks = allocator.device().allocation_callbacks();
        // SAFETY: a valid create info.
        let own = unsafe { context.device.create_buffer(&info, callbacks) }.unwrap();
        // SAFETY: a live buffer of this device made with `info.usage`.
        let own_allocation = unsafe { allocator.allocate_for_buffer(own, info.usage, &desc) }.unwrap();
        // SAFETY: the memory type and offset honour its requirements.
        unsafe {
            context
                .device
                .bind_buffer_memory(own, own_allocation.memory(), own_allocation.offset())
        }
        .unwrap();

        // An upload ring's chunk buffer.
        let ring = allocator
            .create_upload_ring(&UploadRingDesc { size: 64 << 10, ..UploadRingDesc::default() })
            .unwrap();
        allocator.ring_allocate(ring, 256, 16).unwrap();

        // SAFETY: never used by the GPU; all made with the allocator's
        // callbacks.
        unsafe {
            allocator.destroy_buffer(own, own_allocation).unwrap();
            allocator.destroy_image(image, image_allocation).unwrap();
            allocator.destroy_buffer_after_frame(buffer, allocation).unwrap();
            allocator.collect_idle();
        }
        allocator.destroy_upload_ring(ring).unwrap();
        drop(allocator);
        assert_eq!(
            counter.live.load(Ordering::Relaxed),
            0,
            "{profile}: host blocks the callbacks allocated and Vulkan never freed"
        );
    }
);
