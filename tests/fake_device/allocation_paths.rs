//! Memory-type choice, blocks, dedicated memory, empty blocks and trim.

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::device::{
    AllocateInfo, AllocationFlags, DedicatedTarget, DeviceError, MemoryDeviceExt,
};
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DedicatedHint, DedicatedPolicy, Error, PoolDesc, Request,
    ResourceKind, Usage,
};

use super::frames::free_all_and_finish;
use super::{allocator, allocator_with, buffer, finish, free, requirements, FakeAllocator};

const MIB: u64 = 1 << 20;

#[test]
fn each_preset_places_each_usage_in_the_expected_type() {
    let cases = [
        // discrete: 0 none, 1 DL, 2 HV|HC, 3 HV|HC|cached, 4 BAR
        (FakeLayout::discrete(), Usage::DEVICE_LOCAL, 1),
        (FakeLayout::discrete(), Usage::UPLOAD, 2),
        (
            FakeLayout::discrete(),
            Usage::UPLOAD | Usage::DEVICE_LOCAL,
            4,
        ),
        (FakeLayout::discrete(), Usage::READBACK, 3),
        // integrated: 0 DL, 1 DL|HV|HC, 2 DL|HV|HC|cached
        (FakeLayout::integrated(), Usage::DEVICE_LOCAL, 0),
        (FakeLayout::integrated(), Usage::UPLOAD, 1),
        (FakeLayout::integrated(), Usage::READBACK, 2),
        // mobile: 0 DL, 1 DL|HV|HC, 2 DL|HV|cached (non-coherent), 3 lazy
        (FakeLayout::mobile(), Usage::DEVICE_LOCAL, 0),
        (FakeLayout::mobile(), Usage::UPLOAD, 1),
        (FakeLayout::mobile(), Usage::READBACK, 2),
        (FakeLayout::mobile(), Usage::TRANSIENT, 3),
        (FakeLayout::lavapipe(), Usage::READBACK, 0),
        // amd: 0 DL, 1 HV|HC, 2 DL|HV|HC (BAR), 3 HV|HC|cached, 4-7 the same
        // and device-coherent (AMD), which need a feature left off here.
        (FakeLayout::amd(), Usage::DEVICE_LOCAL, 0),
        (FakeLayout::amd(), Usage::UPLOAD, 1),
        (FakeLayout::amd(), Usage::UPLOAD | Usage::DEVICE_LOCAL, 2),
        (FakeLayout::amd(), Usage::READBACK, 3),
        // rebar: the discrete types, the BAR type (4) in the VRAM heap.
        (FakeLayout::rebar(), Usage::DEVICE_LOCAL, 1),
        (FakeLayout::rebar(), Usage::UPLOAD, 2),
        (FakeLayout::rebar(), Usage::UPLOAD | Usage::DEVICE_LOCAL, 4),
        (FakeLayout::rebar(), Usage::READBACK, 3),
    ];
    for (layout, usage, expected) in cases {
        let name = layout.name;
        let (allocator, device) = allocator(layout);
        let allocation = allocator.allocate(&buffer(4096, 256, usage)).unwrap();
        assert_eq!(allocation.memory_type(), expected, "{name} {usage:?}");
        let host_visible = usage.needs_host_access();
        assert_eq!(
            allocation.mapped_ptr().is_some(),
            host_visible,
            "{name} {usage:?}"
        );
        free(&allocator, allocation);
        finish(allocator, &device);
    }
}

/// `memory_type_properties` reports each memory type's flags as the
/// device lists them, on every preset, and `None` past its types; the
/// allocator's `Debug` form counts them.
#[test]
fn memory_type_properties_are_the_devices() {
    let layouts = [
        FakeLayout::discrete(),
        FakeLayout::integrated(),
        FakeLayout::mobile(),
        FakeLayout::rebar(),
        FakeLayout::amd(),
        FakeLayout::lavapipe(),
        FakeLayout::intel_arc(),
        FakeLayout::apple(),
        FakeLayout::mali(),
    ];
    for layout in layouts {
        let (name, types) = (layout.name, layout.memory_types.clone());
        let (allocator, device) = allocator(layout);
        for (index, ty) in types.iter().enumerate() {
            let flags = allocator.memory_type_properties(index as u32);
            let want = vk::MemoryPropertyFlags::from_raw(u32::from(ty.props.bits()));
            assert_eq!(flags, Some(want), "{name}: type {index}");
        }
        assert_eq!(
            allocator.memory_type_properties(types.len() as u32),
            None,
            "{name}"
        );
        assert_eq!(allocator.memory_type_properties(u32::MAX), None, "{name}");
        let debug = format!("{allocator:?}");
        assert!(
            debug.starts_with("Allocator {")
                && debug.contains(&format!("memory_types: {}", types.len())),
            "{name}: {debug}"
        );
        finish(allocator, &device);
    }
}

/// `UPLOAD | ALLOW_TRANSFER_INSTEAD` (VMA's pattern for data the GPU reads
/// often): a discrete GPU's BAR while it has room, then VRAM *unmapped*
/// (the engine uploads with a transfer), not system memory; an integrated
/// GPU's host-visible device-local memory.
#[test]
fn allow_transfer_instead_takes_the_bar_then_unmapped_vram() {
    let usage = Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD;
    // discrete: 0 none, 1 DL, 2 HV|HC, 3 HV|HC|cached, 4 DL|HV|HC in the
    // 256 MiB BAR heap (2).
    let (allocator, device) = allocator(FakeLayout::discrete());
    let direct = allocator.allocate(&buffer(MIB, 256, usage)).unwrap();
    assert_eq!(direct.memory_type(), 4);
    assert!(allocator.mapped_slice(&direct).is_ok());
    // The BAR is full: no new memory there.
    device.cap_heap(2, device.heap_usage()[2]);
    let staged = allocator.allocate(&buffer(64 * MIB, 256, usage)).unwrap();
    assert_eq!(staged.memory_type(), 1);
    assert_eq!(staged.mapped_ptr(), None);
    // What VMA's pattern asks of vmaGetAllocationMemoryProperties.
    let flags = |a: &Allocation| allocator.memory_type_properties(a.memory_type()).unwrap();
    assert_eq!(
        flags(&direct),
        vk::MemoryPropertyFlags::DEVICE_LOCAL
            | vk::MemoryPropertyFlags::HOST_VISIBLE
            | vk::MemoryPropertyFlags::HOST_COHERENT
    );
    assert_eq!(flags(&staged), vk::MemoryPropertyFlags::DEVICE_LOCAL);
    assert_eq!(
        allocator.mapped_slice(&staged).map(|_| ()),
        Err(Error::NotHostVisible)
    );
    for a in [direct, staged] {
        free(&allocator, a);
    }
    finish(allocator, &device);

    // integrated: 0 DL, 1 DL|HV|HC, 2 DL|HV|HC|cached.
    let (integrated, device) = super::allocator(FakeLayout::integrated());
    let direct = integrated.allocate(&buffer(MIB, 256, usage)).unwrap();
    assert_eq!(direct.memory_type(), 1);
    assert!(direct.mapped_ptr().is_some());
    free(&integrated, direct);
    finish(integrated, &device);
}

/// Unwanted flags rank a type down even when the driver lists it first:
/// GPU-only data stays out of host-visible memory, staging stays out of
/// device-local and cached memory, whatever the order of the types.
#[test]
fn unwanted_flags_outrank_the_driver_order() {
    // The integrated preset with its types listed the other way round:
    // 0 DL|HV|HC|cached, 1 DL|HV|HC, 2 DL.
    let mut layout = FakeLayout::integrated();
    layout.memory_types.reverse();
    for (usage, expected) in [(Usage::DEVICE_LOCAL, 2), (Usage::UPLOAD, 1)] {
        let (allocator, device) = allocator(layout.clone());
        let allocation = allocator.allocate(&buffer(4096, 256, usage)).unwrap();
        assert_eq!(allocation.memory_type(), expected, "{usage:?}");
        free(&allocator, allocation);
        finish(allocator, &device);
    }
}

/// Types that suit a usage equally well are tried in the driver's order
/// (drivers list their best types first): a duplicate listed later is the
/// fallback, not the first choice.
#[test]
fn equal_types_keep_the_driver_order() {
    // The integrated preset plus a second plain device-local type, last:
    // 0 DL, 1 DL|HV|HC, 2 DL|HV|HC|cached, 3 DL.
    let mut layout = FakeLayout::integrated();
    layout.memory_types.push(layout.memory_types[0]);
    let (allocator, device) = allocator(layout);
    let first = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(first.memory_type(), 0);
    free(&allocator, first);
    finish(allocator, &device);
}

/// AMD drivers list device-coherent duplicates of their memory types
/// whenever `VK_AMD_device_coherent_memory` is supported; allocating from one
/// without the `deviceCoherentMemory` feature is invalid
/// (VUID-vkAllocateMemory-deviceCoherentMemory-02790, which the fake device
/// records). Without the feature they are never used: not as a fallback when
/// every other type fails, and a request that allows only them is refused
/// up front.
#[test]
fn amd_device_coherent_types_need_their_feature() {
    // The fake device records the violation, so the allocator's use of such
    // a type below would show.
    let raw = FakeDevice::new(FakeLayout::amd());
    for memory_type in [4, 7] {
        let info = AllocateInfo::plain(4096, memory_type, AllocationFlags::empty());
        // SAFETY: a fake device; the call is the invalid one under test.
        assert!(unsafe { raw.allocate(&info) }.is_err());
    }
    let violations = raw.violations();
    assert_eq!(violations.len(), 2, "{violations:?}");
    assert!(
        violations.iter().all(|v| v.contains("02790")),
        "{violations:?}"
    );

    let (allocator, device) = allocator(FakeLayout::amd());
    device.fail_allocations_from(Some(1));
    for usage in [Usage::DEVICE_LOCAL, Usage::UPLOAD, Usage::READBACK] {
        let refused = allocator.allocate(&buffer(4096, 256, usage));
        assert!(
            matches!(refused, Err(Error::OutOfDeviceMemory)),
            "{usage:?}: {refused:?}"
        );
    }
    device.fail_allocations_from(None);
    let mut only_amd = buffer(4096, 256, Usage::DEVICE_LOCAL);
    only_amd.requirements.memory_type_bits = 0b1111_0000;
    assert_eq!(
        allocator.allocate(&only_amd).err(),
        Some(Error::NoMemoryTypeBits(0b1111_0000))
    );
    finish(allocator, &device);

    // With the feature, they rank after every other type, and a request
    // that allows only them gets one.
    let (allocator, device) =
        super::allocator(FakeLayout::amd().with_amd_device_coherent_memory(true));
    let normal = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(normal.memory_type(), 0);
    let breadcrumbs = allocator.allocate(&only_amd).unwrap();
    assert_eq!(breadcrumbs.memory_type(), 4);
    let mut host_amd = buffer(4096, 256, Usage::READBACK);
    host_amd.requirements.memory_type_bits = 0b1111_0000;
    let host = allocator.allocate(&host_amd).unwrap();
    assert_eq!(host.memory_type(), 7);
    for allocation in [normal, breadcrumbs, host] {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

#[test]
fn blocks_start_small_and_grow() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // 20 MiB requests: dedicated threshold is 128 MiB, first block 64 MiB
    // (the smallest of 32/64/128/256 that holds twice the request).
    let mut live = Vec::new();
    for _ in 0..12 {
        live.push(
            allocator
                .allocate(&buffer(20 * MIB, 256, Usage::DEVICE_LOCAL))
                .unwrap(),
        );
    }
    let mut sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, vec![64 * MIB, 128 * MIB, 256 * MIB]);
    assert!(live.iter().all(|a| !a.is_dedicated()));
    let names: Vec<_> = device
        .live_allocations()
        .into_iter()
        .map(|m| m.name.unwrap())
        .collect();
    assert!(
        names.contains(&"vk-suballoc block 1/0".to_owned()),
        "{names:?}"
    );
    for allocation in live {
        free(&allocator, allocation);
    }
    // One empty block is kept (the largest); trim releases it.
    assert_eq!(device.live_allocations().len(), 1);
    assert_eq!(device.live_allocations()[0].size, 256 * MIB);
    assert_eq!(allocator.stats().memory_types[1].empty_blocks, 1);
    assert_eq!(allocator.trim(), 256 * MIB);
    assert!(device.live_allocations().is_empty());
    finish(allocator, &device);
}

#[test]
fn large_requests_and_driver_hints_get_dedicated_memory() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let large = allocator
        .allocate(&buffer(129 * MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert!(large.is_dedicated());
    assert_eq!(large.offset(), 0);
    let target_handle = device.create_resource();
    let target = DedicatedTarget::Buffer(ash::vk::Handle::from_raw(target_handle));
    let preferred = allocator
        .allocate(
            &buffer(4096, 256, Usage::DEVICE_LOCAL)
                .driver_dedicated(DedicatedHint {
                    required: false,
                    preferred: true,
                })
                .dedicated_target(target)
                .name("preferred"),
        )
        .unwrap();
    assert!(preferred.is_dedicated());
    let info = device
        .live_allocations()
        .into_iter()
        .find(|m| m.memory == preferred.memory())
        .unwrap();
    assert_eq!(info.dedicated, Some(target));
    assert_eq!(info.name.as_deref(), Some("preferred"));
    let never = allocator
        .allocate(&buffer(129 * MIB, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Never))
        .unwrap();
    assert!(!never.is_dedicated());
    let always = allocator
        .allocate(&buffer(256, 256, Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Always))
        .unwrap();
    assert!(always.is_dedicated());
    let stats = allocator.stats();
    assert_eq!(stats.memory_types[1].dedicated_allocations, 3);
    for allocation in [large, preferred, never, always] {
        free(&allocator, allocation);
    }
    device.destroy_resource(target_handle);
    finish(allocator, &device);
}

/// Lazily allocated memory is always dedicated (as in VMA): one memory
/// object per transient attachment, even with `DedicatedPolicy::Never`,
/// committed and reported on its own. When no more memory objects can be
/// made, a transient attachment takes a device-local block instead.
#[test]
fn lazily_allocated_memory_is_always_dedicated() {
    // Mobile: 0 DL, 1 DL|HV|HC, 2 DL|HV|cached, 3 DL|lazy; 3 objects.
    let (allocator, device) = allocator(FakeLayout::mobile().with_max_allocation_count(3));
    let transient = |policy| {
        let request = Request::new(
            requirements(MIB, 4096),
            Usage::TRANSIENT,
            ResourceKind::OptimalImage,
        );
        allocator.allocate(&request.dedicated(policy)).unwrap()
    };
    let first = transient(DedicatedPolicy::Auto);
    let second = transient(DedicatedPolicy::Never);
    for a in [&first, &second] {
        assert_eq!((a.memory_type(), a.is_dedicated()), (3, true));
    }
    assert_ne!(first.memory(), second.memory());
    let memory = device.live_allocations();
    assert!(memory.iter().all(|m| m.size == MIB), "{memory:?}");
    // The last memory object is a device-local block; transient
    // attachments then share it.
    let vertices = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let third = transient(DedicatedPolicy::Auto);
    let fourth = transient(DedicatedPolicy::Auto);
    for a in [&third, &fourth] {
        assert_eq!((a.memory_type(), a.is_dedicated()), (0, false));
        assert_eq!(a.memory(), vertices.memory());
    }
    for a in [first, second, third, fourth, vertices] {
        free(&allocator, a);
    }
    finish(allocator, &device);
}

/// With buffer device address on, blocks and memory dedicated to a buffer
/// are allocated with `VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT` (any buffer in
/// them may take its address); memory dedicated to an image is not, as in
/// VMA.
#[test]
fn memory_dedicated_to_an_image_has_no_device_address() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let targets = [device.create_resource(), device.create_resource()];
    let image = DedicatedTarget::Image(ash::vk::Handle::from_raw(targets[0]));
    let buffer_target = DedicatedTarget::Buffer(ash::vk::Handle::from_raw(targets[1]));
    let requests = [
        (buffer(4096, 256, Usage::DEVICE_LOCAL), true),
        (
            Request::new(
                requirements(8 * MIB, 4096),
                Usage::DEVICE_LOCAL,
                ResourceKind::OptimalImage,
            )
            .dedicated(DedicatedPolicy::Always)
            .dedicated_target(image),
            false,
        ),
        (
            buffer(8 * MIB, 256, Usage::DEVICE_LOCAL)
                .dedicated(DedicatedPolicy::Always)
                .dedicated_target(buffer_target),
            true,
        ),
    ];
    for (request, device_address) in requests {
        let allocation = allocator.allocate(&request).unwrap();
        let info = device
            .live_allocations()
            .into_iter()
            .find(|m| m.memory == allocation.memory())
            .unwrap();
        assert_eq!(info.device_address, device_address, "{request:?}");
        free(&allocator, allocation);
    }
    for target in targets {
        device.destroy_resource(target);
    }
    finish(allocator, &device);
}

/// A block allocation's size is rounded up to its alignment only up to
/// 4 KiB: a 1 MiB buffer aligned to 64 MiB takes 1 MiB of the first block,
/// and the rest stays free for others (rounded, it took 64 MiB, in a
/// 128 MiB block made for it). Small buffers with such alignments skip the
/// runs, whose slots only keep alignments up to that.
#[test]
fn a_large_alignment_takes_only_the_requested_bytes() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let aligned = allocator
        .allocate(&buffer(MIB, 64 * MIB, Usage::DEVICE_LOCAL))
        .unwrap();
    let next = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert!(!aligned.is_dedicated());
    assert_eq!(
        (next.memory(), next.offset()),
        (aligned.memory(), aligned.offset() + MIB)
    );
    assert_eq!(allocator.stats().memory_types[1].block_bytes, 32 * MIB);
    let small: Vec<_> = (0..3)
        .map(|_| {
            allocator
                .allocate(&buffer(100, 64 << 10, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    for allocation in &small {
        assert_eq!(allocation.offset() % (64 << 10), 0);
    }
    for allocation in small.into_iter().chain([aligned, next]) {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// The dedicated threshold is strict: a request of exactly half the
/// preferred block size (256 MiB for the discrete preset's device-local
/// heap) still goes to a block; a larger one gets dedicated memory.
#[test]
fn exactly_half_a_block_is_not_dedicated() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let half = allocator
        .allocate(&buffer(128 * MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert!(!half.is_dedicated());
    let over = allocator
        .allocate(&buffer(128 * MIB + 256, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert!(over.is_dedicated());
    let stats = allocator.stats();
    assert_eq!(stats.memory_types[1].dedicated_allocations, 1);
    free(&allocator, half);
    free(&allocator, over);
    finish(allocator, &device);
}

/// With two empty blocks the smaller one is released, whichever emptied
/// first, and the blocks left keep serving requests (first fit over them,
/// no new block).
#[test]
fn the_larger_empty_block_is_kept_whichever_empties_first() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    // As in `blocks_start_small_and_grow`: blocks of 64, 128 and 256 MiB
    // holding 3, 6 and 3 of twelve 20 MiB buffers.
    let live: Vec<Allocation> = (0..12)
        .map(|_| {
            allocator
                .allocate(&buffer(20 * MIB, 256, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    let block = |size| {
        device
            .live_allocations()
            .into_iter()
            .find(|m| m.size == size)
            .unwrap()
            .memory
    };
    let (b64, b128, b256) = (block(64 * MIB), block(128 * MIB), block(256 * MIB));
    let (mut in_64, rest): (Vec<Allocation>, Vec<Allocation>) =
        live.into_iter().partition(|a| a.memory() == b64);
    let (in_128, in_256): (Vec<Allocation>, Vec<Allocation>) =
        rest.into_iter().partition(|a| a.memory() == b128);
    assert_eq!((in_64.len(), in_128.len(), in_256.len()), (3, 6, 3));
    // The largest block empties first, then the middle one: the middle one
    // is released.
    for allocation in in_256.into_iter().chain(in_128) {
        free(&allocator, allocation);
    }
    let mut sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [64 * MIB, 256 * MIB]);
    assert_eq!(allocator.stats().memory_types[1].empty_blocks, 1);
    // The 64 MiB block has no room for 20 MiB; the kept block takes it.
    let again = allocator
        .allocate(&buffer(20 * MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!((again.memory(), again.offset()), (b256, 0));
    assert_eq!(device.live_allocations().len(), 2);
    assert_eq!(allocator.stats().memory_types[1].empty_blocks, 0);
    for allocation in in_64.drain(..).chain([again]) {
        free(&allocator, allocation);
    }
    // Now the 64 MiB block emptied last and is the smaller: it goes.
    assert_eq!(device.live_allocations().len(), 1);
    assert_eq!(allocator.trim(), 256 * MIB);
    finish(allocator, &device);
}

#[test]
fn allocations_in_a_block_never_overlap_and_honour_alignment() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let mut live = Vec::new();
    for i in 0..500u64 {
        let align = 1 << (i % 12);
        let a = allocator
            .allocate(&buffer(1 + i * 97 % 5000, align, Usage::DEVICE_LOCAL))
            .unwrap();
        assert_eq!(a.offset() % align, 0);
        live.push(a);
    }
    let mut ranges: Vec<_> = live
        .iter()
        .map(|a| (a.memory(), a.offset(), a.offset() + a.size()))
        .collect();
    ranges.sort_unstable_by_key(|r| (ash::vk::Handle::as_raw(r.0), r.1));
    for pair in ranges.windows(2) {
        if pair[0].0 == pair[1].0 {
            assert!(pair[0].2 <= pair[1].1, "overlap {pair:?}");
        }
    }
    let stats = allocator.stats();
    assert_eq!(stats.allocations(), 500);
    assert_eq!(
        stats.live_bytes(),
        live.iter().map(|a| a.size()).sum::<u64>()
    );
    assert_eq!(
        stats.memory_objects as usize,
        device.live_allocations().len()
    );
    for allocation in live {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// A block whose offset allocator runs out of slots grows its slot table:
/// the allocations share the block instead of spreading over new ones.
#[test]
fn a_block_out_of_slots_grows_its_slot_table() {
    let config = vk_suballoc::Config {
        initial_block_slots: 1,
        ..super::without_runs()
    };
    let (allocator, device) = super::allocator_with(FakeLayout::integrated(), config);
    let live: Vec<_> = (0..100)
        .map(|_| {
            allocator
                .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
                .unwrap()
        })
        .collect();
    assert!(live.iter().all(|a| a.memory() == live[0].memory()));
    assert_eq!(device.counters().allocations, 1);
    for allocation in live {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

#[test]
fn dropping_with_live_allocations_frees_all_memory() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let mut leaked = Vec::new();
    for usage in [Usage::DEVICE_LOCAL, Usage::UPLOAD, Usage::READBACK] {
        leaked.push(
            allocator
                .allocate(&buffer(1000, 16, usage).name("leaky"))
                .unwrap(),
        );
        leaked.push(allocator.allocate(&buffer(200 * MIB, 16, usage)).unwrap());
    }
    assert_eq!(device.live_allocations().len(), 6);
    // The handles outlive the allocator; it frees the memory anyway.
    finish(allocator, &device);
    drop(leaked);
}

#[test]
fn the_ext_trait_reports_the_preset() {
    let device = vk_suballoc::device::fake::FakeDevice::new(FakeLayout::mobile());
    let properties = device.memory_properties();
    assert_eq!(properties.device.memory_types.len(), 4);
    assert_eq!(properties.device.non_coherent_atom_size, 256);
    assert_eq!(properties.buffer_image_granularity, 4096);
}

/// The fake device checks binds against the requirements it reported, as
/// the validation layer does: the memory type (VUID-vkBindBufferMemory-memory-01035),
/// the alignment (-memoryOffset-01036), the size (-size-01037), dedicated
/// memory bound to its own resource at offset 0 (-memory-01508), a
/// device-address buffer in device-address memory (-bufferDeviceAddress-03339),
/// a buffer bound once only (-buffer-07459) at an offset inside the memory
/// (-memoryOffset-01031), and a dedicated allocation of exactly the buffer's size
/// (VUID-VkMemoryDedicatedAllocateInfo-buffer-02965) for a resource that
/// exists (-image-parameter).
#[test]
fn fake_binds_follow_the_reported_requirements() {
    use ash::vk;
    use vk_suballoc::device::MemoryDevice;
    let raw = FakeDevice::new(FakeLayout::mobile());
    let usage = vk::BufferUsageFlags::TRANSFER_SRC;
    // SAFETY: a fake device; the invalid calls are the ones under test.
    unsafe {
        let (buffer, requirements, _) = raw.create_buffer(1000, usage).unwrap();
        let (other, _, _) = raw.create_buffer(1000, usage).unwrap();
        assert_eq!(
            requirements.memory_type_bits & 0b1000,
            0,
            "lazily allocated"
        );
        let lazy = raw
            .allocate(&AllocateInfo::plain(4096, 3, AllocationFlags::empty()))
            .unwrap();
        let small = raw
            .allocate(&AllocateInfo::plain(1024, 0, AllocationFlags::empty()))
            .unwrap();
        let mut dedicated = AllocateInfo::plain(requirements.size, 0, AllocationFlags::empty());
        dedicated.dedicated = Some(DedicatedTarget::Buffer(other));
        let other_memory = raw.allocate(&dedicated).unwrap();
        dedicated.size += 4;
        assert!(raw.allocate(&dedicated).is_err());
        // Dedicated to a handle the device never made.
        let mut unknown = AllocateInfo::plain(1024, 0, AllocationFlags::empty());
        unknown.dedicated = Some(DedicatedTarget::Image(vk::Handle::from_raw(0x51)));
        assert!(raw.allocate(&unknown).is_err());
        for (memory, offset) in [
            (lazy.raw(), 0),
            (small.raw(), 4),
            (small.raw(), 256),
            (other_memory.raw(), 0),
        ] {
            raw.bind_buffer_memory(buffer, memory, offset).unwrap();
        }
        raw.bind_buffer_memory(other, other_memory.raw(), 0)
            .unwrap();
        // Without buffer device address (mobile), no rule for the address
        // usage; with it (discrete), the memory must have the flag.
        let address_usage = usage | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS;
        let (addressed, _, _) = raw.create_buffer(256, address_usage).unwrap();
        raw.bind_buffer_memory(addressed, small.raw(), 0).unwrap();
        // Bound already; then an offset at the memory's end (a 16-byte
        // buffer that the offset's alignment and size checks would pass).
        raw.bind_buffer_memory(other, other_memory.raw(), 0)
            .unwrap();
        let (past, _, _) = raw.create_buffer(16, usage).unwrap();
        raw.bind_buffer_memory(past, small.raw(), 1024).unwrap();
        let discrete = FakeDevice::new(FakeLayout::discrete());
        let plain = discrete
            .allocate(&AllocateInfo::plain(4096, 1, AllocationFlags::empty()))
            .unwrap();
        let (on_discrete, _, _) = discrete.create_buffer(256, address_usage).unwrap();
        discrete
            .bind_buffer_memory(on_discrete, plain.raw(), 0)
            .unwrap();
        let mut violations = raw.violations();
        violations.extend(discrete.violations());
        for (i, vuid) in [
            "02965",
            "image-parameter",
            "01035",
            "01036",
            "01037",
            "01508",
            "07459",
            "01031",
            "03339",
        ]
        .iter()
        .enumerate()
        {
            assert!(violations[i].contains(vuid), "{vuid}: {violations:?}");
        }
        assert_eq!(violations.len(), 9, "{violations:?}");
        for memory in [lazy, small, other_memory] {
            raw.deallocate_memory(memory);
        }
        raw.destroy_buffer(buffer);
        raw.destroy_buffer(other);
        raw.destroy_buffer(addressed);
        raw.destroy_buffer(past);
        discrete.deallocate_memory(plain);
        discrete.destroy_buffer(on_discrete);
    }
}

/// `existing_memory_only` (VMA's `NEVER_ALLOCATE`) places requests in the
/// blocks that exist, in any suitable memory type, and otherwise fails
/// with `NoRoomInExistingMemory`: never a new memory object, not even for
/// a request that needs dedicated memory.
#[test]
fn existing_memory_only_never_makes_a_memory_object() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let only = |size: u64| buffer(size, 256, Usage::DEVICE_LOCAL).existing_memory_only();
    // Nothing exists yet.
    assert_eq!(
        allocator.allocate(&only(MIB)).unwrap_err(),
        Error::NoRoomInExistingMemory
    );
    assert_eq!(device.counters().allocate_calls, 0);
    // One block, made by an ordinary request, then filled by requests for
    // existing memory, small buffers (run slots) among them.
    let first = allocator
        .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let block_bytes = allocator.stats().memory_types[1].block_bytes;
    let mut live = vec![first];
    let error = loop {
        match allocator.allocate(&only(MIB)) {
            Ok(allocation) => {
                assert_eq!(allocation.memory(), live[0].memory());
                live.push(allocation);
            }
            Err(error) => break error,
        }
    };
    assert_eq!(error, Error::NoRoomInExistingMemory);
    assert_eq!(
        live.len() as u64,
        block_bytes / MIB,
        "the block was not filled"
    );
    assert_eq!(device.counters().allocate_calls, 1);
    // A request the driver would rather have dedicated takes a block too;
    // one that needs dedicated memory fails.
    live.push(
        allocator
            .allocate(&buffer(MIB, 256, Usage::DEVICE_LOCAL))
            .unwrap(),
    );
    let preferred = only(4096).driver_dedicated(DedicatedHint {
        required: false,
        preferred: true,
    });
    let in_block = allocator.allocate(&preferred).unwrap();
    assert!(!in_block.is_dedicated());
    live.push(in_block);
    let always = only(4096).dedicated(DedicatedPolicy::Always);
    assert_eq!(
        allocator.allocate(&always).unwrap_err(),
        Error::NoRoomInExistingMemory
    );
    let small = allocator.allocate(&only(256)).unwrap();
    live.push(small);
    assert_eq!(device.counters().allocate_calls, 2);
    for allocation in live {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// The other suitable memory types' existing blocks are tried in rank
/// order, and a custom pool's request for existing memory stays in its
/// blocks (`NoRoomInExistingMemory`, not `PoolFull`, and no new block
/// below `max_blocks`).
#[test]
fn existing_memory_only_tries_every_type_and_pool_blocks() {
    // Mobile: TRANSIENT ranks the lazily allocated type (3, always
    // dedicated) first, then device-local types.
    let (allocator, device) = allocator(FakeLayout::mobile());
    let transient = |size: u64| {
        Request::new(
            requirements(size, 256),
            Usage::TRANSIENT,
            ResourceKind::OptimalImage,
        )
        .existing_memory_only()
    };
    assert_eq!(
        allocator.allocate(&transient(MIB)).unwrap_err(),
        Error::NoRoomInExistingMemory
    );
    let local = allocator
        .allocate(&Request::new(
            requirements(MIB, 256),
            Usage::DEVICE_LOCAL,
            ResourceKind::OptimalImage,
        ))
        .unwrap();
    let fallback = allocator.allocate(&transient(MIB)).unwrap();
    assert_eq!(fallback.memory_type(), local.memory_type());
    assert_eq!(fallback.memory(), local.memory());
    assert_eq!(device.counters().allocate_calls, 1);

    let pool = allocator
        .create_pool(
            &vk_suballoc::PoolDesc::new(0)
                .block_size(4 * MIB)
                .min_blocks(1),
        )
        .unwrap();
    let in_pool = |size: u64| {
        let mut request = buffer(size, 256, Usage::DEVICE_LOCAL);
        request.desc = request.desc.pool(pool).existing_memory_only();
        request
    };
    let a = allocator.allocate(&in_pool(3 * MIB)).unwrap();
    assert_eq!(
        allocator.allocate(&in_pool(2 * MIB)).unwrap_err(),
        Error::NoRoomInExistingMemory
    );
    assert_eq!(allocator.pool_stats(&pool).unwrap().blocks, 1);
    let b = allocator.allocate(&in_pool(MIB)).unwrap();
    for allocation in [local, fallback, a, b] {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// `min_alignment` (VMA's `vmaCreateBufferWithAlignment`) aligns every
/// placement beyond the resource's own alignment: in block ranges, run
/// slots, custom pools and on non-coherent memory; a value that is neither
/// a power of two nor 0 is refused before anything happens.
#[test]
fn min_alignment_aligns_every_placement() {
    let seed = crate::seeded_rng::Rng::seed("min_alignment_aligns_every_placement");
    let mut rng = crate::seeded_rng::Rng(seed);
    for layout in [FakeLayout::discrete(), FakeLayout::mobile()] {
        let name = layout.name;
        let (allocator, device) = allocator(layout);
        let local = allocator.memory_type_for(!0, Usage::DEVICE_LOCAL).unwrap();
        let pool = allocator
            .create_pool(&vk_suballoc::PoolDesc::new(local).block_size(16 * MIB))
            .unwrap();
        let mut live = Vec::new();
        for i in 0..400 {
            let size = 1 + rng.below(if i % 2 == 0 { 512 } else { 200_000 });
            let min_alignment: u64 = 1 << rng.below(17);
            // READBACK: non-coherent (atom-aligned) on the mobile layout.
            let usage = [Usage::DEVICE_LOCAL, Usage::READBACK][i % 2];
            let mut request = buffer(size, 4, usage);
            request.desc = request.desc.min_alignment(min_alignment);
            if i % 4 == 0 {
                request.desc = request.desc.pool(pool);
            }
            let allocation = allocator.allocate(&request).unwrap();
            assert_eq!(
                allocation.offset() % min_alignment,
                0,
                "{name} seed {seed}: {size} bytes aligned to {min_alignment}"
            );
            live.push(allocation);
        }
        let before = allocator.stats();
        for bad in [3, 96, u64::MAX] {
            let mut request = buffer(64, 4, Usage::DEVICE_LOCAL);
            request.desc = request.desc.min_alignment(bad);
            assert_eq!(
                allocator.allocate(&request).unwrap_err(),
                Error::AlignmentNotPowerOfTwo(bad),
                "{name}"
            );
        }
        assert_eq!(allocator.stats(), before);
        for allocation in live {
            free(&allocator, allocation);
        }
        allocator.destroy_pool(pool).unwrap();
        finish(allocator, &device);
    }
}

/// A `min_alignment` past half a block leaves room for one allocation per
/// block, at offset 0: such requests get dedicated memory of their exact
/// size, not a block each (ten 1 GiB-aligned buffers reserved ten blocks,
/// 2 GiB, for half a MiB).
#[test]
fn an_alignment_past_half_a_block_gets_dedicated_memory() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let mut live = Vec::new();
    for shift in [63u32, 40, 30, 28] {
        for size in [64u64, 100_000] {
            let mut request = buffer(size, 4, Usage::DEVICE_LOCAL);
            request.desc = request.desc.min_alignment(1 << shift);
            let allocation = allocator.allocate(&request).unwrap();
            assert!(allocation.is_dedicated(), "aligned to 2^{shift}");
            assert_eq!(allocation.offset(), 0);
            live.push(allocation);
        }
    }
    // Half a block (128 MiB of 256) still takes blocks.
    let mut request = buffer(64, 4, Usage::DEVICE_LOCAL);
    request.desc = request.desc.min_alignment(128 * MIB);
    let in_block = allocator.allocate(&request).unwrap();
    assert!(!in_block.is_dedicated());
    live.push(in_block);
    let stats = allocator.stats();
    assert_eq!(stats.memory_types[1].dedicated_allocations, 8);
    assert_eq!(stats.memory_types[1].blocks, 1);
    for allocation in live {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// `AllocationDesc::memory_type_bits` narrows the resource's
/// `memoryTypeBits`: ranking skips the types it leaves out, it can pin a
/// request to one type, and errors name the narrowed bits.
#[test]
fn memory_type_bits_narrow_the_candidates() {
    // discrete: 0 none, 1 DL, 2 HV|HC, 3 HV|HC|cached, 4 BAR (DL|HV|HC).
    let (allocator, device) = allocator(FakeLayout::discrete());
    let with_bits = |usage: Usage, bits: u32| {
        let mut request = buffer(4096, 256, usage);
        request.desc = request.desc.memory_type_bits(bits);
        request
    };
    let not_vram = allocator
        .allocate(&with_bits(Usage::DEVICE_LOCAL, !(1 << 1)))
        .unwrap();
    assert_ne!(not_vram.memory_type(), 1);
    let cached = allocator.memory_type_for(!0, Usage::READBACK).unwrap();
    assert_eq!(cached, 3);
    let pinned = allocator
        .allocate(&with_bits(Usage::UPLOAD, 1 << cached))
        .unwrap();
    assert_eq!(pinned.memory_type(), cached);
    assert_eq!(
        allocator
            .allocate(&with_bits(Usage::UPLOAD, 0))
            .unwrap_err(),
        Error::NoMemoryTypeBits(0)
    );
    // The request's own bits still apply: 0b110 & 0b011 leaves type 1.
    let mut narrowed = with_bits(Usage::UPLOAD, 0b011);
    narrowed.requirements.memory_type_bits = 0b110;
    assert_eq!(
        allocator.allocate(&narrowed).unwrap_err(),
        Error::NoSuitableMemoryType {
            memory_type_bits: 0b010,
            usage: Usage::UPLOAD
        }
    );
    let pool = allocator
        .create_pool(&vk_suballoc::PoolDesc::new(1))
        .unwrap();
    let mut in_pool = with_bits(Usage::DEVICE_LOCAL, !(1 << 1));
    in_pool.desc = in_pool.desc.pool(pool);
    assert_eq!(
        allocator.allocate(&in_pool).unwrap_err(),
        Error::PoolTypeNotAllowed {
            memory_type: 1,
            memory_type_bits: !0b10
        }
    );
    assert_eq!(
        vk_suballoc::AllocationDesc::default().excluded_memory_types,
        0
    );
    for allocation in [not_vram, pinned] {
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A 20 MiB buffer for the discrete layout's device-local type (1).
fn twenty_mib() -> Request<'static> {
    buffer(20 * MIB, 256, Usage::DEVICE_LOCAL)
}

/// `count` 20 MiB device-local buffers.
fn twenty_mib_buffers(allocator: &FakeAllocator, count: usize) -> Vec<Allocation> {
    (0..count)
        .map(|_| allocator.allocate(&twenty_mib()).unwrap())
        .collect()
}

/// Frees every allocation of `allocations`.
fn free_all(allocator: &FakeAllocator, allocations: Vec<Allocation>) {
    for allocation in allocations {
        free(allocator, allocation);
    }
}

/// Live bytes that swing back reuse the blocks they emptied: with
/// `Config::empty_block_reserve` (default 1.0) a memory type keeps empty
/// blocks up to the bytes in use besides the largest, where VMA's rule
/// (0.0) keeps one and asks the driver again, at the same peak. Once
/// everything is freed, one empty block stays, whatever the reserve (an
/// infinite one too: the last free is weighed with nothing allocated).
#[test]
fn swinging_live_bytes_reuse_their_kept_empty_blocks() {
    let cases = [(1.0, 2, 0), (0.0, 1, 1), (f64::INFINITY, 2, 0)];
    for (reserve, kept, calls_for_the_swing) in cases {
        let config = Config {
            empty_block_reserve: reserve,
            ..Config::default()
        };
        let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
        // 300 MiB long-lived in blocks of 64, 128 and 256 MiB; 600 MiB
        // transient fill the 256 MiB block and two more of 256.
        let long_lived = twenty_mib_buffers(&allocator, 15);
        let transient = twenty_mib_buffers(&allocator, 30);
        assert_eq!(device.live_allocations().len(), 5, "reserve {reserve}");
        let peak = allocator.stats().reserved_bytes();
        free_all(&allocator, transient);
        let stats = allocator.stats();
        assert_eq!(
            stats.memory_types[1].empty_blocks, kept,
            "reserve {reserve}"
        );
        assert_eq!(stats.live_bytes(), 300 * MIB);

        let calls = device.counters().allocate_calls;
        let transient = twenty_mib_buffers(&allocator, 30);
        assert_eq!(
            device.counters().allocate_calls - calls,
            calls_for_the_swing,
            "reserve {reserve}"
        );
        assert_eq!(
            allocator.stats().reserved_bytes(),
            peak,
            "reserve {reserve}"
        );

        free_all(&allocator, transient);
        free_all(&allocator, long_lived);
        let stats = allocator.stats();
        assert_eq!(
            (
                stats.memory_types[1].blocks,
                stats.memory_types[1].empty_blocks
            ),
            (1, 1),
            "reserve {reserve}"
        );
        assert_eq!(device.live_allocations()[0].size, 256 * MIB);
        finish(allocator, &device);
    }
}

/// Kept empty blocks give way to a request short of memory: each default
/// pool's empty blocks but the largest are released and the request is
/// tried again, whether the driver's object count, the heap's budget or a
/// custom pool's new block was what it lacked.
#[test]
fn kept_empty_blocks_give_way_to_a_request_short_of_memory() {
    // Blocks of 64, 128 and three of 256 MiB, the last two empty and kept.
    // With `vram_budget`, the VRAM heap's budget is set after, and read.
    let setup = |layout: FakeLayout, vram_budget: Option<u64>| {
        let (allocator, device) = allocator(layout);
        let long_lived = twenty_mib_buffers(&allocator, 15);
        let transient = twenty_mib_buffers(&allocator, 30);
        free_all(&allocator, transient);
        assert_eq!(allocator.stats().memory_types[1].empty_blocks, 2);
        assert_eq!(device.live_allocations().len(), 5);
        if let Some(budget) = vram_budget {
            device.set_heap_budget(0, budget, 0);
            allocator.budgets(); // the allocator's checks read the new budget
        }
        (allocator, device, long_lived)
    };
    // `pool_blocks`: bytes of custom pool blocks, counted in their type.
    let released_one = |allocator: &FakeAllocator, case: &str, pool_blocks: u64| {
        let stats = allocator.stats();
        assert_eq!(stats.memory_types[1].empty_blocks, 1, "{case}");
        assert_eq!(
            stats.memory_types[1].block_bytes,
            (64 + 128 + 2 * 256) * MIB + pool_blocks,
            "{case}"
        );
    };

    // maxMemoryAllocationCount 5: an upload buffer needs a sixth object
    // (no host-visible type has a block), which one kept block makes room
    // for.
    let (allocator, device, long_lived) =
        setup(FakeLayout::discrete().with_max_allocation_count(5), None);
    let upload = allocator
        .allocate(&buffer(MIB, 256, Usage::UPLOAD))
        .unwrap();
    assert_eq!(upload.memory_type(), 2);
    released_one(&allocator, "object count", 0);
    free_all_and_finish(allocator, &device, long_lived.into_iter().chain([upload]));

    // A 1100 MiB budget on the VRAM heap: 960 MiB of blocks leave no room
    // for a 300 MiB dedicated buffer (larger than any block) asked within
    // budget, unless a kept block goes.
    let (allocator, device, long_lived) = setup(FakeLayout::discrete(), Some(1100 * MIB));
    let large = allocator
        .allocate(&buffer(300 * MIB, 256, Usage::DEVICE_LOCAL).within_budget())
        .unwrap();
    assert!(large.is_dedicated());
    released_one(&allocator, "budget", 0);
    free_all_and_finish(allocator, &device, long_lived.into_iter().chain([large]));

    // The same budget, and a custom pool of 200 MiB blocks making its first.
    let (allocator, device, long_lived) = setup(FakeLayout::discrete(), Some(1100 * MIB));
    let pool = allocator
        .create_pool(&PoolDesc::new(1).block_size(200 * MIB))
        .unwrap();
    let desc = AllocationDesc::new(Usage::DEVICE_LOCAL)
        .pool(pool)
        .within_budget();
    let in_pool = allocator
        .allocate(&Request::with_desc(
            requirements(MIB, 256),
            ResourceKind::Buffer,
            desc,
        ))
        .unwrap();
    released_one(&allocator, "custom pool", 200 * MIB);
    free(&allocator, in_pool);
    allocator.destroy_pool(pool).unwrap();
    free_all_and_finish(allocator, &device, long_lived);
}

/// A custom pool's `min_blocks` blocks, made by `create_pool`, are memory
/// a request asks for too: kept empty blocks give way to them as they do
/// to an allocation (before, the pool failed with `TooManyObjects` where
/// VMA's rule, keeping one empty block, left room for its block).
#[test]
fn kept_empty_blocks_give_way_to_a_pool_s_min_blocks() {
    for reserve in [1.0, 0.0] {
        let config = Config {
            empty_block_reserve: reserve,
            ..Config::default()
        };
        let (allocator, device) =
            allocator_with(FakeLayout::discrete().with_max_allocation_count(5), config);
        // Blocks of 64, 128 and 256 MiB in use; two more of 256 emptied.
        let long_lived = twenty_mib_buffers(&allocator, 15);
        let transient = twenty_mib_buffers(&allocator, 30);
        free_all(&allocator, transient);
        let pool = allocator
            .create_pool(&PoolDesc::new(1).block_size(16 * MIB).min_blocks(1))
            .unwrap_or_else(|error| panic!("reserve {reserve}: {error}"));
        let stats = allocator.stats();
        assert_eq!(stats.memory_types[1].empty_blocks, 2, "reserve {reserve}");
        assert_eq!(device.live_allocations().len(), 5, "reserve {reserve}");
        allocator.destroy_pool(pool).unwrap();
        free_all(&allocator, long_lived);
        finish(allocator, &device);
    }
}

/// Kept empty blocks give way to a request short of memory in any of its
/// memory types, not only in the first it tries: here the first type's
/// new block cannot be mapped (`MapFailed`, no want of memory), and the
/// next type's heap is full of kept empty blocks. VMA's rule (0.0) keeps
/// one, and leaves room.
#[test]
fn kept_empty_blocks_give_way_after_a_first_type_that_failed_otherwise() {
    // UPLOAD memory in type 2 (the 16 GiB system heap) or 4 (the 256 MiB BAR).
    let bar_or_system = |size: u64| {
        let mut request = buffer(size, 256, Usage::UPLOAD);
        request.requirements.memory_type_bits = 1 << 2 | 1 << 4;
        request
    };
    let in_bar = |size: u64| {
        let mut request = buffer(size, 256, Usage::UPLOAD);
        request.requirements.memory_type_bits = 1 << 4;
        request
    };
    for reserve in [1.0, 0.0] {
        let config = Config {
            empty_block_reserve: reserve,
            ..Config::default()
        };
        let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
        // The BAR's blocks: 16 and 32 MiB in use, two of 32 emptied.
        let long_lived: Vec<Allocation> = (0..6)
            .map(|_| allocator.allocate(&in_bar(8 * MIB)).unwrap())
            .collect();
        let transient: Vec<Allocation> = (0..8)
            .map(|_| allocator.allocate(&in_bar(8 * MIB)).unwrap())
            .collect();
        free_all(&allocator, transient);
        let kept = if reserve > 0.0 { 2 } else { 1 };
        assert_eq!(allocator.stats().memory_types[4].empty_blocks, kept);
        // Room for 40 MiB beside one kept empty block, not beside two.
        device.cap_heap(2, 120 * MIB);
        device.fail_map(1);
        let a = allocator
            .allocate(&bar_or_system(40 * MIB))
            .unwrap_or_else(|error| panic!("reserve {reserve}: {error}"));
        assert_eq!(a.memory_type(), 4, "reserve {reserve}");
        assert_eq!(allocator.stats().memory_types[4].empty_blocks, 1);
        free(&allocator, a);
        free_all(&allocator, long_lived);
        finish(allocator, &device);
    }
}

/// `count` 20 MiB upload buffers, in the system heap's upload type (2).
fn twenty_mib_uploads(allocator: &FakeAllocator, count: usize) -> Vec<Allocation> {
    (0..count)
        .map(|_| {
            allocator
                .allocate(&buffer(20 * MIB, 256, Usage::UPLOAD))
                .unwrap()
        })
        .collect()
}

/// Blocks of 64, 128 and three of 256 MiB in the upload type (2), the last
/// two empty and kept: 960 MiB of the system heap (1). Returns the
/// allocations in the others.
fn kept_upload_blocks(allocator: &FakeAllocator) -> Vec<Allocation> {
    let long_lived = twenty_mib_uploads(allocator, 15);
    free_all(allocator, twenty_mib_uploads(allocator, 30));
    assert_eq!(allocator.stats().memory_types[2].empty_blocks, 2);
    long_lived
}

/// A 300 MiB upload buffer, larger than any block (dedicated memory), in
/// the upload type (2) or the cached one (3): both in the system heap.
fn large_upload() -> Request<'static> {
    let mut request = buffer(300 * MIB, 256, Usage::UPLOAD);
    request.requirements.memory_type_bits = 1 << 2 | 1 << 3;
    request
}

/// When releasing the kept empty blocks but the largest leaves a request
/// still short of memory, the largest goes too and the request is tried
/// again in its first memory type: it neither fails nor leaves that type.
#[test]
fn every_kept_empty_block_gives_way_when_all_but_the_largest_are_not_enough() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let long_lived = kept_upload_blocks(&allocator);
    // 300 MiB fit beside the blocks in use (448 MiB), not beside one kept
    // block more (704).
    device.cap_heap(1, 800 * MIB);
    let large = allocator
        .allocate(&large_upload())
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(large.memory_type(), 2);
    assert!(large.is_dedicated());
    assert_eq!(allocator.stats().memory_types[2].empty_blocks, 0);
    free_all_and_finish(allocator, &device, long_lived.into_iter().chain([large]));
}

/// A memory type tried again once its kept empty blocks but the largest
/// are released, that fails then otherwise than for want of memory
/// (`MapFailed`), gives the request to the next type: its largest kept
/// block stays, as no want of memory asked for it.
#[test]
fn a_type_that_fails_otherwise_once_kept_blocks_went_keeps_its_largest() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let long_lived = kept_upload_blocks(&allocator);
    // 300 MiB fit beside one kept block (704 MiB), not beside two (960).
    device.cap_heap(1, 1100 * MIB);
    // The retry's memory objects, the first two mapped from now: its
    // dedicated memory, then the new block the type tries when dedicated
    // memory cannot be mapped.
    device.fail_map(1);
    device.fail_map(2);
    let large = allocator
        .allocate(&large_upload())
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(large.memory_type(), 3);
    assert!(large.mapped_ptr().is_some());
    assert_eq!(allocator.stats().memory_types[2].empty_blocks, 1);
    free_all_and_finish(allocator, &device, long_lived.into_iter().chain([large]));
}

/// The largest kept empty block a memory type's failed retry left (it
/// failed otherwise, `MapFailed`) gives way when the next type of its heap
/// lacks memory: that type is tried again without it. Before, the heap's
/// types counted as released once those beyond the largest went, and the
/// request failed with the largest kept. The driver's refusals are its
/// own here: the fake heap's cap has room for the next type, but a driver
/// may refuse memory a heap's bytes would allow (fragmentation, another
/// process's allocation).
#[test]
fn the_largest_kept_block_left_by_a_type_that_failed_otherwise_gives_way_later() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let long_lived = kept_upload_blocks(&allocator);
    device.cap_heap(1, 1100 * MIB);
    // The first type's retry cannot map its dedicated memory nor its new
    // block (calls 3 and 4); the next type's dedicated memory and block
    // (calls 5 and 6) are refused.
    device.fail_map(1);
    device.fail_map(2);
    device.fail_allocation(5, DeviceError::OutOfDeviceMemory);
    device.fail_allocation(6, DeviceError::OutOfDeviceMemory);
    let large = allocator
        .allocate(&large_upload())
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(large.memory_type(), 3);
    assert_eq!(allocator.stats().memory_types[2].empty_blocks, 0);
    free_all_and_finish(allocator, &device, long_lived.into_iter().chain([large]));
}

/// When releasing the kept empty blocks but the largest leaves a custom
/// pool's new block still short of memory, the largest goes too and the
/// block is tried again: the request does not fail.
#[test]
fn every_kept_empty_block_gives_way_to_a_pool_s_block_when_needed() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let long_lived = kept_upload_blocks(&allocator);
    let pool = allocator
        .create_pool(&PoolDesc::new(2).block_size(300 * MIB))
        .unwrap();
    // A 300 MiB block fits beside the blocks in use (448 MiB), not beside
    // one kept block more (704).
    device.cap_heap(1, 800 * MIB);
    let desc = AllocationDesc::new(Usage::UPLOAD).pool(pool);
    let in_pool = allocator
        .allocate(&Request::with_desc(
            requirements(MIB, 256),
            ResourceKind::Buffer,
            desc,
        ))
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(allocator.stats().memory_types[2].empty_blocks, 0);
    free(&allocator, in_pool);
    allocator.destroy_pool(pool).unwrap();
    free_all_and_finish(allocator, &device, long_lived);
}

/// A custom pool's block, tried again once the kept empty blocks but the
/// largest are released, that then cannot be mapped fails the request with
/// `MapFailed`: the largest kept block stays, as no want of memory asked
/// for it.
#[test]
fn a_pool_s_block_that_fails_otherwise_once_kept_blocks_went_leaves_the_largest() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let long_lived = kept_upload_blocks(&allocator);
    let pool = allocator
        .create_pool(&PoolDesc::new(2).block_size(200 * MIB))
        .unwrap();
    // A 200 MiB block fits beside one kept block (704 MiB), not beside two
    // (960).
    device.cap_heap(1, 1000 * MIB);
    device.fail_map(1);
    let desc = AllocationDesc::new(Usage::UPLOAD).pool(pool);
    let result = allocator.allocate(&Request::with_desc(
        requirements(MIB, 256),
        ResourceKind::Buffer,
        desc,
    ));
    assert_eq!(result.err(), Some(Error::MapFailed));
    assert_eq!(allocator.stats().memory_types[2].empty_blocks, 1);
    allocator.destroy_pool(pool).unwrap();
    free_all_and_finish(allocator, &device, long_lived);
}

/// A memory type tried again once kept empty blocks are released, that
/// fails then with an error no other type would mend (the host out of
/// memory), ends the request with that error: no other type is tried.
#[test]
fn a_retry_after_releasing_kept_blocks_that_fails_for_good_ends_the_request() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let long_lived = kept_upload_blocks(&allocator);
    device.cap_heap(1, 1100 * MIB);
    // The first two calls (dedicated memory, then a block of its size)
    // fail for the cap; the third is the retry's dedicated memory.
    device.fail_allocation(3, DeviceError::OutOfHostMemory);
    let calls = device.counters().allocate_calls;
    let result = allocator.allocate(&large_upload());
    assert_eq!(result.err(), Some(Error::OutOfHostMemory));
    assert_eq!(device.counters().allocate_calls, calls + 3);
    assert_eq!(allocator.stats().memory_types[2].empty_blocks, 1);
    free_all_and_finish(allocator, &device, long_lived);
}

/// A request refused otherwise than for want of memory releases no kept
/// empty block: for existing memory only, fitting none, or one whose
/// first type cannot map its memory, taken by the next type.
#[test]
fn a_refusal_not_for_want_of_memory_releases_no_kept_block() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let long_lived = kept_upload_blocks(&allocator);
    let result = allocator.allocate(&large_upload().existing_memory_only());
    assert_eq!(result.err(), Some(Error::NoRoomInExistingMemory));
    assert_eq!(allocator.stats().memory_types[2].empty_blocks, 2);
    // The first type's dedicated memory, then its block.
    device.fail_map(1);
    device.fail_map(2);
    let large = allocator
        .allocate(&large_upload())
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(large.memory_type(), 3);
    assert_eq!(allocator.stats().memory_types[2].empty_blocks, 2);
    free_all_and_finish(allocator, &device, long_lived.into_iter().chain([large]));
}

/// Kept empty blocks age out: `end_frame` releases the empty blocks but the
/// largest that stayed empty `Config::empty_block_frames` frames, and keeps
/// them with `u64::MAX`.
#[test]
fn kept_empty_blocks_go_after_empty_block_frames() {
    for (frames, kept_at_the_end) in [(3, 1), (u64::MAX, 2)] {
        let config = Config {
            empty_block_frames: frames,
            ..Config::default()
        };
        let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
        let long_lived = twenty_mib_buffers(&allocator, 15);
        // Emptied in frame 0: two 256 MiB blocks kept (300 MiB in use).
        free_all(&allocator, twenty_mib_buffers(&allocator, 30));
        let empty_blocks = || allocator.stats().memory_types[1].empty_blocks;
        assert_eq!(empty_blocks(), 2);
        for frame in 1..=3 {
            device.signal_fence(super::frames::end_frame(&allocator, &device));
            allocator.collect().unwrap();
            let expected = if frame < 3 { 2 } else { kept_at_the_end };
            assert_eq!(empty_blocks(), expected, "frames {frames}, frame {frame}");
        }
        // The block kept is the largest: a 256 MiB one.
        assert_eq!(
            allocator.stats().memory_types[1].block_bytes,
            (64 + 128 + 256 * (1 + kept_at_the_end)) * MIB
        );
        free_all_and_finish(allocator, &device, long_lived);
    }
}

/// More than two kept empty blocks age out too, all but the largest: a
/// pool that keeps several (`Config::empty_block_reserve` above 1) gives
/// them back once they stayed empty `Config::empty_block_frames` frames.
#[test]
fn three_kept_empty_blocks_go_after_empty_block_frames() {
    let config = Config {
        empty_block_frames: 1,
        empty_block_reserve: 2.0,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let long_lived = twenty_mib_buffers(&allocator, 15);
    // Emptied in frame 0: three 256 MiB blocks, kept (300 MiB in use).
    free_all(&allocator, twenty_mib_buffers(&allocator, 42));
    let empty_blocks = || allocator.stats().memory_types[1].empty_blocks;
    assert_eq!(empty_blocks(), 3);
    device.signal_fence(super::frames::end_frame(&allocator, &device));
    allocator.collect().unwrap();
    assert_eq!(empty_blocks(), 1);
    assert_eq!(
        allocator.stats().memory_types[1].block_bytes,
        (64 + 128 + 256 * 2) * MIB
    );
    free_all_and_finish(allocator, &device, long_lived);
}

/// Empty blocks past `Config::empty_block_reserve` go smallest first, and
/// only until the rest fit the reserve: a block emptying while the bytes
/// in use shrink releases it and one more, not every kept block.
#[test]
fn empty_blocks_past_the_reserve_go_only_until_the_rest_fit_it() {
    let config = Config {
        empty_block_reserve: 2.0,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let mut long_lived = twenty_mib_buffers(&allocator, 15);
    // Three empty 256 MiB blocks, kept (300 MiB in use).
    free_all(&allocator, twenty_mib_buffers(&allocator, 42));
    let empty_blocks = || allocator.stats().memory_types[1].empty_blocks;
    assert_eq!(empty_blocks(), 3);
    // The first three fill the 64 MiB block. Freed, 240 MiB stay in use,
    // which keep 480 MiB of empty blocks beside the largest: the 64 MiB
    // block goes, then one of 256 MiB, and the other two stay.
    free_all(&allocator, long_lived.drain(..3).collect());
    assert_eq!(empty_blocks(), 2);
    assert_eq!(
        allocator.stats().memory_types[1].block_bytes,
        (128 + 256 * 3) * MIB
    );
    free_all_and_finish(allocator, &device, long_lived);
}

/// `Config::empty_block_reserve` keeps empty blocks while their bytes are
/// at most the reserve times the bytes in use: exactly as many is kept.
#[test]
fn empty_blocks_exactly_at_the_reserve_are_kept() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let sixteen_mib = |count| -> Vec<Allocation> {
        (0..count)
            .map(|_| {
                allocator
                    .allocate(&buffer(16 * MIB, 256, Usage::DEVICE_LOCAL))
                    .unwrap()
            })
            .collect()
    };
    // 256 MiB in use, and two empty 256 MiB blocks: beside the largest,
    // 256 MiB, once the default reserve (1.0) times the bytes in use.
    let long_lived = sixteen_mib(16);
    free_all(&allocator, sixteen_mib(44));
    assert_eq!(allocator.stats().memory_types[1].empty_blocks, 2);
    free_all_and_finish(allocator, &device, long_lived);
}

/// Of two empty blocks of one size, the one that just emptied goes and the
/// one kept earlier stays (`Config::empty_block_reserve` 0, VMA's rule: one
/// empty block kept).
#[test]
fn of_two_empty_blocks_of_one_size_the_one_just_emptied_goes() {
    let config = Config {
        empty_block_reserve: 0.0,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let mut first = twenty_mib_buffers(&allocator, 21);
    // Blocks of 64 and 128 MiB, then two of 256 MiB, 12 buffers each.
    let kept_earlier = first.split_off(9);
    let just_emptied = twenty_mib_buffers(&allocator, 12);
    let memory = |buffers: &[Allocation]| {
        assert!(buffers.iter().all(|b| b.memory() == buffers[0].memory()));
        buffers[0].memory()
    };
    let (kept_memory, emptied_memory) = (memory(&kept_earlier), memory(&just_emptied));
    assert_ne!(kept_memory, emptied_memory);
    free_all(&allocator, kept_earlier);
    free_all(&allocator, just_emptied);
    assert_eq!(allocator.stats().memory_types[1].empty_blocks, 1);
    let next = allocator.allocate(&twenty_mib()).unwrap();
    assert_eq!(next.memory(), kept_memory);
    free(&allocator, next);
    free_all_and_finish(allocator, &device, first);
}

/// `collect_idle` ends the current frame as `end_frame` does, so a block
/// emptied after it counts its frames from the frame that follows: with
/// `Config::empty_block_frames` 2 it stays through one `end_frame` and goes
/// at the second, not at the first.
#[test]
fn kept_empty_blocks_count_their_frames_after_collect_idle() {
    let config = Config {
        empty_block_frames: 2,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let long_lived = twenty_mib_buffers(&allocator, 15);
    let transient = twenty_mib_buffers(&allocator, 30);
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.collect_idle() };
    assert_eq!(allocator.current_frame(), 1);
    // Emptied in frame 1: two 256 MiB blocks kept (300 MiB in use).
    free_all(&allocator, transient);
    let empty_blocks = || allocator.stats().memory_types[1].empty_blocks;
    assert_eq!(empty_blocks(), 2);
    for (frame, expected) in [(1, 2), (2, 1)] {
        let fence = super::frames::end_frame(&allocator, &device);
        device.signal_fence(fence);
        allocator.collect().unwrap();
        assert_eq!(empty_blocks(), expected, "after sealing frame {frame}");
    }
    free_all_and_finish(allocator, &device, long_lived);
}

/// A heap short of memory or budget releases the kept empty blocks of its
/// own memory types only: those of another heap do not stand in its way.
#[test]
fn a_heap_short_of_budget_releases_its_own_kept_blocks_only() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let upload = |count| -> Vec<Allocation> {
        (0..count)
            .map(|_| {
                allocator
                    .allocate(&buffer(20 * MIB, 256, Usage::UPLOAD))
                    .unwrap()
            })
            .collect()
    };
    // Two kept empty blocks in the VRAM type (1) and in the system-memory
    // upload type (2, another heap).
    let long_lived = twenty_mib_buffers(&allocator, 15);
    let long_lived_upload = upload(15);
    free_all(&allocator, twenty_mib_buffers(&allocator, 30));
    free_all(&allocator, upload(30));
    let empty = |t: usize| allocator.stats().memory_types[t].empty_blocks;
    assert_eq!((empty(1), empty(2)), (2, 2));
    // The VRAM heap's budget leaves no room for a 300 MiB dedicated buffer
    // unless a VRAM block goes.
    device.set_heap_budget(0, 1100 * MIB, 0);
    allocator.budgets();
    let large = allocator
        .allocate(&buffer(300 * MIB, 256, Usage::DEVICE_LOCAL).within_budget())
        .unwrap();
    assert_eq!((empty(1), empty(2)), (1, 2));
    let live = long_lived.into_iter().chain(long_lived_upload);
    free_all_and_finish(allocator, &device, live.chain([large]));
}

/// `allocate_many` makes one allocation per request, in their order, or
/// none: when a request fails, those made before it (a block range and
/// dedicated memory here) are freed and its error returned.
#[test]
fn allocate_many_is_all_or_nothing() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let requests = [
        buffer(4096, 256, Usage::DEVICE_LOCAL),
        buffer(1 << 20, 256, Usage::UPLOAD).dedicated(DedicatedPolicy::Always),
        buffer(100, 16, Usage::READBACK),
    ];
    let made = allocator.allocate_many(&requests).unwrap();
    let sizes: Vec<u64> = made.iter().map(Allocation::size).collect();
    assert_eq!(sizes, [4096, 1 << 20, 100]);
    assert!(made[1].is_dedicated());
    for allocation in made {
        free(&allocator, allocation);
    }

    let objects = device.live_allocations().len();
    let failing = [
        buffer(4096, 256, Usage::DEVICE_LOCAL),
        buffer(1 << 20, 256, Usage::UPLOAD).dedicated(DedicatedPolicy::Always),
        buffer(0, 16, Usage::READBACK),
        buffer(100, 16, Usage::READBACK),
    ];
    assert_eq!(allocator.allocate_many(&failing), Err(Error::ZeroSize));
    assert_eq!(allocator.stats().live_bytes(), 0);
    assert_eq!(allocator.stats().allocations(), 0);
    assert_eq!(
        device.live_allocations().len(),
        objects,
        "the dedicated memory is freed"
    );
    assert_eq!(allocator.allocate_many(&[]), Ok(Vec::new()));
    finish(allocator, &device);
}

/// `allocate_many` over requests that name a custom pool: one naming
/// another allocator's pool, or asking for existing memory only where
/// there is none, fails the call, and the pool's allocation made before it
/// is freed with the others (the pool is then empty and may be destroyed).
#[test]
fn allocate_many_frees_a_custom_pool_s_allocation_on_failure() {
    let (allocator, device) = allocator(FakeLayout::discrete());
    let (other, other_device) = super::allocator(FakeLayout::discrete());
    let pool = allocator.create_pool(&PoolDesc::new(1)).unwrap();
    let foreign = other.create_pool(&PoolDesc::new(1)).unwrap();
    let in_pool = |pool| {
        let desc = AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool);
        Request::with_desc(requirements(4096, 256), ResourceKind::Buffer, desc)
    };
    let existing_only = buffer(4096, 256, Usage::UPLOAD).existing_memory_only();
    for (last, error) in [
        (in_pool(foreign), Error::ForeignPool),
        (existing_only, Error::NoRoomInExistingMemory),
    ] {
        let requests = [buffer(4096, 256, Usage::DEVICE_LOCAL), in_pool(pool), last];
        assert_eq!(allocator.allocate_many(&requests), Err(error));
        assert_eq!(allocator.stats().allocations(), 0, "{error:?}");
        assert_eq!(allocator.pool_stats(&pool).unwrap().allocations(), 0);
    }
    allocator.destroy_pool(pool).unwrap();
    other.destroy_pool(foreign).unwrap();
    finish(allocator, &device);
    finish(other, &other_device);
}
