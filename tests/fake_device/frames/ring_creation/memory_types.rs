//! The memory types a ring's chunks take: GPU-only rings in device-local
//! memory, a transfer-instead ring's mapped and unmapped chunks, the
//! required and preferred flags, the types its buffers may use, and the
//! rings refused when no type suits them (host heaps all empty, protected
//! memory required).

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::device::{MemoryPropertyFlags as Props, MemoryType};
use vk_suballoc::{Error, UploadRingDesc, Usage};

use crate::frames::{end_frame, finish_after_frame};
use crate::{allocator, finish};

use super::{a_ring_is_refused, makes_nothing};

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
    a_ring_is_refused(&allocator, &device, &desc, unsuitable);
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
    let (allocator, device) = crate::allocator(FakeLayout::discrete());
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
