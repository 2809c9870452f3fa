//! Bad input gets a typed error and leaves the allocator consistent.

use crate::FakeTarget;
use ash::vk::{self, Handle};
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::device::DedicatedTarget;
use vk_suballoc::{
    AllocationDesc, Config, DedicatedHint, Error, Pool, PoolDesc, Request, ResourceKind, Usage,
};

use super::{allocator, buffer, finish, free, FakeAllocator};

const GIB: u64 = 1 << 30;

/// The error both entry points, `allocate` and `allocate_mut`, give for a
/// request that must fail.
fn rejected(allocator: &mut FakeAllocator, request: &Request<'_>) -> Error {
    let locked = allocator.allocate(request).expect_err("a bad request");
    let exclusive = allocator.allocate_mut(request).expect_err("a bad request");
    assert_eq!(locked, exclusive);
    locked
}

#[test]
fn bad_requests_are_typed_errors() {
    let (mut allocator, device) = allocator(FakeLayout::discrete());
    let live = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let before = allocator.stats();

    assert_eq!(
        rejected(&mut allocator, &buffer(0, 1, Usage::DEVICE_LOCAL)),
        Error::ZeroSize
    );
    assert_eq!(
        rejected(&mut allocator, &buffer(64, 48, Usage::DEVICE_LOCAL)),
        Error::AlignmentNotPowerOfTwo(48)
    );
    assert_eq!(
        rejected(&mut allocator, &buffer(64, 0, Usage::DEVICE_LOCAL)),
        Error::AlignmentNotPowerOfTwo(0)
    );
    // The driver requires dedicated memory, and no resource is named: the
    // memory could never be bound (VUID-vkBindBufferMemory-buffer-01444).
    let untargeted = buffer(4096, 256, Usage::DEVICE_LOCAL).driver_dedicated(DedicatedHint {
        required: true,
        preferred: true,
    });
    assert_eq!(
        rejected(&mut allocator, &untargeted),
        Error::MissingDedicatedTarget
    );
    let no_bits = Request::new(
        vk::MemoryRequirements {
            size: 64,
            alignment: 1,
            memory_type_bits: 0,
        },
        Usage::DEVICE_LOCAL,
        ResourceKind::Buffer,
    );
    assert_eq!(
        rejected(&mut allocator, &no_bits),
        Error::NoMemoryTypeBits(0)
    );
    // The discrete preset has 5 types: bit 7 names none of them.
    let missing_type = Request::new(
        vk::MemoryRequirements {
            size: 64,
            alignment: 1,
            memory_type_bits: 1 << 7,
        },
        Usage::DEVICE_LOCAL,
        ResourceKind::Buffer,
    );
    assert_eq!(
        rejected(&mut allocator, &missing_type),
        Error::NoMemoryTypeBits(1 << 7)
    );
    // Only device-local type 1 allowed, but the host must write: no type fits.
    let device_local_only = Request::new(
        vk::MemoryRequirements {
            size: 64,
            alignment: 1,
            memory_type_bits: 1 << 1,
        },
        Usage::UPLOAD,
        ResourceKind::Buffer,
    );
    assert!(matches!(
        rejected(&mut allocator, &device_local_only),
        Error::NoSuitableMemoryType {
            memory_type_bits: 2,
            ..
        }
    ));
    assert_eq!(
        rejected(&mut allocator, &buffer(100 * GIB, 1, Usage::DEVICE_LOCAL)),
        Error::SizeExceedsHeaps {
            size: 100 * GIB,
            largest_heap: 16 * GIB
        }
    );

    assert_eq!(allocator.stats(), before);
    free(&allocator, live);
    finish(allocator, &device);
}

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
    let (allocator, device) = super::allocator_with(layout, vk_suballoc::Config::default());
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

#[test]
fn device_address_needs_the_feature() {
    let (allocator, device) = allocator(FakeLayout::mobile());
    assert!(matches!(
        allocator.allocate(&buffer(64, 1, Usage::DEVICE_LOCAL | Usage::DEVICE_ADDRESS)),
        Err(Error::DeviceAddressNotEnabled)
    ));
    finish(allocator, &device);

    let (discrete, device) = super::allocator(FakeLayout::discrete());
    let a = discrete
        .allocate(&buffer(64, 1, Usage::DEVICE_LOCAL | Usage::DEVICE_ADDRESS))
        .unwrap();
    assert!(device.live_allocations().iter().all(|m| m.device_address));
    free(&discrete, a);
    finish(discrete, &device);
}

#[test]
fn foreign_allocations_are_rejected_and_change_nothing() {
    let (first, first_device) = allocator(FakeLayout::lavapipe());
    let (mut second, second_device) = allocator(FakeLayout::lavapipe());
    let mut a = first.allocate(&buffer(256, 1, Usage::UPLOAD)).unwrap();
    let b = second.allocate(&buffer(256, 1, Usage::UPLOAD)).unwrap();
    // SAFETY: no GPU work on the fake device.
    assert_eq!(unsafe { second.free(a) }, Err(Error::ForeignAllocation));
    a = first.allocate(&buffer(256, 1, Usage::UPLOAD)).unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { second.free_mut(a) }, Err(Error::ForeignAllocation));
    // `free` consumed the handle; get a new one to keep testing the other paths.
    a = first.allocate(&buffer(256, 1, Usage::UPLOAD)).unwrap();
    assert_eq!(
        second.mapped_slice_mut(&mut a).map(|s| s.len()),
        Err(Error::ForeignAllocation)
    );
    assert_eq!(second.flush(&a, 0..1), Err(Error::ForeignAllocation));
    assert!(!second.owns(&a));
    assert!(first.owns(&a));
    assert_eq!(second.stats().allocations(), 1);
    free(&first, a);
    free(&second, b);
    // The two rejected handles leaked their ranges in `first` until drop.
    finish(first, &first_device);
    finish(second, &second_device);
}

#[test]
fn invalid_configs_are_rejected() {
    let device = vk_suballoc::device::fake::FakeDevice::new(FakeLayout::lavapipe());
    // Each refused with the text of the rule it breaks, not merely some
    // `InvalidConfig` (another figure's refusal would pass that).
    for (text, config) in [
        (
            "large_heap_block_size must be non-zero",
            Config {
                large_heap_block_size: 0,
                ..Config::default()
            },
        ),
        (
            "budget_fraction must be within 0..=1",
            Config {
                budget_fraction: 1.5,
                ..Config::default()
            },
        ),
        (
            "initial_block_slots must be non-zero",
            Config {
                initial_block_slots: 0,
                ..Config::default()
            },
        ),
        (
            "max_frames_in_flight must be non-zero",
            Config {
                max_frames_in_flight: 0,
                ..Config::default()
            },
        ),
        (
            "budget_fraction must be within 0..=1",
            Config {
                budget_fraction: f64::NAN,
                ..Config::default()
            },
        ),
        (
            "small_buffer_limit must be at most 65536",
            Config {
                small_buffer_limit: 65537,
                ..Config::default()
            },
        ),
        // More slots than an offset allocator can have: every block would
        // fail to be made, reported as out of memory.
        (
            "initial_block_slots must be at most offset::MAX_SLOTS",
            Config {
                initial_block_slots: u32::MAX,
                ..Config::default()
            },
        ),
    ] {
        assert_eq!(
            vk_suballoc::Allocator::new(device.clone(), config).err(),
            Some(Error::InvalidConfig(text)),
            "{config:?}"
        );
    }
}

/// The defaults `Config`'s docs quote, figure by figure: engines tune
/// from them, so a changed default must change its doc too.
#[test]
fn config_defaults_are_the_documented_figures() {
    let config = Config::default();
    // large_heap_block_size "Default 256 MiB, as VMA".
    assert_eq!(config.large_heap_block_size, 256 << 20);
    // small_heap_limit "Default 1 GiB".
    assert_eq!(config.small_heap_limit, GIB);
    // initial_block_slots "Default 1024".
    assert_eq!(config.initial_block_slots, 1024);
    // budget_fraction "Default 0.8".
    assert_eq!(config.budget_fraction, 0.8);
    // max_padded_granularity "Default 4096".
    assert_eq!(config.max_padded_granularity, 4096);
    // max_frames_in_flight "Default 3".
    assert_eq!(config.max_frames_in_flight, 3);
    // small_buffer_limit "Default 16384".
    assert_eq!(config.small_buffer_limit, 16384);
    // debug_margin "0, the default".
    assert_eq!(config.debug_margin, 0);
    // detect_corruption "Default false".
    assert!(!config.detect_corruption);
    // empty_block_reserve "Default 1.0".
    assert_eq!(config.empty_block_reserve, 1.0);
    // empty_block_frames "Default 120".
    assert_eq!(config.empty_block_frames, 120);
    // debug_fill "Off, the default" ("Default false").
    assert!(!config.debug_fill);
    // heap_size_limits "0, the default for every heap".
    assert_eq!(config.heap_size_limits, [0; 16]);
    // allocation_backtraces "Off, the default".
    assert!(!config.allocation_backtraces);
    // log_allocations "Off, the default".
    assert!(!config.log_allocations);
    // The limits the docs quote, at their boundaries: accepted.
    let device = vk_suballoc::device::fake::FakeDevice::new(FakeLayout::lavapipe());
    for config in [
        Config {
            small_buffer_limit: 65536,
            ..Config::default()
        },
        Config {
            debug_margin: 65536,
            ..Config::default()
        },
        Config {
            initial_block_slots: vk_suballoc::offset::MAX_SLOTS,
            ..Config::default()
        },
    ] {
        assert!(vk_suballoc::Allocator::new(device.clone(), config).is_ok());
    }
    device.assert_clean();
}

/// The defaults the request, pool, ring and defragmentation descriptions'
/// docs quote, field by field, as `config_defaults_are_the_documented_figures`
/// checks `Config`'s: engines build these with `..Default::default()` (or
/// `new`) and read the docs for what the rest means.
#[test]
fn description_defaults_are_the_documented_figures() {
    use vk_suballoc::offset::Strategy;
    use vk_suballoc::{DedicatedPolicy, DefragmentationLimits, UploadRingDesc};

    let desc = AllocationDesc::new(Usage::UPLOAD);
    assert_eq!(desc.usage, Usage::UPLOAD);
    // dedicated: `DedicatedPolicy::Auto` is the default.
    assert_eq!(desc.dedicated, DedicatedPolicy::Auto);
    // within_budget, can_alias, existing_memory_only: asked for by their
    // builders, off otherwise; no name, priority or pool.
    assert!(!desc.within_budget && !desc.can_alias && !desc.existing_memory_only);
    assert_eq!((desc.name, desc.priority, desc.pool), (None, None, None));
    // min_alignment "0 (the default): none".
    assert_eq!(desc.min_alignment, 0);
    // excluded_memory_types "none (0) by default".
    assert_eq!(desc.excluded_memory_types, 0);
    // required_flags and preferred_flags "Empty by default".
    assert!(desc.required_flags.is_empty() && desc.preferred_flags.is_empty());
    // strategy "`Strategy::MinTime` by default".
    assert_eq!(desc.strategy, Strategy::MinTime);
    // `From<Usage>`: "`usage` and defaults for the rest"; `Default`: the
    // same with an empty usage.
    assert_eq!(AllocationDesc::from(Usage::UPLOAD), desc);
    assert_eq!(
        AllocationDesc::default(),
        AllocationDesc::new(Usage::default())
    );
    // Request's kind: "`ResourceKind::Unknown` by default".
    assert_eq!(Request::default().kind, ResourceKind::Unknown);

    // PoolDesc::new: "default blocks and no limit".
    let pool = PoolDesc::new(3);
    assert_eq!(pool.memory_type, 3);
    // block_size "0 (the default)", min_blocks none made, max_blocks
    // "`None`: no limit".
    assert_eq!(
        (pool.block_size, pool.min_blocks, pool.max_blocks),
        (0, 0, None)
    );
    assert_eq!((pool.name, pool.priority), (None, None));
    // export_handle_types "empty (the default): none".
    assert!(pool.export_handle_types.is_empty());
    // min_alignment "0 (the default): none".
    assert_eq!(pool.min_alignment, 0);

    let ring = UploadRingDesc::default();
    // size "Default 4 MiB".
    assert_eq!(ring.size, 4 << 20);
    // usage "`UPLOAD | DEVICE_LOCAL` (the default)".
    assert_eq!(ring.usage, Usage::UPLOAD | Usage::DEVICE_LOCAL);
    // buffer_usage: the default's five core usages.
    assert_eq!(
        ring.buffer_usage,
        vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::UNIFORM_BUFFER
            | vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::VERTEX_BUFFER
            | vk::BufferUsageFlags::INDEX_BUFFER
    );
    // grow "Default false"; no name.
    assert!(!ring.grow);
    assert_eq!(ring.name, None);
    // required_flags and preferred_flags "Empty by default".
    assert!(ring.required_flags.is_empty() && ring.preferred_flags.is_empty());
    // min_alignment "0 (the default): none".
    assert_eq!(ring.min_alignment, 0);

    let limits = DefragmentationLimits::default();
    // max_moves and max_bytes "No limit by default".
    assert_eq!(limits.max_moves, usize::MAX);
    assert_eq!(limits.max_bytes, u64::MAX);
    // max_used_percent "50 by default".
    assert_eq!(limits.max_used_percent, 50);
    // split_blocks and compact_blocks "Off by default".
    assert!(!limits.split_blocks && !limits.compact_blocks);
}

/// `config()` hands back the configuration the allocator was created with,
/// not the defaults: engines read their own settings back from it.
#[test]
fn the_configuration_is_kept() {
    let config = Config {
        large_heap_block_size: 64 << 20,
        budget_fraction: 0.5,
        small_buffer_limit: 1024,
        max_frames_in_flight: 5,
        ..Config::default()
    };
    assert_ne!(config, Config::default());
    let (allocator, device) = super::allocator_with(FakeLayout::discrete(), config);
    assert_eq!(*allocator.config(), config);
    finish(allocator, &device);
}

/// Allocations in non-coherent memory start on an atom through a
/// power-of-two alignment, so an atom that is not one (no driver reports
/// one) is refused up front rather than misplaced later.
#[test]
fn a_non_coherent_atom_that_is_not_a_power_of_two_is_refused() {
    let mut layout = FakeLayout::mobile();
    layout.non_coherent_atom_size = 48;
    let device = vk_suballoc::device::fake::FakeDevice::new(layout);
    assert_eq!(
        vk_suballoc::Allocator::new(device.clone(), Config::default()).err(),
        Some(Error::UnsupportedDevice(
            "nonCoherentAtomSize must be a power of two"
        ))
    );
    device.assert_clean();
}

#[test]
fn ranges_past_the_allocation_are_rejected() {
    let (allocator, device) = allocator(FakeLayout::mobile());
    let mut a = allocator
        .allocate(&buffer(1000, 1, Usage::READBACK))
        .unwrap();
    assert_eq!(
        allocator.invalidate(&mut a, 10..1001),
        Err(Error::RangeOutOfBounds {
            start: 10,
            end: 1001,
            size: 1000
        })
    );
    let gpu_only = allocator
        .allocate(&buffer(1000, 1, Usage::DEVICE_LOCAL))
        .unwrap();
    assert_eq!(
        allocator.mapped_slice(&gpu_only).map(|s| s.len()),
        Err(Error::NotHostVisible)
    );
    assert_eq!(
        allocator.flush(&gpu_only, 0..10),
        Err(Error::NotHostVisible)
    );
    free(&allocator, a);
    free(&allocator, gpu_only);
    finish(allocator, &device);
}

/// A usage no memory type suits gets a message that names what the usage
/// needs: a newcomer who forgot buffer device address reads the fix in it.
#[test]
fn an_unsuitable_usage_says_what_it_needs() {
    // Mobile: no buffer device address; type 0 is device-local only.
    let (mut allocator, device) = allocator(FakeLayout::mobile());
    let address = rejected(
        &mut allocator,
        &buffer(4096, 256, Usage::DEVICE_LOCAL | Usage::DEVICE_ADDRESS),
    );
    assert_eq!(address, Error::DeviceAddressNotEnabled);
    let message = address.to_string();
    assert!(
        message.contains("DeviceFeatures::buffer_device_address"),
        "{message}"
    );
    assert!(!message.contains("HOST_VISIBLE"), "{message}");
    let mut readback = buffer(4096, 256, Usage::READBACK);
    readback.requirements.memory_type_bits = 1;
    let message = rejected(&mut allocator, &readback).to_string();
    assert!(message.contains("HOST_VISIBLE"), "{message}");
    assert!(!message.contains("buffer_device_address"), "{message}");
    finish(allocator, &device);
}

/// `Allocator::allocate` checks a bad request in the documented order
/// (its `# Errors`), with no Vulkan call: a request with several faults
/// gets the first one's error, on the default path and on a custom pool's,
/// through `allocate` and `allocate_mut` alike. Each step below mends the
/// fault the step before was refused for and keeps the later ones, so a
/// check that moved ahead of an earlier one changes an answer.
#[test]
fn bad_requests_are_checked_in_the_documented_order() {
    // No buffer device address; type 1 is device-local only, in an 8 GiB
    // heap; maxMemoryAllocationSize 4 GiB.
    let mut layout = FakeLayout::discrete();
    layout.buffer_device_address = false;
    let (mut allocator, device) = super::allocator_with(layout.clone(), Config::default());
    const VRAM: u32 = 1;
    let image = DedicatedTarget::Image(vk::Image::from_raw(1));
    let own_buffer = DedicatedTarget::Buffer(vk::Buffer::from_raw(2));
    let required = DedicatedHint {
        required: true,
        preferred: true,
    };
    let address = Usage::UPLOAD | Usage::DEVICE_ADDRESS;
    // size, alignment, min_alignment, dedicated target, memoryTypeBits, usage.
    type Step = (u64, u64, u64, Option<DedicatedTarget>, u32, Usage);
    let request = |(size, alignment, min_alignment, target, bits, usage): Step| {
        let requirements = vk::MemoryRequirements {
            size,
            alignment,
            memory_type_bits: bits,
        };
        let desc = AllocationDesc::new(usage).min_alignment(min_alignment);
        let request =
            Request::with_desc(requirements, ResourceKind::Buffer, desc).driver_dedicated(required);
        match target {
            Some(target) => request.fake_target(target),
            None => request,
        }
    };
    let default_path: [(Step, Error); 10] = [
        ((0, 48, 3, None, 0, address), Error::ZeroSize),
        (
            (100 * GIB, 48, 3, None, 0, address),
            Error::AlignmentNotPowerOfTwo(48),
        ),
        (
            (100 * GIB, 256, 3, None, 0, address),
            Error::AlignmentNotPowerOfTwo(3),
        ),
        (
            (100 * GIB, 256, 0, None, 0, address),
            Error::MissingDedicatedTarget,
        ),
        (
            (100 * GIB, 256, 0, Some(image), 0, address),
            Error::DedicatedTargetMismatch,
        ),
        (
            (100 * GIB, 256, 0, Some(own_buffer), 0, address),
            Error::NoMemoryTypeBits(0),
        ),
        // The device-address feature comes before the size checks.
        (
            (100 * GIB, 256, 0, Some(own_buffer), 1 << VRAM, address),
            Error::DeviceAddressNotEnabled,
        ),
        (
            (
                100 * GIB,
                256,
                0,
                Some(own_buffer),
                1 << VRAM,
                Usage::UPLOAD,
            ),
            Error::SizeExceedsHeaps {
                size: 100 * GIB,
                largest_heap: 8 * GIB,
            },
        ),
        // Within the heap and past maxMemoryAllocationSize: the usage
        // first.
        (
            (6 * GIB, 256, 0, Some(own_buffer), 1 << VRAM, Usage::UPLOAD),
            Error::NoSuitableMemoryType {
                memory_type_bits: 1 << VRAM,
                usage: Usage::UPLOAD,
            },
        ),
        (
            (
                6 * GIB,
                256,
                0,
                Some(own_buffer),
                1 << VRAM,
                Usage::DEVICE_LOCAL,
            ),
            Error::SizeExceedsMaxAllocation {
                size: 6 * GIB,
                max: 4 * GIB,
            },
        ),
    ];
    for (step, expected) in default_path {
        assert_eq!(
            rejected(&mut allocator, &request(step)),
            expected,
            "{step:?}"
        );
    }

    // A custom pool's requests: another allocator's pool first, then the
    // same checks against the pool's type (PoolTypeNotAllowed for
    // NoMemoryTypeBits), then a destroyed pool.
    let (other, other_device) = super::allocator_with(layout, Config::default());
    let foreign = other.create_pool(&PoolDesc::new(VRAM)).unwrap();
    let destroyed = allocator.create_pool(&PoolDesc::new(VRAM)).unwrap();
    allocator.destroy_pool(destroyed).unwrap();
    let in_pool = |pool: Pool, step: Step| {
        let mut request = request(step);
        request.desc.pool = Some(pool);
        request
    };
    let all_faults = (0, 48, 3, None, 1, address);
    assert_eq!(
        rejected(&mut allocator, &in_pool(foreign, all_faults)),
        Error::ForeignPool
    );
    let pool_path: [(Step, Error); 11] = [
        (all_faults, Error::ZeroSize),
        (
            (100 * GIB, 48, 3, None, 1, address),
            Error::AlignmentNotPowerOfTwo(48),
        ),
        (
            (100 * GIB, 256, 3, None, 1, address),
            Error::AlignmentNotPowerOfTwo(3),
        ),
        (
            (100 * GIB, 256, 0, None, 1, address),
            Error::MissingDedicatedTarget,
        ),
        (
            (100 * GIB, 256, 0, Some(image), 1, address),
            Error::DedicatedTargetMismatch,
        ),
        (
            (100 * GIB, 256, 0, Some(own_buffer), 1, address),
            Error::PoolTypeNotAllowed {
                memory_type: VRAM,
                memory_type_bits: 1,
            },
        ),
        (
            (100 * GIB, 256, 0, Some(own_buffer), !0, address),
            Error::DeviceAddressNotEnabled,
        ),
        (
            (100 * GIB, 256, 0, Some(own_buffer), !0, Usage::UPLOAD),
            Error::SizeExceedsHeaps {
                size: 100 * GIB,
                largest_heap: 8 * GIB,
            },
        ),
        (
            (6 * GIB, 256, 0, Some(own_buffer), !0, Usage::UPLOAD),
            // The pool's type, the one type the request could take.
            Error::NoSuitableMemoryType {
                memory_type_bits: 1 << VRAM,
                usage: Usage::UPLOAD,
            },
        ),
        (
            (6 * GIB, 256, 0, Some(own_buffer), !0, Usage::DEVICE_LOCAL),
            Error::SizeExceedsMaxAllocation {
                size: 6 * GIB,
                max: 4 * GIB,
            },
        ),
        (
            (4096, 256, 0, Some(own_buffer), !0, Usage::DEVICE_LOCAL),
            Error::StalePool,
        ),
    ];
    for (step, expected) in pool_path {
        let pooled = in_pool(destroyed, step);
        assert_eq!(rejected(&mut allocator, &pooled), expected, "{step:?}");
    }
    // None of it reached the driver.
    assert_eq!(device.counters().allocate_calls, 0);

    // Then the pool's own limits: a fixed block size before a full pool.
    let pool = allocator
        .create_pool(&PoolDesc::new(VRAM).block_size(1 << 20).max_blocks(1))
        .unwrap();
    let fill = Request::with_desc(
        super::requirements(1 << 20, 256),
        ResourceKind::Buffer,
        AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool),
    );
    let full = allocator.allocate(&fill).unwrap();
    let mut larger = fill;
    larger.requirements.size = (1 << 20) + 1;
    assert_eq!(
        rejected(&mut allocator, &larger),
        Error::TooLargeForPool {
            size: (1 << 20) + 256,
            block_size: 1 << 20,
        }
    );
    let mut smaller = fill;
    smaller.requirements.size = 4096;
    assert_eq!(
        rejected(&mut allocator, &smaller),
        Error::PoolFull { max_blocks: 1 }
    );
    free(&allocator, full);
    allocator.destroy_pool(pool).unwrap();
    other.destroy_pool(foreign).unwrap();
    finish(other, &other_device);
    finish(allocator, &device);
}
