//! Sizes refused as too large: past the heaps of the memory types a
//! request may use and that suit it, or past `maxMemoryAllocationSize`,
//! refused without a Vulkan call; and no block asked for past that limit.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Error, Request, ResourceKind, Usage};

use crate::{allocator, buffer, finish, free};

use super::{rejected, GIB};

/// `SizeExceedsHeaps` names the largest heap the request's
/// `memoryTypeBits` allow, not the device's largest; a request exactly as
/// large as that heap fits it, so it is refused for its usage instead.
#[test]
fn size_errors_look_at_the_allowed_heaps_only() {
    let (mut allocator, device) = allocator(FakeLayout::discrete());
    let in_types = |size, bits, usage| {
        let requirements = vk::MemoryRequirements {
            size,
            alignment: 1,
            memory_type_bits: bits,
        };
        Request::new(requirements, usage, ResourceKind::Buffer)
    };
    // Type 4 alone: the 256 MiB BAR heap, although heap 1 has 16 GiB.
    assert_eq!(
        rejected(&mut allocator, &in_types(GIB, 1 << 4, Usage::DEVICE_LOCAL)),
        Error::SizeExceedsHeaps {
            size: GIB,
            largest_heap: 256 << 20
        }
    );
    // Type 1 alone (8 GiB of VRAM) for readback: exactly the heap's size
    // fits the heap, but the type is not host-visible.
    assert!(matches!(
        rejected(&mut allocator, &in_types(8 * GIB, 1 << 1, Usage::READBACK)),
        Error::NoSuitableMemoryType {
            memory_type_bits: 2,
            ..
        }
    ));
    assert_eq!(allocator.stats().allocations(), 0);
    finish(allocator, &device);
}

/// A request that fits an allowed heap only in a type that does not suit
/// its usage, while the types that do suit it are all too small, is too
/// large for every heap it could live in: `SizeExceedsHeaps`, naming the
/// largest of those. It got `NoSuitableMemoryType`, whose docs say no
/// allowed type has what the usage needs, and the BAR type here has.
#[test]
fn a_request_too_large_for_the_types_that_suit_it_exceeds_their_heaps() {
    let (mut allocator, device) = allocator(FakeLayout::discrete());
    // Types 1 (8 GiB of VRAM, not host-visible) and 4 (the 256 MiB BAR).
    let bits = (1 << 1) | (1 << 4);
    for usage in [Usage::UPLOAD, Usage::READBACK] {
        let requirements = vk::MemoryRequirements {
            size: GIB,
            alignment: 1,
            memory_type_bits: bits,
        };
        let request = Request::new(requirements, usage, ResourceKind::Buffer);
        let calls = device.counters().allocate_calls;
        assert_eq!(
            rejected(&mut allocator, &request),
            Error::SizeExceedsHeaps {
                size: GIB,
                largest_heap: 256 << 20
            },
            "{usage:?}"
        );
        assert_eq!(device.counters().allocate_calls, calls);
        // Within the BAR heap, the BAR type takes it.
        let fits = Request::new(
            vk::MemoryRequirements {
                size: 1 << 20,
                ..requirements
            },
            usage,
            ResourceKind::Buffer,
        );
        let a = allocator.allocate(&fits).unwrap();
        assert_eq!(a.memory_type(), 4);
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// A request above `maxMemoryAllocationSize` (4 GiB on the discrete
/// layout) fits the 8 GiB heap but no memory object: a typed error, without
/// a `vkAllocateMemory` call. It made eight failed calls before (dedicated
/// memory and a block in each of four types). The limit itself is allowed.
#[test]
fn sizes_above_the_allocation_limit_are_refused_without_a_call() {
    let (mut allocator, device) = allocator(FakeLayout::discrete());
    for usage in [Usage::DEVICE_LOCAL, Usage::UPLOAD] {
        assert_eq!(
            rejected(&mut allocator, &buffer(4 * GIB + 1, 1, usage)),
            Error::SizeExceedsMaxAllocation {
                size: 4 * GIB + 1,
                max: 4 * GIB
            }
        );
    }
    assert_eq!(device.counters().allocate_calls, 0);
    let largest = allocator
        .allocate(&buffer(4 * GIB, 1, Usage::DEVICE_LOCAL))
        .unwrap();
    assert!(largest.is_dedicated());
    assert_eq!(device.counters().allocate_calls, 1);
    free(&allocator, largest);
    finish(allocator, &device);
}

/// A request within `maxMemoryAllocationSize` whose placed size, rounded
/// up to its alignment, is not (the limit need not be a multiple of the
/// alignment) fits no block: no call is made for one, and a request that
/// may not take dedicated memory is told it never fits (it was told
/// `OutOfDeviceMemory`, to free memory and retry). Dedicated memory, of
/// the exact size, still takes it.
#[test]
fn no_block_is_asked_for_past_the_allocation_limit() {
    let mut layout = FakeLayout::discrete();
    layout.max_memory_allocation_size = 4 * GIB - 1;
    let (allocator, device) = crate::allocator_with(layout, vk_suballoc::Config::default());
    let request = buffer(4 * GIB - 2048, 4096, Usage::DEVICE_LOCAL);
    let never = request.dedicated(vk_suballoc::DedicatedPolicy::Never);
    assert_eq!(
        allocator.allocate(&never).err(),
        Some(Error::SizeExceedsMaxAllocation {
            size: 4 * GIB,
            max: 4 * GIB - 1
        })
    );
    assert_eq!(device.counters().allocate_calls, 0);
    let dedicated = allocator.allocate(&request).unwrap();
    assert!(dedicated.is_dedicated());
    assert_eq!(device.counters().allocate_calls, 1);
    free(&allocator, dedicated);
    finish(allocator, &device);
}
