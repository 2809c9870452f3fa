//! The `&mut self` twins ([`allocate_mut`](vk_suballoc::Allocator::allocate_mut),
//! [`free_mut`](vk_suballoc::Allocator::free_mut),
//! [`ring_allocate_mut`](vk_suballoc::Allocator::ring_allocate_mut)) do
//! what their `&self` methods do, with no lock: two allocators over two
//! identical fake devices take the same seeded walk, one through the
//! `&self` methods and one through the twins (every other call the same
//! on both), and after every step their results, `stats()`, memory maps,
//! pools' figures, corruption counts, devices (calls and memory objects),
//! memory events and logged lines (debug ones too, in order) must match.
//! The walk draws a layout with small heaps (so that requests run short
//! of memory and release kept empty blocks), a configuration (runs,
//! margins with corruption detection, debug fills, kept blocks,
//! backtraces: leak lines compared without their frames, mappings
//! withheld from requests without host access), and
//! steps: requests of every kind, flawed ones among them, for custom
//! pools too; frees now and after frames; trims; upload rings; injected
//! allocation and map failures, capped heaps and budgets; margins damaged
//! and freed memory written; memory callbacks and loggers that panic; the
//! device lost. [`api_walk`](super::api_walk) mixes the twins with the
//! `&self` methods against a model, which does not see a difference in
//! what the model does not count (which kept blocks a free releases, the
//! lines it logs); this compares them.

#[path = "mut_parity/logger_panics.rs"]
mod logger_panics;
#[path = "mut_parity/side.rs"]
mod side;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::device::DeviceError;
use vk_suballoc::{Config, DedicatedPolicy, ResourceKind, Strategy, Usage};

use super::leak_log::{
    disarm_panic_on_line, panic_on_line_with, record_thread_lines, take_thread_lines,
};
use super::panic_message;
use super::seeded_rng::Rng;
use super::walk_text::{normalise, KINDS, USAGES};
use side::Side;

const MIB: u64 = 1 << 20;
/// Texts a logger is made to panic on (once, on the next line with it).
const PANIC_TEXTS: [&str; 5] = [
    "margin",
    "after it was freed",
    "debug fill",
    "vk-suballoc",
    "memory type",
];

/// Required and preferred flags the walk draws from: each alone, a pair
/// some types have, and one no type has.
const PROPERTY_FLAGS: [vk::MemoryPropertyFlags; 6] = [
    vk::MemoryPropertyFlags::DEVICE_LOCAL,
    vk::MemoryPropertyFlags::HOST_VISIBLE,
    vk::MemoryPropertyFlags::HOST_COHERENT,
    vk::MemoryPropertyFlags::HOST_CACHED,
    vk::MemoryPropertyFlags::from_raw(0b11), // DEVICE_LOCAL | HOST_VISIBLE
    vk::MemoryPropertyFlags::LAZILY_ALLOCATED,
];

/// One step of the walk, drawn once and taken by both sides.
#[derive(Clone, Debug)]
enum Step {
    Allocate {
        size: u64,
        alignment: u64,
        bits: u32,
        usage: Usage,
        kind: ResourceKind,
        dedicated: DedicatedPolicy,
        named: bool,
        within_budget: bool,
        existing_only: bool,
        min_alignment: Option<u64>,
        pool: Option<usize>,
        /// The driver's dedicated hint: 0 none, 1 preferred, 2 required.
        hint: u8,
        /// The dedicated target: 0 none, 1 the side's buffer, 2 its image.
        target: u8,
        priority: Option<f32>,
        /// `AllocationDesc::required_flags` and `preferred_flags`.
        required: vk::MemoryPropertyFlags,
        preferred: vk::MemoryPropertyFlags,
        strategy: Strategy,
    },
    Free(usize),
    FreeAfterFrame(usize),
    EndFrame {
        signal: bool,
    },
    Trim,
    CreatePool {
        memory_type: u32,
        block_size: u64,
        min_blocks: u32,
        max_blocks: u32,
    },
    DestroyPool(usize),
    CreateRing {
        size: u64,
        usage: Usage,
        grow: bool,
    },
    RingAllocate {
        ring: usize,
        size: u64,
        align: u64,
    },
    DestroyRing(usize),
    FailAllocation {
        nth: u64,
        error: DeviceError,
    },
    FailMap(u64),
    CapHeap {
        heap: u32,
        bytes: u64,
    },
    Budget {
        heap: u32,
        budget: u64,
        external: u64,
    },
    DamageMargin(usize),
    WriteAfterFree(usize),
    CallbackPanics(u64),
    LoggerPanics(&'static str),
    CheckCorruption,
    LoseDevice,
}

/// A step drawn from `rng`, for a device of `types` memory types and
/// `heaps` heaps.
fn draw(rng: &mut Rng, types: u32, heaps: u32) -> Step {
    let pick = |rng: &mut Rng, options: &[u64]| options[rng.below(options.len() as u64) as usize];
    match rng.below(100) {
        0..=44 => {
            let size = match rng.below(40) {
                0 => 0,
                1 => u64::MAX - rng.below(4096),
                2 => 1 << (40 + rng.below(20)),
                3..=15 => 1 + rng.below(16 << 10),
                16..=27 => 1 + rng.below(512 << 10),
                _ => 1 + rng.below(6 * MIB),
            };
            let alignment = match rng.below(40) {
                0 => 0,
                1 => 3 + 2 * rng.below(100),
                2 => 1 << 62,
                _ => 1 << rng.below(13),
            };
            let bits = match rng.below(20) {
                0 => 0,
                1..=5 => rng.next() as u32 & ((1 << types) - 1),
                _ => !0,
            };
            Step::Allocate {
                size,
                alignment,
                bits,
                usage: USAGES[rng.below(USAGES.len() as u64) as usize],
                kind: KINDS[rng.below(4) as usize],
                dedicated: match rng.below(8) {
                    0 => DedicatedPolicy::Always,
                    1 => DedicatedPolicy::Never,
                    _ => DedicatedPolicy::Auto,
                },
                named: rng.below(3) == 0,
                within_budget: rng.below(6) == 0,
                existing_only: rng.below(8) == 0,
                min_alignment: match rng.below(10) {
                    0 => Some(1 << rng.below(16)),
                    1 => Some(48),
                    _ => None,
                },
                pool: (rng.below(4) == 0).then(|| rng.below(8) as usize),
                hint: [0, 0, 0, 0, 1, 2][rng.below(6) as usize],
                target: [0, 0, 1, 2][rng.below(4) as usize],
                priority: [None, None, Some(0.0), Some(1.0), Some(-1.0)][rng.below(5) as usize],
                required: match rng.below(8) {
                    0 => PROPERTY_FLAGS[rng.below(PROPERTY_FLAGS.len() as u64) as usize],
                    _ => vk::MemoryPropertyFlags::empty(),
                },
                preferred: match rng.below(4) {
                    0 => PROPERTY_FLAGS[rng.below(PROPERTY_FLAGS.len() as u64) as usize],
                    _ => vk::MemoryPropertyFlags::empty(),
                },
                strategy: match rng.below(7) {
                    0 | 1 => Strategy::MinMemory,
                    2 => Strategy::MinOffset,
                    3 => Strategy::MaxOffset,
                    _ => Strategy::MinTime,
                },
            }
        }
        45..=65 => Step::Free(rng.next() as usize),
        66..=69 => Step::FreeAfterFrame(rng.next() as usize),
        70..=73 => Step::EndFrame {
            signal: rng.below(5) != 0,
        },
        74 => Step::Trim,
        75..=76 => Step::CreatePool {
            memory_type: rng.below(u64::from(types) + 1) as u32,
            block_size: pick(rng, &[0, 0, MIB, 2 * MIB, 3 * MIB + 4096]),
            min_blocks: rng.below(3) as u32,
            max_blocks: rng.below(5) as u32,
        },
        77 => Step::DestroyPool(rng.next() as usize),
        78 => Step::CreateRing {
            size: pick(rng, &[0, 64 << 10, 64 << 10, MIB, MIB]),
            usage: [
                Usage::UPLOAD,
                Usage::READBACK,
                Usage::UPLOAD | Usage::DEVICE_LOCAL,
            ][rng.below(3) as usize],
            grow: rng.below(2) == 0,
        },
        79..=83 => Step::RingAllocate {
            ring: rng.next() as usize,
            size: pick(rng, &[0, 1, 256, 4000, 40 << 10, 2 * MIB]),
            align: pick(rng, &[0, 1, 3, 16, 256, 4096]),
        },
        84 => Step::DestroyRing(rng.next() as usize),
        85..=86 => Step::FailAllocation {
            nth: 1 + rng.below(3),
            error: [
                DeviceError::OutOfDeviceMemory,
                DeviceError::OutOfHostMemory,
                DeviceError::TooManyObjects,
            ][rng.below(3) as usize],
        },
        87 => Step::FailMap(1 + rng.below(2)),
        88 => Step::CapHeap {
            heap: rng.below(u64::from(heaps)) as u32,
            bytes: rng.below(40) * MIB,
        },
        89 => Step::Budget {
            heap: rng.below(u64::from(heaps)) as u32,
            budget: rng.below(48) * MIB,
            external: rng.below(8) * MIB,
        },
        90..=92 => Step::DamageMargin(rng.next() as usize),
        93..=94 => Step::WriteAfterFree(rng.next() as usize),
        95 => Step::CallbackPanics(1 + rng.below(3)),
        96..=97 => Step::LoggerPanics(PANIC_TEXTS[rng.below(PANIC_TEXTS.len() as u64) as usize]),
        98 => Step::CheckCorruption,
        _ if rng.below(4) == 0 => Step::LoseDevice,
        _ => Step::Trim,
    }
}

/// A layout with small heaps, drawn from `rng`.
fn draw_layout(rng: &mut Rng) -> FakeLayout {
    let layout = match rng.below(9) {
        0 => FakeLayout::discrete(),
        1 => FakeLayout::integrated(),
        2 => FakeLayout::mobile(),
        3 => FakeLayout::rebar(),
        4 => FakeLayout::amd(),
        5 => FakeLayout::lavapipe(),
        6 => FakeLayout::intel_arc(),
        7 => FakeLayout::apple(),
        _ => FakeLayout::mali(),
    };
    let mut layout = layout.with_heap_sizes((16 + 16 * rng.below(4)) * MIB);
    if rng.below(3) == 0 {
        layout = layout.with_max_allocation_count(4 + rng.below(12) as u32);
    }
    layout.with_memory_budget(rng.below(2) == 0)
}

fn draw_config(rng: &mut Rng) -> Config {
    let detect = rng.below(2) == 0;
    Config {
        small_buffer_limit: if rng.below(3) == 0 { 0 } else { 16 << 10 },
        debug_margin: if detect { 16 << rng.below(3) } else { 0 },
        detect_corruption: detect,
        debug_fill: rng.below(2) == 0,
        empty_block_reserve: [0.0, 1.0, 4.0][rng.below(3) as usize],
        empty_block_frames: [1, 3, 120][rng.below(3) as usize],
        allocation_backtraces: rng.below(4) == 0,
        log_allocations: rng.below(4) == 0,
        strict_host_access: rng.below(4) == 0,
        ..Config::default()
    }
}

/// A leak line with its backtrace's frames cut (`Config::allocation_backtraces`):
/// the two sides' calls differ (`allocate` and `allocate_mut`), but both
/// must have recorded one.
fn without_frames(line: &str) -> String {
    match line.split_once(", allocated at:\n") {
        Some((head, _)) => format!("{head}, allocated at: (frames)"),
        None => line.to_owned(),
    }
}

/// One walk of `steps` steps from `seed`.
fn walk(seed: u64, steps: usize) {
    let mut rng = Rng(seed);
    let layout = draw_layout(&mut rng);
    let config = draw_config(&mut rng);
    let (types, heaps) = (
        layout.memory_types.len() as u32,
        layout.memory_heaps.len() as u32,
    );
    let context = format!("seed {seed}, layout {}, {config:?}", layout.name);
    let mut locked = Side::new(&layout, &config, false);
    let mut exclusive = Side::new(&layout, &config, true);
    record_thread_lines();
    let mut armed: Option<&'static str> = None;
    let mut history = Vec::new();
    for step_index in 0..steps {
        let step = draw(&mut rng, types, heaps);
        history.push(format!("{step:?}"));
        if let Step::LoggerPanics(text) = step {
            armed = Some(text);
        }
        let mut outcomes = Vec::new();
        for side in [&mut locked, &mut exclusive] {
            if let Some(text) = armed {
                panic_on_line_with(text);
            }
            let outcome = catch_unwind(AssertUnwindSafe(|| side.take(&step)))
                .unwrap_or_else(|payload| format!("panicked: {}", panic_message(&*payload)));
            let fired = outcome.contains("the test's logger panics");
            disarm_panic_on_line();
            let lines: Vec<String> = take_thread_lines().iter().map(|l| normalise(l)).collect();
            outcomes.push((outcome, fired, lines, side.snapshot()));
        }
        let (a, b) = (&outcomes[0], &outcomes[1]);
        let where_ = || {
            let recent = history.len().saturating_sub(12);
            format!(
                "{context}: step {step_index} {step:?}, after\n{}",
                history[recent..].join("\n")
            )
        };
        assert_eq!(
            a.0,
            b.0,
            "the outcomes differ (&self, &mut self); {}",
            where_()
        );
        assert_eq!(
            a.2,
            b.2,
            "the lines logged differ (&self, &mut self); {}",
            where_()
        );
        for (x, y) in a.3.iter().zip(&b.3) {
            assert_eq!(x, y, "the state differs (&self, &mut self); {}", where_());
        }
        if a.1 || b.1 {
            armed = None;
        }
    }
    take_thread_lines();
    // Both drop with the same leaks, lines and device calls.
    let drop_side = |side: Side| {
        let device = side.device.clone();
        let events = Arc::clone(&side.events);
        side.panic_at.store(0, Ordering::Relaxed);
        drop(side.allocator);
        for target in side.targets {
            device.destroy_resource(target);
        }
        let lines: Vec<String> = take_thread_lines()
            .iter()
            .map(|l| without_frames(&normalise(l)))
            .collect();
        let events = events.lock().unwrap().clone();
        (
            lines,
            device.counters(),
            events,
            device.live_allocations().len(),
        )
    };
    let (a, b) = (drop_side(locked), drop_side(exclusive));
    assert_eq!(a, b, "{context}: the drops differ");
    assert_eq!(a.3, 0, "{context}: memory left after the drop");
}

/// The `&self` methods and their `&mut self` twins, side by side over
/// seeded walks (`VK_SUBALLOC_SEED` replays one).
#[test]
fn mut_twins_match_the_locked_methods() {
    let seed = Rng::seed("mut_twins_match_the_locked_methods");
    let mut seeds = Rng(seed);
    for _ in 0..8 {
        let walk_seed = seeds.next();
        walk(walk_seed, 220);
    }
}
