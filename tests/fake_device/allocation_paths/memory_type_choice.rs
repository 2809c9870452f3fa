//! Which memory type a request gets: each preset's type for each usage, the
//! types' properties as the device reports them, `ALLOW_TRANSFER_INSTEAD`
//! taking the BAR then unmapped VRAM, unwanted flags outranking the driver's
//! order and equal types keeping it, AMD's device-coherent types only with
//! their feature and then never an ordinary request's fallback,
//! `AllocationDesc::memory_type_bits` narrowing the
//! candidates, the choices that differ from VMA's, and a device with no
//! cached memory (a Raspberry Pi) serving every usage.

use ash::vk;
use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::device::{AllocateInfo, AllocationFlags, MemoryDeviceExt};
use vk_suballoc::{Allocation, Error, Usage};

use super::super::{allocator, buffer, finish, free};

use super::MIB;

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
/// allocator's `Debug` form counts them. AMD's device-coherent types carry
/// `DEVICE_COHERENT_AMD`, as VMA's `vmaGetMemoryTypeProperties` reports it:
/// an engine finds its crash-breadcrumb type by that bit.
#[test]
fn memory_type_properties_are_the_devices() {
    for layout in FakeLayout::presets() {
        let (name, types) = (layout.name, layout.memory_types.clone());
        let amd_types = layout.amd_device_coherent_types;
        let (allocator, device) = allocator(layout);
        for (index, ty) in types.iter().enumerate() {
            let flags = allocator.memory_type_properties(index as u32);
            let mut want = vk::MemoryPropertyFlags::from_raw(u32::from(ty.props.bits()));
            if amd_types & (1 << index) != 0 {
                want |= vk::MemoryPropertyFlags::DEVICE_COHERENT_AMD;
            }
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
    let (integrated, device) = super::super::allocator(FakeLayout::integrated());
    let direct = integrated.allocate(&buffer(MIB, 256, usage)).unwrap();
    assert_eq!(direct.memory_type(), 1);
    assert!(direct.mapped_ptr().is_some());
    free(&integrated, direct);
    finish(integrated, &device);
}

/// `PREFER_HOST` (VMA's `AUTO_PREFER_HOST`) keeps GPU-only data out of
/// VRAM: system memory while its heap has room (the type the host cannot
/// map first, as the driver lists it; the write-combined one when that is
/// ruled out, mapped as every host-visible block is), then VRAM once system
/// memory is full. With `UPLOAD | DEVICE_LOCAL` it is staging, not the BAR.
#[test]
fn prefer_host_keeps_gpu_data_out_of_vram_while_system_memory_has_room() {
    let parked = Usage::DEVICE_LOCAL | Usage::PREFER_HOST;
    // discrete: 0 none and 2 HV|HC, 3 HV|HC|cached in system memory (heap
    // 1), 1 DL in VRAM (heap 0), 4 the BAR (heap 2).
    let (allocator, device) = allocator(FakeLayout::discrete());
    let unmapped = allocator.allocate(&buffer(MIB, 256, parked)).unwrap();
    assert_eq!(unmapped.memory_type(), 0);
    assert_eq!(unmapped.mapped_ptr(), None);
    let mut request = buffer(MIB, 256, parked);
    request.desc = request.desc.memory_type_bits(!1);
    let write_combined = allocator.allocate(&request).unwrap();
    assert_eq!(write_combined.memory_type(), 2);
    let staging = Usage::UPLOAD | Usage::DEVICE_LOCAL | Usage::PREFER_HOST;
    let staged = allocator.allocate(&buffer(MIB, 256, staging)).unwrap();
    assert_eq!(staged.memory_type(), 2);
    assert!(staged.mapped_ptr().is_some());
    // System memory is full: VRAM, rather than a failure.
    device.cap_heap(1, device.heap_usage()[1]);
    let in_vram = allocator.allocate(&buffer(64 * MIB, 256, parked)).unwrap();
    assert_eq!(in_vram.memory_type(), 1);
    assert_eq!(in_vram.mapped_ptr(), None);
    for a in [unmapped, write_combined, staged, in_vram] {
        free(&allocator, a);
    }
    finish(allocator, &device);
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
    crate::assert_rules(
        &raw.violations(),
        &["VUID-vkAllocateMemory-deviceCoherentMemory-02790"; 2],
        "device-coherent types",
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
        super::super::allocator(FakeLayout::amd().with_amd_device_coherent_memory(true));
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

/// With their feature on, AMD's device-coherent (and uncached) types take
/// only the requests whose `memoryTypeBits` allow no other suitable type
/// (crash breadcrumbs), as the README says: not an ordinary request that
/// the other types turn down. A request for existing memory only, with
/// VRAM's blocks full, fails rather than take room in a breadcrumb
/// buffer's uncached block, and one whose every ordinary type fails to
/// map its new memory fails rather than make memory of an AMD type.
#[test]
fn amd_device_coherent_types_take_no_ordinary_request() {
    // amd: 0 DL, 1 HV|HC, 2 DL|HV|HC (BAR), 3 HV|HC|cached, 4-7 the same
    // and device-coherent, uncached.
    let (allocator, device) = allocator(FakeLayout::amd().with_amd_device_coherent_memory(true));
    let mut breadcrumbs = buffer(4096, 256, Usage::UPLOAD | Usage::DEVICE_LOCAL);
    breadcrumbs.requirements.memory_type_bits = 0b1111_0000;
    let breadcrumbs = allocator.allocate(&breadcrumbs).unwrap();
    assert_eq!(breadcrumbs.memory_type(), 6);
    for usage in [Usage::DEVICE_LOCAL, Usage::UPLOAD | Usage::DEVICE_LOCAL] {
        let mut opportunistic = buffer(MIB, 256, usage);
        opportunistic.desc = opportunistic.desc.existing_memory_only();
        assert_eq!(
            allocator
                .allocate(&opportunistic)
                .map(|a| a.memory_type())
                .err(),
            Some(Error::NoRoomInExistingMemory),
            "{usage:?}"
        );
    }
    // Every map of a new block or dedicated memory fails: the ordinary
    // host-visible types (2, 1, 3) all give up; type 6 must not be next.
    for nth in 1..=16 {
        device.fail_map(nth);
    }
    let refused = allocator.allocate(&buffer(MIB, 256, Usage::UPLOAD | Usage::DEVICE_LOCAL));
    let refused = refused.map(|a| a.memory_type());
    assert_eq!(refused, Err(Error::MapFailed));
    free(&allocator, breadcrumbs);
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

/// Where the first memory type differs from VMA's (3.3, measured with
/// `vmaFindMemoryTypeIndexFor{Buffer,Image}Info` on the fake-memory layer's
/// profiles), as the README's "Coming from VMA" lists it: VMA counts
/// missing preferred and present unwanted flags alike and takes the lowest
/// index of a tie; `Usage` weighs them.
#[test]
fn choices_that_differ_from_vma_are_the_documented_ones() {
    use gpu_alloc_types::MemoryPropertyFlags as Props;
    let first = |layout: &FakeLayout, bits: u32, usage: Usage| {
        let (allocator, device) = allocator(layout.clone());
        let chosen = allocator.memory_type_for(bits, usage);
        finish(allocator, &device);
        chosen
    };
    // TRANSIENT without lazily allocated memory (a desktop GPU, or the
    // lazy type ruled out): device-local memory, where VMA's
    // GPU_LAZILY_ALLOCATED fails. discrete: 1 DL; mobile: 0 DL, 3 lazy.
    assert_eq!(first(&FakeLayout::discrete(), !0, Usage::TRANSIENT), Ok(1));
    assert_eq!(first(&FakeLayout::mobile(), !0, Usage::TRANSIENT), Ok(3));
    assert_eq!(
        first(&FakeLayout::mobile(), !(1 << 3), Usage::TRANSIENT),
        Ok(0)
    );
    // Host access takes the coherent type of two alike; VMA the first.
    // apple: 1 DL|HV|cached (managed, non-coherent), 2 DL|HV|HC|cached.
    for usage in [
        Usage::UPLOAD,
        Usage::UPLOAD | Usage::DEVICE_LOCAL,
        Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD,
        Usage::READBACK,
    ] {
        assert_eq!(first(&FakeLayout::apple(), !0, usage), Ok(2), "{usage:?}");
    }
    // Staging without the write-combined system type: cached system memory
    // before the BAR (VMA ties them and takes the BAR, listed first on AMD).
    // amd: 1 HV|HC, 2 DL|HV|HC (BAR), 3 HV|HC|cached.
    assert_eq!(first(&FakeLayout::amd(), !(1 << 1), Usage::UPLOAD), Ok(3));
    // ... but coherent before not: where the other system type is not
    // coherent, the BAR (VMA: the cached system type).
    let mut non_coherent = FakeLayout::discrete();
    non_coherent.memory_types[3]
        .props
        .remove(Props::HOST_COHERENT);
    assert_eq!(first(&non_coherent, !(1 << 2), Usage::UPLOAD), Ok(4));
    // GPU-only data without the device-only type, on a device whose other
    // types are all host-visible: uncached before cached, whatever the
    // order (VMA: the first listed). mobile with 1 and 2 swapped:
    // 0 DL, 1 DL|HV|cached, 2 DL|HV|HC.
    let mut mobile = FakeLayout::mobile();
    mobile.memory_types.swap(1, 2);
    assert_eq!(first(&mobile, !1, Usage::DEVICE_LOCAL), Ok(2));
    // ALLOW_TRANSFER_INSTEAD on an integrated GPU with no host-visible
    // type allowed: device-local memory, unmapped (VMA requires
    // host-visible memory on integrated GPUs and fails).
    let optional = Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD;
    let (allocator, device) = allocator(FakeLayout::integrated());
    let mut request = buffer(4096, 256, optional);
    request.desc = request.desc.memory_type_bits(1);
    let staged = allocator.allocate(&request).unwrap();
    assert_eq!(staged.memory_type(), 0);
    assert_eq!(staged.mapped_ptr(), None);
    free(&allocator, staged);
    finish(allocator, &device);
}

/// A Raspberry Pi 4 or 5 (Mesa's V3DV) lists one memory type, device-local,
/// host-visible and coherent, and nothing cached. VMA's
/// `HOST_ACCESS_RANDOM` required `HOST_CACHED` there and failed every
/// readback buffer (GPUOpen-LibrariesAndSDKs/VulkanMemoryAllocator issue
/// #362; the validation layers' GPU-AV hit the same on a Pi 5, their PR
/// #12305): every usage takes that one type, mapped when it asks for host
/// access or not (its blocks are host-visible), and a preference for
/// cached memory is only a preference.
#[test]
fn a_device_without_cached_memory_serves_every_usage() {
    use gpu_alloc_types::MemoryPropertyFlags as Props;
    let mut v3dv = FakeLayout::lavapipe();
    v3dv.name = "v3dv";
    v3dv.memory_types[0].props = Props::DEVICE_LOCAL | Props::HOST_VISIBLE | Props::HOST_COHERENT;
    v3dv.memory_heaps[0].size = 969_521_152;
    let usages = [
        Usage::DEVICE_LOCAL,
        Usage::UPLOAD,
        Usage::UPLOAD | Usage::DEVICE_LOCAL,
        Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD,
        Usage::READBACK,
        Usage::TRANSIENT,
        Usage::DEVICE_LOCAL | Usage::PREFER_HOST,
        Usage::UPLOAD | Usage::PREFER_HOST,
        Usage::UPLOAD | Usage::ALLOW_TRANSFER_INSTEAD | Usage::PREFER_HOST,
    ];
    let (allocator, device) = allocator(v3dv);
    for usage in usages {
        assert_eq!(allocator.memory_type_for(!0, usage), Ok(0), "{usage:?}");
        let allocation = allocator.allocate(&buffer(65536, 256, usage)).unwrap();
        assert_eq!(allocation.memory_type(), 0, "{usage:?}");
        // Host-visible blocks are mapped whatever the usage.
        assert!(allocation.mapped_ptr().is_some(), "{usage:?}");
        free(&allocator, allocation);
    }
    let mut cached = buffer(65536, 256, Usage::READBACK);
    cached.desc = cached
        .desc
        .preferred_flags(vk::MemoryPropertyFlags::HOST_CACHED);
    let allocation = allocator.allocate(&cached).unwrap();
    assert_eq!(allocation.memory_type(), 0);
    assert!(allocation.mapped_ptr().is_some());
    free(&allocator, allocation);
    // Required, it rules the one type out: a typed error, no memory made.
    let objects = device.counters().allocate_calls;
    cached.desc = cached
        .desc
        .required_flags(vk::MemoryPropertyFlags::HOST_CACHED);
    assert_eq!(
        allocator.allocate(&cached).map(|_| ()),
        Err(Error::MissingRequiredFlags {
            memory_type_bits: 0b1,
            required: vk::MemoryPropertyFlags::HOST_CACHED,
        })
    );
    assert_eq!(device.counters().allocate_calls, objects);
    finish(allocator, &device);
}
