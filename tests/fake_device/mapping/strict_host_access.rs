//! `Config::strict_host_access`: on devices whose GPU memory the host can
//! map (lavapipe, Mali), an allocation whose request asks for no host
//! access has no mapping to hand out, as on a discrete GPU, so code that
//! writes a `DEVICE_LOCAL` buffer through its mapping fails there too,
//! with `NotHostVisible`. The memory type chosen is the same as without
//! the option; requests that ask for host access (`UPLOAD`, `READBACK`,
//! `HOST_VISIBLE` required) are mapped, whatever path made them: a
//! default pool, `allocate_mut`, dedicated memory, a custom pool, an
//! upload ring, a defragmentation move.

use ash::vk::MemoryPropertyFlags as Props;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DedicatedPolicy, DefragmentationLimits, Error, Movable,
    PoolDesc, Request, ResourceKind, UploadRingDesc, Usage,
};

use crate::frames::finish_after_frame;
use crate::{allocator, allocator_with, finish, free, requirements, FakeAllocator};

fn strict() -> Config {
    Config {
        strict_host_access: true,
        ..Config::default()
    }
}

/// The requests of the tests: a usage, the flags it requires, and
/// whether the allocation is mapped under the option.
const REQUESTS: [(Usage, Props, bool); 6] = [
    (Usage::DEVICE_LOCAL, Props::empty(), false),
    (Usage::UPLOAD, Props::empty(), true),
    (Usage::READBACK, Props::empty(), true),
    (
        Usage::UPLOAD.union(Usage::ALLOW_TRANSFER_INSTEAD),
        Props::empty(),
        false,
    ),
    (
        Usage::DEVICE_LOCAL.union(Usage::PREFER_HOST),
        Props::empty(),
        false,
    ),
    (Usage::DEVICE_LOCAL, Props::HOST_VISIBLE, true),
];

fn request(size: u64, usage: Usage, required: Props) -> Request<'static> {
    let desc = AllocationDesc::new(usage).required_flags(required);
    Request::with_desc(requirements(size, 64), ResourceKind::Buffer, desc)
}

/// Every host access call on `allocation` fails with `NotHostVisible`
/// and changes nothing.
fn assert_no_host_access(allocator: &FakeAllocator, allocation: &mut Allocation, what: &str) {
    assert_eq!(allocation.mapped_ptr(), None, "{what}");
    assert_eq!(
        allocator.mapped_slice(allocation).err(),
        Some(Error::NotHostVisible),
        "{what}"
    );
    assert_eq!(
        allocator.mapped_slice_mut(allocation).err(),
        Some(Error::NotHostVisible),
        "{what}"
    );
    let refused = Err(Error::NotHostVisible);
    assert_eq!(allocator.flush(allocation, ..), refused, "{what}");
    assert_eq!(allocator.invalidate(allocation, 0..4), refused, "{what}");
    assert_eq!(
        allocator.copy_to_allocation(allocation, 0, &[1; 4]),
        refused,
        "{what}"
    );
    assert_eq!(
        allocator.copy_from_allocation(allocation, 0, &mut [0; 4]),
        refused,
        "{what}"
    );
    assert_eq!(
        allocator.flush_allocations([(&*allocation, 0..4)]),
        refused,
        "{what}"
    );
}

/// Writes through the mapping reach the device memory.
fn assert_host_access(
    allocator: &FakeAllocator,
    device: &FakeDevice,
    allocation: &mut Allocation,
    what: &str,
) {
    assert!(allocation.mapped_ptr().is_some(), "{what}");
    allocator
        .copy_to_allocation(allocation, 0, &[7; 4])
        .unwrap();
    // SAFETY: no `&mut` slice of the allocation is alive.
    let bytes = unsafe { device.read(allocation.memory(), allocation.offset(), 4) }.unwrap();
    assert_eq!(bytes, [7; 4], "{what}");
}

/// Host access to `allocation` as `mapped` says ([`assert_host_access`]
/// or [`assert_no_host_access`]), then its free.
fn check_and_free(
    allocator: &FakeAllocator,
    device: &FakeDevice,
    mut allocation: Allocation,
    mapped: bool,
    what: &str,
) {
    if mapped {
        assert_host_access(allocator, device, &mut allocation, what);
    } else {
        assert_no_host_access(allocator, &mut allocation, what);
    }
    free(allocator, allocation);
}

/// In default pools, through `allocate` and `allocate_mut`, in run slots
/// (256 bytes), blocks (64 KiB) and dedicated memory: the same memory type
/// as without the option, which maps every one of them; mapped as
/// `REQUESTS` says.
#[test]
fn only_requests_for_host_access_are_mapped_in_memory_the_host_sees() {
    for layout in [FakeLayout::lavapipe(), FakeLayout::mali()] {
        let name = layout.name;
        let (loose, loose_device) = allocator(layout.clone());
        let (mut allocator, device) = allocator_with(layout, strict());
        for (usage, required, mapped) in REQUESTS {
            for policy in [DedicatedPolicy::Auto, DedicatedPolicy::Always] {
                for size in [256, 64 << 10] {
                    let what = format!("{name}: {usage:?} {required:?} {policy:?} {size}");
                    let request = request(size, usage, required).dedicated(policy);
                    let unchecked = loose.allocate(&request).unwrap();
                    assert!(unchecked.mapped_ptr().is_some(), "{what}");
                    let made = [
                        allocator.allocate(&request).unwrap(),
                        allocator.allocate_mut(&request).unwrap(),
                    ];
                    for allocation in made {
                        assert_eq!(allocation.memory_type(), unchecked.memory_type(), "{what}");
                        check_and_free(&allocator, &device, allocation, mapped, &what);
                    }
                    free(&loose, unchecked);
                }
            }
        }
        finish(loose, &loose_device);
        finish(allocator, &device);
    }
}

/// A custom pool in lavapipe's one type: its allocations are mapped as
/// the default pools' are.
#[test]
fn a_custom_pool_maps_only_requests_for_host_access() {
    let (allocator, device) = allocator_with(FakeLayout::lavapipe(), strict());
    let pool = allocator
        .create_pool(&PoolDesc::new(0).block_size(1 << 20))
        .unwrap();
    for (usage, required, mapped) in REQUESTS {
        for policy in [DedicatedPolicy::Auto, DedicatedPolicy::Always] {
            let what = format!("{usage:?} {required:?} {policy:?}");
            let desc = AllocationDesc::new(usage)
                .required_flags(required)
                .dedicated(policy)
                .pool(pool);
            let request = Request::with_desc(requirements(4096, 64), ResourceKind::Buffer, desc);
            let allocation = allocator.allocate(&request).unwrap();
            assert!(allocation.is_in_custom_pool(), "{what}");
            check_and_free(&allocator, &device, allocation, mapped, &what);
        }
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// An upload ring's allocations follow the ring's usage: a GPU-only ring
/// in lavapipe's host-visible type hands out no pointer and refuses
/// `ring_write`, as it would in VRAM; an upload ring is written.
#[test]
fn a_gpu_only_ring_hands_out_no_pointer() {
    let (allocator, device) = allocator_with(FakeLayout::lavapipe(), strict());
    for (usage, required, mapped) in REQUESTS {
        let what = format!("{usage:?} {required:?}");
        let desc = UploadRingDesc {
            size: 4096,
            usage,
            required_flags: required,
            ..UploadRingDesc::default()
        };
        let ring = allocator.create_upload_ring(&desc).unwrap();
        let allocation = allocator.ring_allocate(ring, 64, 16).unwrap();
        assert_eq!(allocation.mapped_ptr().is_some(), mapped, "{what}");
        let written = allocator.ring_write(&allocation, 0, &[5; 64]);
        if mapped {
            written.unwrap();
            // SAFETY: no slice of the ring's memory is alive.
            let bytes = unsafe { device.read(allocation.memory(), allocation.memory_offset(), 64) };
            assert_eq!(bytes.unwrap(), [5; 64], "{what}");
        } else {
            assert_eq!(written, Err(Error::NotHostVisible), "{what}");
        }
        allocator.destroy_upload_ring(ring).unwrap();
    }
    finish_after_frame(allocator, &device);
}

/// A move's destination is mapped where the allocation it replaces was:
/// 1 MiB buffers, GPU-only and upload ones in turn, every other one freed
/// and the blocks compacted.
#[test]
fn a_moved_allocation_keeps_its_host_access() {
    const MIB: u64 = 1 << 20;
    let (allocator, device) = allocator_with(FakeLayout::lavapipe(), strict());
    let usages = [Usage::DEVICE_LOCAL, Usage::UPLOAD];
    let all: Vec<Allocation> = (0..96)
        .map(|i| {
            allocator
                .allocate(&request(MIB, usages[i / 2 % 2], Props::empty()))
                .unwrap()
        })
        .collect();
    let mut live = Vec::new();
    for (i, allocation) in all.into_iter().enumerate() {
        if i % 2 == 0 {
            free(&allocator, allocation);
        } else {
            live.push(allocation);
        }
    }
    let movables: Vec<Movable<'_>> = live
        .iter()
        .map(|a| Movable::new(a, requirements(a.size(), 64), ResourceKind::Buffer))
        .collect();
    let limits = DefragmentationLimits::default().compact_blocks(true);
    let plan = allocator.plan_defragmentation(&movables, &limits).unwrap();
    let mut moved = [0; 2];
    for planned in &plan.moves {
        let source = &live[planned.movable];
        let host = source.mapped_ptr().is_some();
        assert_eq!(planned.destination.mapped_ptr().is_some(), host);
        moved[usize::from(host)] += 1;
    }
    assert!(moved[0] > 0 && moved[1] > 0, "{moved:?}");
    for planned in plan.moves.into_iter().rev() {
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        free(&allocator, old);
    }
    for (i, allocation) in live.into_iter().enumerate() {
        let what = format!("buffer {i}");
        let mapped = allocation.mapped_ptr().is_some();
        check_and_free(&allocator, &device, allocation, mapped, &what);
    }
    finish(allocator, &device);
}

/// Off, the default: every allocation in host-visible memory is mapped,
/// whatever its usage (the integrated GPU's and lavapipe's behaviour that
/// the option is there to catch).
#[test]
fn off_every_allocation_in_memory_the_host_sees_is_mapped() {
    let (allocator, device) = allocator(FakeLayout::lavapipe());
    let mut allocation = allocator
        .allocate(&request(4096, Usage::DEVICE_LOCAL, Props::empty()))
        .unwrap();
    assert_host_access(&allocator, &device, &mut allocation, "DEVICE_LOCAL");
    free(&allocator, allocation);
    finish(allocator, &device);
}

/// The option withholds the pointer only: debug fills still reach a
/// GPU-only allocation's bytes in its mapped block (`0xDC` when made).
#[test]
fn debug_fills_still_reach_an_allocation_without_a_pointer() {
    let config = Config {
        debug_fill: true,
        ..strict()
    };
    let (allocator, device) = allocator_with(FakeLayout::lavapipe(), config);
    let allocation = allocator
        .allocate(&request(4096, Usage::DEVICE_LOCAL, Props::empty()))
        .unwrap();
    assert_eq!(allocation.mapped_ptr(), None);
    // SAFETY: no slice of the memory is alive.
    let bytes = unsafe { device.read(allocation.memory(), allocation.offset(), 4096) }.unwrap();
    assert!(bytes.iter().all(|&b| b == 0xDC));
    free(&allocator, allocation);
    finish(allocator, &device);
}
