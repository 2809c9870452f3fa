//! `Config` figures at and past their limits: refused with
//! `InvalidConfig` or, where valid, working, and a huge
//! `max_frames_in_flight` that must not reserve a huge queue. The
//! config's edges, apart from the device's and the calls'.

use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::{Allocator, Config, Error, ResourceKind, Usage};

use super::super::{buffer, finish, free};

/// `max_frames_in_flight` sizes a reservation, not a limit: a huge figure
/// must not make `Allocator::new` reserve room for that many frames (at
/// `u32::MAX`, 240 GB: the process aborted). Frames past it still queue.
#[test]
fn a_huge_frames_in_flight_figure_reserves_no_huge_queue() {
    let config = Config {
        max_frames_in_flight: u32::MAX,
        ..Config::default()
    };
    let (allocator, device) = super::super::allocator_with(FakeLayout::lavapipe(), config);
    assert_eq!(allocator.config().max_frames_in_flight, u32::MAX);
    let fences: Vec<_> = (0..100)
        .map(|_| {
            let a = allocator.allocate(&buffer(256, 1, Usage::UPLOAD)).unwrap();
            allocator.free_after_frame(a).unwrap();
            let fence = device.create_fence();
            // SAFETY: fake fences, signalled below.
            unsafe { allocator.end_frame(fence) }.unwrap();
            fence
        })
        .collect();
    assert_eq!(allocator.frames_in_flight(), 100);
    fences.iter().for_each(|&fence| device.signal_fence(fence));
    assert_eq!(allocator.collect().map(|c| c.frees), Ok(100));
    finish(allocator, &device);
}

/// `Config` figures at and past their limits: refused with
/// `InvalidConfig`, or, where valid, working.
#[test]
fn config_figures_at_their_limits() {
    let config = |change: fn(&mut Config)| {
        let mut config = Config::default();
        change(&mut config);
        config
    };
    // Each refused with the text of the rule it breaks (`Allocator::new`'s
    // checks, one per figure), not merely some `InvalidConfig`: a
    // refusal for another figure's rule would pass a variant-only check.
    const BLOCK_SIZE: &str = "large_heap_block_size must be non-zero";
    const FRACTION: &str = "budget_fraction must be within 0..=1";
    const SMALL_BUFFER: &str = "small_buffer_limit must be at most 65536";
    const NO_SLOTS: &str = "initial_block_slots must be non-zero";
    const TOO_MANY_SLOTS: &str = "initial_block_slots must be at most offset::MAX_SLOTS";
    const FRAMES: &str = "max_frames_in_flight must be non-zero";
    const RESERVE: &str = "empty_block_reserve must be a number, at least 0";
    let invalid = [
        (BLOCK_SIZE, config(|c| c.large_heap_block_size = 0)),
        (FRACTION, config(|c| c.budget_fraction = f64::NAN)),
        (FRACTION, config(|c| c.budget_fraction = -0.01)),
        (FRACTION, config(|c| c.budget_fraction = 1.01)),
        (FRACTION, config(|c| c.budget_fraction = f64::INFINITY)),
        (FRACTION, config(|c| c.budget_fraction = f64::NEG_INFINITY)),
        (SMALL_BUFFER, config(|c| c.small_buffer_limit = 65537)),
        (SMALL_BUFFER, config(|c| c.small_buffer_limit = u64::MAX)),
        (NO_SLOTS, config(|c| c.initial_block_slots = 0)),
        (
            TOO_MANY_SLOTS,
            config(|c| c.initial_block_slots = vk_suballoc::offset::MAX_SLOTS + 1),
        ),
        (TOO_MANY_SLOTS, config(|c| c.initial_block_slots = u32::MAX)),
        (FRAMES, config(|c| c.max_frames_in_flight = 0)),
        (RESERVE, config(|c| c.empty_block_reserve = f64::NAN)),
        (RESERVE, config(|c| c.empty_block_reserve = -0.5)),
        (
            RESERVE,
            config(|c| c.empty_block_reserve = f64::NEG_INFINITY),
        ),
    ];
    let device = FakeDevice::new(FakeLayout::discrete());
    for (text, config) in invalid {
        assert_eq!(
            Allocator::new(device.clone(), config).err(),
            Some(Error::InvalidConfig(text)),
            "{config:?}"
        );
    }
    let valid = [
        config(|c| c.large_heap_block_size = 1),
        config(|c| c.large_heap_block_size = u64::MAX),
        config(|c| c.small_heap_limit = 0),
        config(|c| c.small_heap_limit = u64::MAX),
        config(|c| c.budget_fraction = 0.0),
        config(|c| c.budget_fraction = -0.0),
        config(|c| c.budget_fraction = 1.0),
        config(|c| c.empty_block_reserve = 0.0),
        config(|c| c.empty_block_reserve = -0.0),
        config(|c| c.empty_block_reserve = f64::INFINITY),
        config(|c| c.max_padded_granularity = 0),
        config(|c| c.max_padded_granularity = 1 << 63),
        config(|c| c.max_padded_granularity = u64::MAX),
        config(|c| c.small_buffer_limit = 0),
        config(|c| c.small_buffer_limit = 65536),
        config(|c| c.initial_block_slots = 1),
        config(|c| c.max_frames_in_flight = u32::MAX),
    ];
    for config in valid {
        let (allocator, device) = super::super::allocator_with(FakeLayout::discrete(), config);
        for kind in [ResourceKind::Buffer, ResourceKind::OptimalImage] {
            let request = vk_suballoc::Request::new(
                super::super::requirements(1000, 256),
                Usage::DEVICE_LOCAL,
                kind,
            );
            let a = allocator.allocate(&request).unwrap();
            let b = allocator.allocate(&request).unwrap();
            free(&allocator, a);
            free(&allocator, b);
        }
        finish(allocator, &device);
    }
}

/// `Error::InvalidConfig`'s text names the figure that is out of range
/// (its docs: "the text names it"), and no other: an engine that reads it
/// back, or a person reading a log line, must know which field to fix.
#[test]
fn an_invalid_figure_is_named_alone() {
    const FIELDS: [&str; 12] = [
        "large_heap_block_size",
        "small_heap_limit",
        "initial_block_slots",
        "budget_fraction",
        "max_padded_granularity",
        "max_frames_in_flight",
        "small_buffer_limit",
        "debug_margin",
        "detect_corruption",
        "debug_fill",
        "empty_block_reserve",
        "empty_block_frames",
    ];
    type Change = fn(&mut Config);
    let cases: [(&str, Change); 8] = [
        ("large_heap_block_size", |c| c.large_heap_block_size = 0),
        ("initial_block_slots", |c| c.initial_block_slots = 0),
        ("initial_block_slots", |c| c.initial_block_slots = u32::MAX),
        ("budget_fraction", |c| c.budget_fraction = 2.0),
        ("max_frames_in_flight", |c| c.max_frames_in_flight = 0),
        ("small_buffer_limit", |c| c.small_buffer_limit = 65537),
        ("debug_margin", |c| c.debug_margin = 6),
        ("empty_block_reserve", |c| c.empty_block_reserve = -1.0),
    ];
    let device = FakeDevice::new(FakeLayout::lavapipe());
    for (field, change) in cases {
        let mut config = Config::default();
        change(&mut config);
        let Err(Error::InvalidConfig(text)) = Allocator::new(device.clone(), config) else {
            panic!("{field}: not refused with InvalidConfig");
        };
        assert!(text.contains(field), "{field}: {text:?}");
        for other in FIELDS.iter().filter(|&&other| other != field) {
            assert!(!text.contains(other), "{field}: {text:?} names {other} too");
        }
    }
    device.assert_clean();
}
