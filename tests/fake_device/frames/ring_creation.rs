//! Creating an upload ring: GPU-only rings (a usage without host access),
//! the descriptions refused (an empty buffer usage or an extension's, required flags no memory
//! type has, device addresses without buffer device address, a size past
//! every heap or past one memory object), in the documented order and with
//! nothing left behind, the buffer usages a ring takes, and the memory
//! types its required and preferred flags give its chunks.

use ash::vk;
use gpu_alloc_types::MemoryHeap;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::device::{MemoryPropertyFlags as Props, MemoryType};
use vk_suballoc::{DedicatedPolicy, Error, UploadRingDesc, Usage};

use super::super::{allocator, buffer, finish};

use super::{end_frame, finish_after_frame};

/// A ring whose usage has no host access is per-frame GPU scratch: made on
/// every device, its chunk in a device-local type (VRAM the host cannot
/// see on the discrete layout, or the other layouts' device-local-only
/// types, where its allocations have no pointer and
/// `ring_write` and `ring_flush` fail with `NotHostVisible`, changing
/// nothing; memory the host sees and maps on the others, written as any
/// ring), its space handed out by frame and taken back at `collect`.
/// Before, such a ring was refused with `NotHostVisible`.
#[test]
fn a_gpu_only_ring_is_scratch_in_device_local_memory() {
    let layouts = [
        FakeLayout::discrete(),
        FakeLayout::integrated(),
        FakeLayout::mobile(),
        FakeLayout::lavapipe(),
    ];
    for layout in layouts {
        let name = layout.name;
        let types = layout.memory_types.clone();
        let (allocator, device) = allocator(layout);
        for usage in [Usage::DEVICE_LOCAL, Usage::TRANSIENT, Usage::default()] {
            let desc = UploadRingDesc {
                size: 4096,
                usage,
                ..UploadRingDesc::default()
            };
            let before = allocator.stats();
            let ring = allocator.create_upload_ring(&desc).unwrap();
            let after = allocator.stats();
            let chunk_type = (0..types.len())
                .find(|&t| after.memory_types[t] != before.memory_types[t])
                .unwrap();
            let props = types[chunk_type].props;
            assert!(
                props.contains(Props::DEVICE_LOCAL),
                "{name}: {usage:?} {props:?}"
            );
            let host = props.contains(Props::HOST_VISIBLE);
            // VRAM the host cannot see on the discrete layout (and the
            // device-local-only types of the integrated and mobile ones);
            // lavapipe's one type, which the host sees.
            match name {
                "discrete" => assert!(!host, "{name}: {usage:?} {props:?}"),
                "lavapipe" => assert!(host, "{name}: {usage:?} {props:?}"),
                _ => {}
            }
            let first = allocator.ring_allocate(ring, 1000, 256).unwrap();
            assert_eq!((first.buffer_offset(), first.size()), (0, 1000));
            assert_eq!(first.mapped_ptr().is_some(), host, "{name}: {usage:?}");
            let written = allocator.ring_write(&first, 0, &[7; 1000]);
            let flushed = allocator.ring_flush(&first, ..);
            if host {
                assert_eq!((written, flushed), (Ok(()), Ok(())), "{name}");
            } else {
                let refused = Err(Error::NotHostVisible);
                assert_eq!((written, flushed), (refused, refused), "{name}");
                assert_eq!(allocator.ring_flush(&first, 0..0), refused, "{name}");
                // After the range's check, as `flush`'s order has it.
                let past = Err(Error::RangeOutOfBounds {
                    start: 2000,
                    end: 2001,
                    size: 1000,
                });
                assert_eq!(allocator.ring_write(&first, 2000, &[1]), past);
            }
            // Bump allocation in the frame; the frame's space comes back
            // once its fence signals, and the ring's next frame reaches it.
            let second = allocator.ring_allocate(ring, 3000, 1).unwrap();
            assert_eq!(second.buffer_offset(), 1000, "{name}");
            assert_eq!(
                allocator.ring_allocate(ring, 100, 1).map(|_| ()),
                Err(Error::UploadRingFull {
                    size: 100,
                    free: 96
                }),
                "{name}"
            );
            device.signal_fence(end_frame(&allocator, &device));
            allocator.collect().unwrap();
            let reused = allocator.ring_allocate(ring, 4000, 1).unwrap();
            assert_eq!(reused.buffer(), first.buffer(), "{name}");
            allocator.destroy_upload_ring(ring).unwrap();
        }
        finish_after_frame(allocator, &device);
    }
}

/// A growing ring of `UPLOAD | ALLOW_TRANSFER_INSTEAD` has its memory type
/// chosen for each chunk: on the discrete layout its first chunks are
/// mapped (host-visible memory first) and later ones unmapped VRAM, so whether an allocation has a
/// `mapped_ptr`, and `ring_write` takes it, goes by allocation, not by
/// ring. A write into an unmapped allocation whose frame was collected
/// gets `NotHostVisible`, before `StaleAllocation`, as the docs order them.
#[test]
fn a_transfer_instead_ring_may_mix_mapped_and_unmapped_chunks() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let desc = UploadRingDesc {
        size: 64 << 20,
        usage: Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD,
        grow: true,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    let mut taken = Vec::new();
    while !taken
        .iter()
        .any(|a: &vk_suballoc::RingAllocation| a.mapped_ptr().is_none())
    {
        assert!(taken.len() < 200, "never reached unmapped memory");
        taken.push(allocator.ring_allocate(ring, 60 << 20, 256).unwrap());
    }
    let mapped = taken[0];
    let unmapped = *taken.last().unwrap();
    assert!(mapped.mapped_ptr().is_some());
    assert_eq!(allocator.ring_write(&mapped, 0, &[1; 16]), Ok(()));
    assert_eq!(
        allocator.ring_write(&unmapped, 0, &[1; 16]),
        Err(Error::NotHostVisible)
    );
    device.signal_fence(end_frame(&allocator, &device));
    allocator.collect().unwrap();
    assert_eq!(
        allocator.ring_write(&mapped, 0, &[1; 16]),
        Err(Error::StaleAllocation)
    );
    assert_eq!(
        allocator.ring_write(&unmapped, 0, &[1; 16]),
        Err(Error::NotHostVisible)
    );
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}

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

/// A device whose host-visible memory is all in heaps of 0 bytes (the
/// discrete layout with its system heap and BAR window emptied): no type
/// suits a ring, which is refused before its buffer is made with
/// `NoSuitableMemoryType` naming the device's types (as `memory_type_for`
/// names those it was given), not all 32 bits of a type mask.
#[test]
fn a_ring_on_a_device_whose_host_heaps_are_empty_names_the_device_s_types() {
    let layout = FakeLayout::discrete()
        .with_heap_size(1, 0)
        .with_heap_size(2, 0);
    let (allocator, device) = allocator(layout);
    let desc = UploadRingDesc::default();
    let unsuitable = Error::NoSuitableMemoryType {
        memory_type_bits: 0b1_1111,
        usage: desc.usage,
    };
    assert!(makes_nothing(&device, || assert_eq!(
        allocator.create_upload_ring(&desc).map(|_| ()),
        Err(unsuitable)
    )));
    assert_eq!(
        allocator.memory_type_for(0b1_1111, desc.usage),
        Err(unsuitable)
    );
    finish(allocator, &device);
}

/// A ring requiring `PROTECTED` memory, on a device with a protected type:
/// no ring takes one (the host cannot see protected memory), so the ring
/// is refused before its buffer is made, with `NoSuitableMemoryType`
/// naming that type when the device's `protectedMemory` feature is on
/// (the type is usable, by custom pools alone), and with
/// `MissingRequiredFlags` when it is off (the allocator then uses no
/// protected type: none has the flag). Nothing is made either way.
#[test]
fn a_ring_requiring_protected_memory_is_refused_before_its_buffer() {
    const PROTECTED: u32 = 5;
    let mut layout = FakeLayout::discrete();
    layout.memory_types.push(MemoryType {
        heap: 0,
        props: Props::DEVICE_LOCAL | Props::PROTECTED,
    });
    let desc = UploadRingDesc {
        required_flags: vk::MemoryPropertyFlags::PROTECTED,
        ..UploadRingDesc::default()
    };
    for (feature, expected) in [
        (
            true,
            Error::NoSuitableMemoryType {
                memory_type_bits: 1 << PROTECTED,
                usage: desc.usage,
            },
        ),
        (
            false,
            Error::MissingRequiredFlags {
                memory_type_bits: 0b1_1111,
                required: vk::MemoryPropertyFlags::PROTECTED,
            },
        ),
    ] {
        let (allocator, device) = allocator(layout.clone().with_protected_memory(feature));
        assert!(makes_nothing(&device, || {
            assert_eq!(
                allocator.create_upload_ring(&desc).map(|_| ()),
                Err(expected),
                "protectedMemory {feature}"
            );
            // SAFETY: refused before a buffer is made.
            let result = unsafe { allocator.create_upload_ring_unchecked(&desc) };
            assert_eq!(
                result.map(|_| ()),
                Err(expected),
                "protectedMemory {feature}"
            );
        }));
        assert_eq!(device.counters().allocate_calls, 0);
        assert_eq!(device.live_allocations(), vec![]);
        finish(allocator, &device);
    }
}

/// A ring whose buffers take their device address (`SHADER_DEVICE_ADDRESS`
/// usage) needs memory allocated for it
/// (VUID-vkBindBufferMemory-bufferDeviceAddress-03339), as `create_buffer`
/// asks for: without buffer device address the ring is refused, as such a
/// buffer is, and nothing is left behind; with it, the ring works.
#[test]
fn a_device_address_ring_needs_buffer_device_address() {
    let desc = UploadRingDesc {
        buffer_usage: vk::BufferUsageFlags::UNIFORM_BUFFER
            | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
        grow: true,
        ..UploadRingDesc::default()
    };
    // The mobile layout has no buffer device address.
    let (allocator, device) = allocator(FakeLayout::mobile());
    let before = allocator.stats();
    assert_eq!(
        allocator.create_upload_ring(&desc).map(|_| ()),
        Err(Error::DeviceAddressNotEnabled)
    );
    assert_eq!(allocator.stats(), before);
    assert_eq!(device.live_resources(), 0);
    finish(allocator, &device);

    let (allocator, device) = super::super::allocator(FakeLayout::discrete());
    let ring = allocator.create_upload_ring(&desc).unwrap();
    // A second chunk, made by growth, is allocated for addresses too.
    allocator.ring_allocate(ring, desc.size, 256).unwrap();
    let grown = allocator.ring_allocate(ring, 256, 256).unwrap();
    allocator.ring_write(&grown, 0, &[1; 256]).unwrap();
    let chunks: Vec<_> = device.live_allocations();
    assert!(!chunks.is_empty() && chunks.iter().all(|m| m.device_address));
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}

/// A ring allocation of a ring whose buffers take their device address
/// carries it: its chunk's buffer's address (read once, when the chunk
/// was made and bound) plus its offset in the buffer, which is the address
/// of its byte in the memory object: the memory object's address plus its
/// `memory_offset`, in the first chunk and in one a growing ring added.
/// A ring of other usages has none, and asks the device for none (the
/// fake device reports a query for a buffer without
/// `SHADER_DEVICE_ADDRESS`, or before its bind, as a violation).
#[test]
fn ring_allocations_carry_their_device_address() {
    for layout in [FakeLayout::discrete(), FakeLayout::integrated()] {
        let name = layout.name;
        let (allocator, device) = allocator(layout);
        let desc = UploadRingDesc {
            size: 64 << 10,
            usage: Usage::DEVICE_LOCAL,
            buffer_usage: vk::BufferUsageFlags::STORAGE_BUFFER
                | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
            grow: true,
            ..UploadRingDesc::default()
        };
        let ring = allocator.create_upload_ring(&desc).unwrap();
        let mut allocations = Vec::new();
        for (size, align) in [(100, 4), (4000, 256), (60 << 10, 1024), (300, 64)] {
            allocations.push(allocator.ring_allocate(ring, size, align).unwrap());
        }
        let chunks: std::collections::HashSet<_> = allocations.iter().map(|a| a.buffer()).collect();
        assert_eq!(chunks.len(), 2, "{name}: the ring grew");
        for allocation in &allocations {
            let memory = device.memory_address(allocation.memory()).unwrap();
            assert_eq!(
                allocation.device_address(),
                Some(memory + allocation.memory_offset()),
                "{name}: {allocation:?}"
            );
        }
        let plain = allocator
            .create_upload_ring(&UploadRingDesc {
                buffer_usage: vk::BufferUsageFlags::STORAGE_BUFFER,
                ..desc
            })
            .unwrap();
        let without = allocator.ring_allocate(plain, 100, 4).unwrap();
        assert_eq!(without.device_address(), None, "{name}");
        allocator.destroy_upload_ring(ring).unwrap();
        allocator.destroy_upload_ring(plain).unwrap();
        finish_after_frame(allocator, &device);
    }
}

/// A ring larger than any heap is refused as too large, never as a
/// shortage that freeing could cure: 2^40 bytes (which a linear allocator
/// could manage) and 2^50 (which it could not) alike, and a growing ring
/// asked for `u64::MAX` bytes. Nothing is left behind.
#[test]
fn a_ring_larger_than_any_heap_is_refused_as_too_large() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let largest_heap = device
        .layout()
        .memory_heaps
        .iter()
        .map(|h| h.size)
        .max()
        .unwrap();
    for size in [1u64 << 40, 1 << 50] {
        let desc = UploadRingDesc {
            size,
            ..UploadRingDesc::default()
        };
        assert!(
            makes_nothing(&device, || assert!(
                matches!(
                    allocator.create_upload_ring(&desc).map(|_| ()),
                    Err(Error::SizeExceedsHeaps { size: s, largest_heap: _ }) if s >= size
                ),
                "{size}"
            )),
            "{size}: a buffer was made"
        );
    }
    for size in [largest_heap + 1, u64::MAX] {
        let expected = Error::SizeExceedsHeaps { size, largest_heap };
        a_growing_ring_refuses(&allocator, &device, size, expected);
    }
    finish_after_frame(allocator, &device);
}

/// A ring past what a linear allocator manages (2^48 bytes) in a heap
/// larger still is refused as past what one memory object may be
/// (`maxMemoryAllocationSize` here), not as larger than every heap: also a
/// ring exactly the heap's size. One larger than the heap is refused as
/// such. Nothing is left behind.
#[test]
fn a_ring_too_large_for_one_memory_object_in_a_larger_heap_is_refused_as_such() {
    let heap = 1u64 << 50;
    let (allocator, device) = allocator(FakeLayout::discrete().with_heap_sizes(heap));
    let max = device.layout().max_memory_allocation_size;
    assert!(max < 1 << 48);
    for size in [(1u64 << 48) + 1, heap] {
        let desc = UploadRingDesc {
            size,
            ..UploadRingDesc::default()
        };
        assert_eq!(
            allocator.create_upload_ring(&desc).map(|_| ()),
            Err(Error::SizeExceedsMaxAllocation { size, max }),
            "{size}"
        );
    }
    let desc = UploadRingDesc {
        size: heap + 1,
        ..UploadRingDesc::default()
    };
    assert_eq!(
        allocator.create_upload_ring(&desc).map(|_| ()),
        Err(Error::SizeExceedsHeaps {
            size: heap + 1,
            largest_heap: heap
        })
    );
    finish_after_frame(allocator, &device);
}

/// A ring larger than the heap of every memory type a ring can use (those
/// the host sees), though smaller than a heap it cannot use, is refused
/// before its buffer is made, as the allocation path says it: 20 GiB on a
/// discrete GPU with 24 GiB of VRAM the host cannot see and a 16 GiB
/// system heap, where one memory object may be as large as any heap. A
/// buffer that size may pass the device's `maxBufferSize`. So is a growing
/// ring's new chunk that size.
#[test]
fn a_ring_larger_than_every_heap_the_host_sees_makes_no_buffer() {
    let mut layout = FakeLayout::discrete().with_heap_size(0, 24 << 30);
    layout.max_memory_allocation_size = 1 << 40;
    let (allocator, device) = allocator(layout);
    let (size, largest_heap) = (20u64 << 30, 16u64 << 30);
    assert_eq!(device.layout().memory_heaps[1].size, largest_heap);
    let desc = UploadRingDesc {
        size,
        ..UploadRingDesc::default()
    };
    assert!(
        makes_nothing(&device, || assert_eq!(
            allocator.create_upload_ring(&desc).map(|_| ()),
            Err(Error::SizeExceedsHeaps { size, largest_heap })
        )),
        "a buffer was made"
    );
    let expected = Error::SizeExceedsHeaps { size, largest_heap };
    a_growing_ring_refuses(&allocator, &device, size, expected);
    finish_after_frame(allocator, &device);
}

/// The heaps a ring can use are those of the memory types the allocator
/// may use: AMD's device-coherent types, ranked for a ring's usage but
/// never used without `deviceCoherentMemory`, do not count. Here their
/// host-visible ones are in a 32 GiB heap of their own, and a 20 GiB ring
/// is larger than every other heap the host sees (16 GiB): it is refused
/// before its buffer is made, naming the 16 GiB heap, as the allocation
/// path would. Counting the device-coherent types made its 20 GiB buffer
/// first.
#[test]
fn a_ring_larger_than_the_usable_heaps_makes_no_buffer_on_amd() {
    let mut layout = FakeLayout::amd();
    layout.memory_heaps.push(MemoryHeap { size: 32 << 30 });
    // Types 5 and 7 are the device-coherent duplicates of the host-visible
    // types 1 and 3 (heap 1).
    for memory_type in [5, 7] {
        layout.memory_types[memory_type].heap = 3;
    }
    layout.max_memory_allocation_size = 1 << 40;
    let (allocator, device) = allocator(layout);
    let (size, largest_heap) = (20u64 << 30, 16u64 << 30);
    let desc = UploadRingDesc {
        size,
        ..UploadRingDesc::default()
    };
    assert!(
        makes_nothing(&device, || assert_eq!(
            allocator.create_upload_ring(&desc).map(|_| ()),
            Err(Error::SizeExceedsHeaps { size, largest_heap })
        )),
        "a buffer was made"
    );
    finish(allocator, &device);
}

/// The size checks refuse only what is past their limits: a ring exactly
/// the size of the one heap it can use, which is exactly
/// `maxMemoryAllocationSize` too, is made, and holds the whole heap. One a
/// byte past `maxMemoryAllocationSize` in a heap twice that size is refused
/// as such before its buffer is made.
#[test]
fn a_ring_exactly_its_heap_and_one_memory_object_is_made() {
    let size = 64u64 << 20;
    let mut layout = FakeLayout::lavapipe().with_heap_size(0, size);
    layout.max_memory_allocation_size = size;
    let (whole, device) = allocator(layout);
    let desc = UploadRingDesc {
        size,
        ..UploadRingDesc::default()
    };
    let ring = whole.create_upload_ring(&desc).unwrap();
    let bytes = whole.ring_allocate(ring, 256, 256).unwrap();
    whole.ring_write(&bytes, 0, &[1; 256]).unwrap();
    assert_eq!(whole.stats().heaps[0].reserved_bytes, size);
    whole.destroy_upload_ring(ring).unwrap();
    finish_after_frame(whole, &device);

    let mut layout = FakeLayout::lavapipe().with_heap_size(0, 2 * size);
    layout.max_memory_allocation_size = size;
    let (narrow, device) = allocator(layout);
    let desc = UploadRingDesc {
        size: size + 1,
        ..UploadRingDesc::default()
    };
    assert!(
        makes_nothing(&device, || assert_eq!(
            narrow.create_upload_ring(&desc).map(|_| ()),
            Err(Error::SizeExceedsMaxAllocation {
                size: size + 1,
                max: size
            })
        )),
        "a buffer was made"
    );
    finish(narrow, &device);
}

/// Whether `refuse` made no Vulkan object (a buffer a validation layer
/// could flag past `maxBufferSize`): the fake device numbers its objects in
/// order, so one made in between shows as a gap.
pub(super) fn makes_nothing(device: &FakeDevice, refuse: impl FnOnce()) -> bool {
    let first = device.create_resource();
    refuse();
    let next = device.create_resource();
    device.destroy_resource(first);
    device.destroy_resource(next);
    next == first + 1
}

/// A growing ring asked for `size` bytes refuses them with `expected` (as
/// larger than the heaps it can use, or than `maxBufferSize`), before its
/// new chunk's buffer is made, and changes no figure; the ring is destroyed
/// then (its chunk goes after the frame).
pub(super) fn a_growing_ring_refuses(
    allocator: &super::super::FakeAllocator,
    device: &FakeDevice,
    size: u64,
    expected: Error,
) {
    let desc = UploadRingDesc {
        grow: true,
        ..UploadRingDesc::default()
    };
    let ring = allocator.create_upload_ring(&desc).unwrap();
    let before = allocator.stats();
    assert!(
        makes_nothing(device, || assert_eq!(
            allocator.ring_allocate(ring, size, 1).map(|_| ()),
            Err(expected)
        )),
        "{size}: a growing ring's buffer was made"
    );
    assert_eq!(allocator.stats(), before);
    allocator.destroy_upload_ring(ring).unwrap();
}

/// A ring's required and preferred flags choose its chunks' memory type as
/// an allocation's do: on the discrete layout (2 HV|HC, 3 HV|HC|cached, 4
/// the BAR), a staging ring goes to 2, preferring cached memory to 3, and
/// requiring device-local memory to the BAR; a growing ring's later chunks
/// keep to them. Flags no type has refuse the ring before its buffer is
/// made; with the BAR's heap full, a ring that requires it fails rather
/// than land in system memory, and one that prefers it lands there.
#[test]
fn a_ring_s_memory_flags_choose_its_memory_type() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let cached = vk::MemoryPropertyFlags::HOST_CACHED;
    let device_local = vk::MemoryPropertyFlags::DEVICE_LOCAL;
    let staging = UploadRingDesc {
        size: 64 << 10,
        usage: Usage::UPLOAD,
        grow: true,
        ..UploadRingDesc::default()
    };
    for (desc, expected) in [
        (staging, 2),
        (
            UploadRingDesc {
                preferred_flags: cached,
                ..staging
            },
            3,
        ),
        (
            UploadRingDesc {
                required_flags: device_local,
                ..staging
            },
            4,
        ),
    ] {
        let ring = allocator.create_upload_ring(&desc).unwrap();
        // The first chunk, then a second one the ring grows.
        for _ in 0..2 {
            let allocation = allocator.ring_allocate(ring, 48 << 10, 256).unwrap();
            assert_eq!(type_of(&device, &allocation), Some(expected), "{desc:?}");
        }
        allocator.destroy_upload_ring(ring).unwrap();
    }
    let lazy = vk::MemoryPropertyFlags::LAZILY_ALLOCATED;
    let nowhere = UploadRingDesc {
        required_flags: lazy,
        ..staging
    };
    assert_eq!(
        allocator.create_upload_ring(&nowhere).map(|_| ()),
        Err(Error::MissingRequiredFlags {
            memory_type_bits: 0b1_1111,
            required: lazy
        })
    );
    finish_after_frame(allocator, &device);

    // A new allocator, whose BAR holds no block the rings above left.
    let (allocator, device) = super::super::allocator(FakeLayout::discrete());
    device.cap_heap(2, 0);
    let in_vram = UploadRingDesc {
        required_flags: device_local,
        ..staging
    };
    assert_eq!(
        allocator.create_upload_ring(&in_vram).map(|_| ()),
        Err(Error::OutOfDeviceMemory)
    );
    assert_eq!(device.live_resources(), 0, "the buffer is destroyed");
    let anywhere = UploadRingDesc {
        preferred_flags: device_local,
        ..staging
    };
    let ring = allocator.create_upload_ring(&anywhere).unwrap();
    let allocation = allocator.ring_allocate(ring, 256, 256).unwrap();
    assert_eq!(type_of(&device, &allocation), Some(2));
    allocator.destroy_upload_ring(ring).unwrap();
    finish_after_frame(allocator, &device);
}

/// The memory type of the fake memory object `allocation` lies in.
fn type_of(device: &FakeDevice, allocation: &vk_suballoc::RingAllocation) -> Option<u32> {
    device
        .live_allocations()
        .iter()
        .find(|a| a.memory == allocation.memory())
        .map(|a| a.memory_type)
}

/// `UploadRingDesc::min_alignment` puts each chunk of the ring at a
/// multiple of it in its memory object, after allocations that leave the
/// block's next offset unaligned, so that a ring allocation aligned to it
/// in its buffer is aligned in the memory object too; a growing ring's
/// later chunks as well. One that is no power of two is refused before
/// anything is made.
#[test]
fn a_ring_s_min_alignment_aligns_its_chunks_in_memory() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let small = |kib: u64| {
        let request = buffer(kib << 10, 256, Usage::DEVICE_LOCAL);
        allocator
            .allocate(&request.dedicated(DedicatedPolicy::Never))
            .unwrap()
    };
    let alignment = 64 << 10;
    let mut held = vec![small(20)];
    let ring = allocator
        .create_upload_ring(&UploadRingDesc {
            size: 100 << 10,
            usage: Usage::DEVICE_LOCAL,
            buffer_usage: vk::BufferUsageFlags::STORAGE_BUFFER,
            grow: true,
            min_alignment: alignment,
            ..UploadRingDesc::default()
        })
        .unwrap();
    let first = allocator.ring_allocate(ring, 1000, 1).unwrap();
    assert_eq!(
        first.memory(),
        held[0].memory(),
        "in the block the small one is in"
    );
    let chunk_start = first.memory_offset() - first.buffer_offset();
    assert_eq!(chunk_start % alignment, 0, "{chunk_start:#x}");
    let aligned = allocator.ring_allocate(ring, 1000, alignment).unwrap();
    assert_eq!(aligned.memory_offset() % alignment, 0);
    // A second chunk, after another unaligned allocation.
    held.push(small(3));
    let grown = allocator.ring_allocate(ring, 99 << 10, 1).unwrap();
    assert_ne!(grown.buffer(), first.buffer());
    assert_eq!(
        (grown.memory_offset() - grown.buffer_offset()) % alignment,
        0
    );
    allocator.destroy_upload_ring(ring).unwrap();
    let odd = UploadRingDesc {
        min_alignment: 48,
        ..UploadRingDesc::default()
    };
    assert!(makes_nothing(&device, || {
        let refused = allocator.create_upload_ring(&odd).map(|_| ());
        assert_eq!(refused, Err(Error::AlignmentNotPowerOfTwo(48)));
    }));
    for a in held {
        super::super::free(&allocator, a);
    }
    finish_after_frame(allocator, &device);
}

/// A ring whose buffers take their device address (`SHADER_DEVICE_ADDRESS`,
/// `min_alignment` 0) puts each chunk at a multiple of 256 in its memory
/// object, so that an allocation aligned to 256 in its buffer has a device
/// address aligned to 256, on GPUs whose buffers align to less: RADV's 16,
/// MoltenVK's 16 on Apple GPUs, ANV's 64. The fake device answered every
/// buffer with an alignment of 256 until session 51, so no fake-device
/// test failed without `DEVICE_ADDRESS_CHUNK_ALIGNMENT` (commit a6390a3,
/// seen on lavapipe alone); this one does: 'amd: a chunk at 0xa010, an
/// allocation aligned to 256 in its buffer at device address 0x10000a010'.
#[test]
fn a_device_address_ring_s_chunks_align_to_256_where_buffers_align_to_less() {
    for layout in [
        FakeLayout::amd(),
        FakeLayout::apple(),
        FakeLayout::integrated(),
        FakeLayout::intel_arc(),
    ] {
        let name = layout.name;
        let (allocator, device) = allocator(layout);
        // A buffer in the ring's block first, whose end is off 256 (at 16
        // bytes, which every one of these GPUs takes); past 32 KiB, as the
        // chunks, so that none takes a slot of a run.
        let small = |bytes: u64| {
            let request = buffer(bytes, 16, Usage::UPLOAD | Usage::DEVICE_ADDRESS);
            allocator
                .allocate(&request.dedicated(DedicatedPolicy::Never))
                .unwrap()
        };
        let mut held = vec![small((40 << 10) + 16)];
        let ring = allocator
            .create_upload_ring(&UploadRingDesc {
                size: 64 << 10,
                usage: Usage::UPLOAD,
                buffer_usage: vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
                grow: true,
                ..UploadRingDesc::default()
            })
            .unwrap();
        let check = |a: &vk_suballoc::RingAllocation| {
            let chunk = a.memory_offset() - a.buffer_offset();
            let address = a.device_address().expect("a device address");
            assert_eq!(
                (chunk % 256, address % 256),
                (0, 0),
                "{name}: a chunk at {chunk:#x}, an allocation aligned to 256 in its buffer \
                 at device address {address:#x}"
            );
        };
        let first = allocator.ring_allocate(ring, 1000, 256).unwrap();
        assert_eq!(first.memory(), held[0].memory(), "{name}: one block");
        check(&first);
        // A second chunk, after another buffer whose end is off 256.
        held.push(small((33 << 10) + 48));
        let grown = allocator.ring_allocate(ring, 64 << 10, 256).unwrap();
        assert_ne!(grown.buffer(), first.buffer(), "{name}");
        check(&grown);
        allocator.destroy_upload_ring(ring).unwrap();
        for a in held {
            super::super::free(&allocator, a);
        }
        finish_after_frame(allocator, &device);
    }
}

/// A ring's chunks keep to the memory types its buffers may use: with the
/// BAR type left out of buffers' `memoryTypeBits` (as AMDVLK leaves it out
/// over Thunderbolt), a ring for host-written, GPU-read data (`UPLOAD |
/// DEVICE_LOCAL`, which takes the BAR where buffers may use it) lands in
/// system memory, a growing ring's later chunks too; one that requires
/// device-local memory is refused once its buffer says where it may live,
/// naming those types, with the buffer destroyed and no memory left.
#[test]
fn a_ring_keeps_to_the_memory_types_its_buffers_may_use() {
    const BAR: u32 = 4;
    let layout = FakeLayout::discrete();
    let answer = layout
        .buffer_requirements
        .with_memory_type_bits(!(1 << BAR));
    let (allocator, device) = allocator(layout.with_buffer_requirements(answer));
    let desc = UploadRingDesc {
        size: 64 << 10,
        grow: true,
        ..UploadRingDesc::default()
    };
    assert_eq!(desc.usage, Usage::UPLOAD | Usage::DEVICE_LOCAL);
    let ring = allocator.create_upload_ring(&desc).unwrap();
    for _ in 0..2 {
        let allocation = allocator.ring_allocate(ring, 48 << 10, 256).unwrap();
        assert_eq!(type_of(&device, &allocation), Some(2));
    }
    allocator.destroy_upload_ring(ring).unwrap();
    let in_vram = UploadRingDesc {
        required_flags: vk::MemoryPropertyFlags::DEVICE_LOCAL
            | vk::MemoryPropertyFlags::HOST_VISIBLE,
        ..desc
    };
    // The destroyed ring's buffers wait for the frame to end.
    let (resources, memories) = (device.live_resources(), device.live_allocations());
    assert_eq!(
        allocator.create_upload_ring(&in_vram).map(|_| ()),
        Err(Error::MissingRequiredFlags {
            memory_type_bits: 0b1111,
            required: in_vram.required_flags,
        })
    );
    assert_eq!(
        device.live_resources(),
        resources,
        "the buffer is destroyed"
    );
    assert_eq!(device.live_allocations(), memories);
    finish_after_frame(allocator, &device);
}

/// A ring's chunks take the requirements their buffers' usage gets from
/// the driver, through the allocator: on RADV (`amd`) a ring for
/// acceleration-structure storage (made with `create_upload_ring_unchecked`)
/// puts its chunks at 64 bytes and rounds their size to 64, where other
/// buffers there align to 16; on ANV (`integrated`, `intel_arc`) a ring of
/// uniform or storage buffers (the default buffer usage) takes its size
/// rounded to 4, one of transfer buffers alone the size as asked. Each
/// chunk follows a buffer whose end is off 64 in the same block. No test
/// made a ring with such a usage on these layouts before (the fake
/// device's own test asks the device, not the allocator).
#[test]
fn a_ring_s_chunks_take_the_requirements_of_their_buffer_usage() {
    use vk::BufferUsageFlags as B;
    let structure = B::ACCELERATION_STRUCTURE_STORAGE_KHR;
    let default = UploadRingDesc::default().buffer_usage;
    let size = (40 << 10) + 1;
    // (layout, the ring's buffer usage, its chunks' alignment, their size)
    let cases = [
        (FakeLayout::amd(), structure, 64, (40 << 10) + 64),
        (FakeLayout::amd(), B::TRANSFER_SRC, 16, (40 << 10) + 16),
        (FakeLayout::integrated(), default, 64, (40 << 10) + 4),
        (FakeLayout::integrated(), B::TRANSFER_SRC, 64, size),
        (
            FakeLayout::intel_arc(),
            B::STORAGE_BUFFER,
            64,
            (40 << 10) + 4,
        ),
    ];
    for (layout, buffer_usage, alignment, chunk_bytes) in cases {
        let name = layout.name;
        let (allocator, device) = allocator(layout);
        // A buffer first whose end is 16 bytes past a multiple of 64; past
        // 32 KiB, as the chunk, so that neither takes a slot of a run.
        let request = buffer((40 << 10) + 16, 16, Usage::UPLOAD).dedicated(DedicatedPolicy::Never);
        let held = allocator.allocate(&request).unwrap();
        let before = allocator.stats().live_bytes();
        let desc = UploadRingDesc {
            size,
            usage: Usage::UPLOAD,
            buffer_usage,
            ..UploadRingDesc::default()
        };
        // SAFETY: the fake device takes every usage.
        let ring = unsafe { allocator.create_upload_ring_unchecked(&desc) }.unwrap();
        assert_eq!(
            allocator.stats().live_bytes() - before,
            chunk_bytes,
            "{name}, {buffer_usage:?}: the chunk's size"
        );
        let a = allocator.ring_allocate(ring, 1000, 1).unwrap();
        assert_eq!(a.memory(), held.memory(), "{name}: one block");
        let chunk = a.memory_offset() - a.buffer_offset();
        assert_eq!(
            chunk % alignment,
            0,
            "{name}, {buffer_usage:?}: a chunk at {chunk:#x}"
        );
        allocator.destroy_upload_ring(ring).unwrap();
        super::super::free(&allocator, held);
        finish_after_frame(allocator, &device);
    }
}
