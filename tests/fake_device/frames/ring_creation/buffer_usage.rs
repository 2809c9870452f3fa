//! The buffer usages a ring takes and refuses (an empty one, an
//! extension's through the unchecked call alone, every core one), checked
//! after its size and usage, and the documented order of a ring's
//! refusals on descriptions that fail several checks at once.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Error, UploadRingDesc, Usage};

use crate::frames::finish_after_frame;
use crate::{allocator, finish};

use super::makes_nothing;

/// A ring's buffer usage reaches `vkCreateBuffer`, which refuses an empty
/// one (VUID-VkBufferCreateInfo-usage-requiredbitmask): the safe
/// `create_upload_ring` refuses it first, with nothing created.
#[test]
fn a_ring_with_no_buffer_usage_is_refused_before_anything_is_made() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let desc = UploadRingDesc {
        buffer_usage: vk::BufferUsageFlags::empty(),
        ..UploadRingDesc::default()
    };
    assert_eq!(
        allocator.create_upload_ring(&desc).map(|_| ()),
        Err(Error::InvalidConfig(
            "UploadRingDesc::buffer_usage must not be empty"
        ))
    );
    assert_eq!(device.live_resources(), 0);
    assert_eq!(device.live_allocations(), vec![]);
    finish(allocator, &device);
}

/// `create_upload_ring`'s refusal of a buffer usage beyond core Vulkan
/// 1.0's and `SHADER_DEVICE_ADDRESS`: the text names that rule, and the
/// unchecked call to use instead.
const EXTENSION_USAGE: &str =
    "UploadRingDesc::buffer_usage has a bit beyond core Vulkan 1.0's and \
     SHADER_DEVICE_ADDRESS: use create_upload_ring_unchecked for an \
     extension's usage";

/// An extension's buffer usage (a descriptor buffer's) would reach
/// `vkCreateBuffer` whether or not the extension is enabled, which the
/// allocator cannot see: the safe `create_upload_ring` refuses it, with
/// nothing created; `create_upload_ring_unchecked`, whose caller vouches
/// for it, makes the ring.
#[test]
fn a_ring_with_an_extension_s_buffer_usage_needs_the_unchecked_call() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let desc = UploadRingDesc {
        buffer_usage: vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::RESOURCE_DESCRIPTOR_BUFFER_EXT,
        ..UploadRingDesc::default()
    };
    assert_eq!(
        allocator.create_upload_ring(&desc).map(|_| ()),
        Err(Error::InvalidConfig(EXTENSION_USAGE))
    );
    assert_eq!(device.live_resources(), 0);
    assert_eq!(device.live_allocations(), vec![]);
    // SAFETY: the fake device takes any usage.
    let ring = unsafe { allocator.create_upload_ring_unchecked(&desc) }.unwrap();
    assert_eq!(device.live_resources(), 1);
    allocator.destroy_upload_ring(ring).unwrap();
    finish(allocator, &device);
}

/// Every buffer usage of core Vulkan 1.0, and `SHADER_DEVICE_ADDRESS`
/// with buffer device address, makes a ring through the safe
/// `create_upload_ring`, each alone and all together: none is taken for
/// an extension's.
#[test]
fn a_ring_takes_every_core_buffer_usage() {
    use vk::BufferUsageFlags as B;
    let (allocator, device) = allocator(FakeLayout::discrete());
    let core = [
        B::TRANSFER_SRC,
        B::TRANSFER_DST,
        B::UNIFORM_TEXEL_BUFFER,
        B::STORAGE_TEXEL_BUFFER,
        B::UNIFORM_BUFFER,
        B::STORAGE_BUFFER,
        B::INDEX_BUFFER,
        B::VERTEX_BUFFER,
        B::INDIRECT_BUFFER,
        B::SHADER_DEVICE_ADDRESS,
    ];
    let all = core.iter().fold(B::empty(), |all, &usage| all | usage);
    for buffer_usage in core.into_iter().chain([all]) {
        let desc = UploadRingDesc {
            buffer_usage,
            ..UploadRingDesc::default()
        };
        let ring = allocator.create_upload_ring(&desc);
        assert!(ring.is_ok(), "{buffer_usage:?}: {ring:?}");
        allocator.destroy_upload_ring(ring.unwrap()).unwrap();
    }
    finish_after_frame(allocator, &device);
}

/// The buffer-usage checks `create_upload_ring` gained come after its
/// older ones: a description those refused gets the same error as
/// before (`ZeroSize` for a size of 0), whatever its buffer usage. Before, an extension's
/// bit made both `InvalidConfig`, and `SHADER_DEVICE_ADDRESS` without
/// buffer device address made both `NoSuitableMemoryType`, unlike the
/// unchecked call and the allocation path, which check the size first.
#[test]
fn a_ring_s_buffer_usage_is_checked_after_its_size_and_usage() {
    let extension =
        vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::RESOURCE_DESCRIPTOR_BUFFER_EXT;
    let address =
        vk::BufferUsageFlags::UNIFORM_BUFFER | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS;
    // The mobile layout has no buffer device address.
    let (allocator, device) = allocator(FakeLayout::mobile());
    for buffer_usage in [extension, address] {
        let zero = UploadRingDesc {
            size: 0,
            buffer_usage,
            ..UploadRingDesc::default()
        };
        assert_eq!(
            allocator.create_upload_ring(&zero).map(|_| ()),
            Err(Error::ZeroSize),
            "{zero:?}"
        );
        // SAFETY: nothing is created for this description.
        let unchecked = unsafe { allocator.create_upload_ring_unchecked(&zero) };
        assert_eq!(unchecked.map(|_| ()), Err(Error::ZeroSize), "{zero:?}");
    }
    // Host-visible and sized: the buffer usage decides.
    let desc = |buffer_usage| UploadRingDesc {
        buffer_usage,
        ..UploadRingDesc::default()
    };
    assert_eq!(
        allocator.create_upload_ring(&desc(extension)).map(|_| ()),
        Err(Error::InvalidConfig(EXTENSION_USAGE))
    );
    let no_address = Err(Error::DeviceAddressNotEnabled);
    assert_eq!(
        allocator.create_upload_ring(&desc(address)).map(|_| ()),
        no_address
    );
    // SAFETY: refused before the buffer is made.
    let unchecked = unsafe { allocator.create_upload_ring_unchecked(&desc(address)) };
    assert_eq!(unchecked.map(|_| ()), no_address);
    assert_eq!(device.live_resources(), 0);
    assert_eq!(device.live_allocations(), vec![]);
    finish(allocator, &device);
}

/// `create_upload_ring_unchecked`'s documented order, and
/// `create_upload_ring`'s (its own check between the empty buffer usage
/// and required flags), on descriptions that fail several checks at once:
/// a size of 0 first, then an empty buffer usage, then a least alignment
/// that is no power of two, then (safe call) an
/// extension's bit, then required flags
/// no memory type has, then `SHADER_DEVICE_ADDRESS` without buffer device
/// address.
#[test]
fn a_ring_s_refusals_come_in_the_documented_order() {
    let extension = vk::BufferUsageFlags::RESOURCE_DESCRIPTOR_BUFFER_EXT;
    let address = vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS;
    let empty_usage = Error::InvalidConfig("UploadRingDesc::buffer_usage must not be empty");
    // The mobile layout has no buffer device address.
    let (allocator, device) = allocator(FakeLayout::mobile());
    let no_address = Error::DeviceAddressNotEnabled;
    let desc = |size, usage, buffer_usage| UploadRingDesc {
        size,
        usage,
        buffer_usage,
        ..UploadRingDesc::default()
    };
    let host = UploadRingDesc::default().usage;
    let empty = vk::BufferUsageFlags::empty();
    let nowhere = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::LAZILY_ALLOCATED;
    let missing = Error::MissingRequiredFlags {
        memory_type_bits: 0b1111,
        required: nowhere,
    };
    let unseen = Usage::DEVICE_LOCAL;
    // (description, the safe call's error, the unchecked call's)
    let odd_alignment = |desc: UploadRingDesc<'static>| UploadRingDesc {
        min_alignment: 3,
        ..desc
    };
    for (desc, safe, unchecked) in [
        (desc(0, unseen, empty), Error::ZeroSize, Error::ZeroSize),
        (desc(4096, unseen, empty), empty_usage, empty_usage),
        (
            odd_alignment(desc(4096, unseen, empty)),
            empty_usage,
            empty_usage,
        ),
        (
            odd_alignment(desc(4096, host, extension | address)),
            Error::AlignmentNotPowerOfTwo(3),
            Error::AlignmentNotPowerOfTwo(3),
        ),
        (
            desc(4096, host, extension | address),
            Error::InvalidConfig(
                "UploadRingDesc::buffer_usage has a bit beyond core Vulkan 1.0's and \
                 SHADER_DEVICE_ADDRESS: use create_upload_ring_unchecked for an \
                 extension's usage",
            ),
            no_address,
        ),
        // Required flags no type has, before device addresses.
        (
            UploadRingDesc {
                required_flags: nowhere,
                ..desc(4096, host, address)
            },
            missing,
            missing,
        ),
    ] {
        assert_eq!(
            allocator.create_upload_ring(&desc).map(|_| ()),
            Err(safe),
            "{desc:?}"
        );
        // SAFETY: every one of these is refused before a buffer is made.
        let result = unsafe { allocator.create_upload_ring_unchecked(&desc) };
        assert_eq!(result.map(|_| ()), Err(unchecked), "{desc:?}");
    }
    // Required flags only a type no ring takes has (the lazily allocated
    // one): refused after device addresses, before the buffer is made.
    let lazy = UploadRingDesc {
        required_flags: vk::MemoryPropertyFlags::LAZILY_ALLOCATED,
        ..UploadRingDesc::default()
    };
    let unsuitable = Error::NoSuitableMemoryType {
        memory_type_bits: 0b1000,
        usage: host,
    };
    assert!(makes_nothing(&device, || {
        assert_eq!(
            allocator.create_upload_ring(&lazy).map(|_| ()),
            Err(unsuitable)
        );
        // SAFETY: refused before a buffer is made.
        let result = unsafe { allocator.create_upload_ring_unchecked(&lazy) };
        assert_eq!(result.map(|_| ()), Err(unsuitable));
    }));
    let lazy_address = UploadRingDesc {
        buffer_usage: address,
        ..lazy
    };
    assert_eq!(
        allocator.create_upload_ring(&lazy_address).map(|_| ()),
        Err(no_address)
    );
    assert_eq!(device.live_resources(), 0);
    assert_eq!(device.live_allocations(), vec![]);
    finish(allocator, &device);
}
