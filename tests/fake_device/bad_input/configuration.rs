//! Configurations: the invalid ones refused with a typed error, the
//! defaults of `Config` and of the descriptions the documented figures, the
//! configuration kept as given, and a non-coherent atom that is not a
//! power of two refused.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{AllocationDesc, Config, Error, PoolDesc, Request, ResourceKind, Usage};

use crate::finish;

use super::GIB;

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
    // strict_host_access "Off, the default".
    assert!(!config.strict_host_access);
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
    let (allocator, device) = crate::allocator_with(FakeLayout::discrete(), config);
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
