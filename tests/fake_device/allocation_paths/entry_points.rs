//! The entry points that place and free memory agree on what a user sees.
//! Two allocators over identical fake devices take the same seeded walk:
//! the reference places each request with
//! [`allocate`](vk_suballoc::Allocator::allocate) and frees with
//! [`free`](vk_suballoc::Allocator::free); the other, with debug fills on
//! in some walks, takes each step through another entry point, drawn per
//! step: [`allocate_mut`](vk_suballoc::Allocator::allocate_mut), a batch
//! of one through [`allocate_many`](vk_suballoc::Allocator::allocate_many),
//! whole batches through `allocate_many`, and frees through
//! [`free_mut`](vk_suballoc::Allocator::free_mut) or
//! [`free_after_frame`](vk_suballoc::Allocator::free_after_frame) with the
//! frame ended and collected at once (the reference ends and collects a
//! frame after its free too). After every step the results (allocations'
//! memory, offset, type, dedicated or not; errors, variant and figures),
//! `stats()`, the memory map, the pools' figures, the device's memory
//! objects and its allocate, free and map calls, and the memory events must
//! match.
//!
//! A batch has the reference place its requests one by one, all or
//! nothing, as `allocate_many`'s docs say: a bad request anywhere in it
//! (one `allocate` refuses whatever is allocated: bad input, too large,
//! no type, a stale or foreign pool) fails it before anything is placed,
//! with the first bad request's error; otherwise the requests are placed in
//! order and, at the first that fails, those made before it are freed in
//! order. Whether a request is bad is asked of a third allocator, the
//! probe, over its own identical device, that keeps nothing allocated.
//!
//! Intended differences, not compared: debug fills flush and invalidate
//! non-coherent memory (the device's flush and invalidate counts), and
//! margins ([`Config::debug_margin`]) change the bytes each allocation
//! takes in a block, so placements, so they stay off here.

#[path = "entry_points/side.rs"]
mod side;

use vk_suballoc::device::fake::{FakeDevice, FakeLayout};
use vk_suballoc::device::DeviceError;
use vk_suballoc::{Config, DedicatedPolicy, Error, PoolDesc, ResourceKind, Usage};

use crate::seeded_rng::Rng;
use crate::walk_text::{KINDS, USAGES};
use crate::FakeAllocator;
use side::Side;

const MIB: u64 = 1 << 20;

/// One request of the walk, drawn once and made by every side.
#[derive(Clone, Debug)]
pub(super) struct Params {
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
    /// 0 none, 1 a live pool, 2 a destroyed one, 3 another allocator's.
    pool: (u8, usize),
    /// The driver's dedicated hint: 0 none, 1 preferred, 2 required.
    hint: u8,
    /// The dedicated target: 0 none, 1 the side's buffer, 2 its image.
    target: u8,
    /// `AllocationDesc::memory_type_bits`, when set.
    desc_bits: Option<u32>,
    can_alias: bool,
    priority: Option<f32>,
}

/// How the other side frees.
#[derive(Clone, Copy, Debug)]
pub(super) enum FreeVia {
    Free,
    FreeMut,
    AfterFrame,
}

/// One step of the walk.
#[derive(Clone, Debug)]
pub(super) enum Step {
    /// Through `allocate_mut` (`true`) or a batch of one.
    Allocate(Params, bool),
    Batch(Vec<Params>),
    Free(usize, FreeVia),
    /// Several allocations freed behind one frame (the other side), or
    /// freed one by one when the frame has ended (the reference).
    FreeSeveral(Vec<usize>),
    EndFrame,
    Trim,
    CreatePool {
        memory_type: u32,
        block_size: u64,
        min_blocks: u32,
        max_blocks: u32,
        min_alignment: u64,
    },
    DestroyPool(usize),
    FailAllocation(u64, DeviceError),
    CapHeap(u32, u64),
    Budget(u32, u64),
}

/// A request for a device of `types` memory types whose
/// `maxMemoryAllocationSize` is `max`.
fn draw_params(rng: &mut Rng, types: u32, max: u64) -> Params {
    let size = match rng.below(40) {
        0 => 0,
        // Within the rounding a block gives it of the limit.
        39 => max - rng.below(4096),
        1 => u64::MAX - rng.below(4096),
        2 => 1 << (30 + rng.below(30)),
        3..=15 => 1 + rng.below(16 << 10),
        16..=27 => 1 + rng.below(512 << 10),
        _ => 1 + rng.below(6 * MIB),
    };
    let alignment = match rng.below(40) {
        0 => 0,
        1 => 3 + 2 * rng.below(100),
        2 => 1 << (20 + rng.below(43)),
        _ => 1 << rng.below(13),
    };
    let bits = match rng.below(20) {
        0 => 0,
        1..=5 => rng.next() as u32 & ((1 << types) - 1),
        _ => !0,
    };
    Params {
        size,
        alignment,
        bits,
        usage: USAGES[rng.below(USAGES.len() as u64) as usize],
        kind: KINDS[rng.below(4) as usize],
        dedicated: match rng.below(6) {
            0 => DedicatedPolicy::Always,
            1 | 2 => DedicatedPolicy::Never,
            _ => DedicatedPolicy::Auto,
        },
        named: rng.below(3) == 0,
        within_budget: rng.below(6) == 0,
        existing_only: rng.below(8) == 0,
        min_alignment: match rng.below(10) {
            0 => Some(1 << rng.below(24)),
            1 => Some(48),
            _ => None,
        },
        pool: match rng.below(12) {
            0..=2 => (1, rng.next() as usize),
            3 => (2, rng.next() as usize),
            4 => (3, 0),
            _ => (0, 0),
        },
        hint: [0, 0, 0, 0, 1, 2][rng.below(6) as usize],
        target: [0, 0, 1, 2][rng.below(4) as usize],
        desc_bits: (rng.below(8) == 0).then(|| rng.next() as u32 & ((1 << types) - 1)),
        can_alias: rng.below(8) == 0,
        priority: [None, None, Some(0.0), Some(1.0)][rng.below(4) as usize],
    }
}

/// A step for a device of `types` memory types, `heaps` heaps and a
/// `maxMemoryAllocationSize` of `max`.
fn draw(rng: &mut Rng, types: u32, heaps: u32, max: u64) -> Step {
    match rng.below(100) {
        0..=34 => Step::Allocate(draw_params(rng, types, max), rng.below(2) == 0),
        35..=49 => {
            let count = 1 + rng.below(5) as usize;
            Step::Batch((0..count).map(|_| draw_params(rng, types, max)).collect())
        }
        50..=53 => Step::FreeSeveral((0..2 + rng.below(4)).map(|_| rng.next() as usize).collect()),
        54..=74 => Step::Free(
            rng.next() as usize,
            [FreeVia::Free, FreeVia::FreeMut, FreeVia::AfterFrame][rng.below(3) as usize],
        ),
        75..=78 => Step::EndFrame,
        79..=80 => Step::Trim,
        81..=85 => Step::CreatePool {
            memory_type: rng.below(u64::from(types) + 1) as u32,
            block_size: [0, 0, MIB, 2 * MIB, 3 * MIB + 4096][rng.below(5) as usize],
            min_blocks: rng.below(3) as u32,
            max_blocks: rng.below(5) as u32,
            min_alignment: [0, 0, 0, 256, 4096, 1 << 20, 48][rng.below(7) as usize],
        },
        86..=87 => Step::DestroyPool(rng.next() as usize),
        88..=91 => Step::FailAllocation(
            1 + rng.below(3),
            [
                DeviceError::OutOfDeviceMemory,
                DeviceError::OutOfHostMemory,
                DeviceError::TooManyObjects,
            ][rng.below(3) as usize],
        ),
        92..=94 => Step::CapHeap(rng.below(u64::from(heaps)) as u32, rng.below(40) * MIB),
        _ => Step::Budget(rng.below(u64::from(heaps)) as u32, rng.below(48) * MIB),
    }
}

/// Whether `allocate` refuses the request `p` with `error` (`probe`'s
/// answer) whatever is allocated: `allocate_many` finds such a request
/// before it places any. Besides bad input, a request for existing memory
/// only that needs dedicated memory wherever it may be placed
/// ([`Side::needs_dedicated_memory`]).
fn is_bad(error: &Error, p: &Params, probe: &Side) -> bool {
    if *error == Error::NoRoomInExistingMemory {
        return probe.needs_dedicated_memory(p);
    }
    matches!(
        error,
        Error::ZeroSize
            | Error::AlignmentNotPowerOfTwo(_)
            | Error::MissingDedicatedTarget
            | Error::DedicatedTargetMismatch
            | Error::NoMemoryTypeBits(_)
            | Error::SizeExceedsHeaps { .. }
            | Error::NoSuitableMemoryType { .. }
            | Error::DeviceAddressNotEnabled
            | Error::SizeExceedsMaxAllocation { .. }
            | Error::ForeignPool
            | Error::PoolTypeNotAllowed { .. }
            | Error::StalePool
            | Error::TooLargeForPool { .. }
    )
}

/// One walk of `steps` steps from `seed`.
fn walk(seed: u64, steps: usize) {
    let mut rng = Rng(seed);
    let layout = match rng.below(9) {
        0 => FakeLayout::discrete(),
        1 => FakeLayout::integrated(),
        2 => FakeLayout::mobile(),
        3 => FakeLayout::rebar(),
        4 => FakeLayout::amd().with_amd_device_coherent_memory(rng.below(2) == 0),
        5 => FakeLayout::lavapipe(),
        6 => FakeLayout::intel_arc(),
        7 => FakeLayout::apple(),
        _ => FakeLayout::mali(),
    };
    let mut layout = layout.with_heap_sizes((16 + 16 * rng.below(4)) * MIB);
    if rng.below(3) == 0 {
        layout = layout.with_max_allocation_count(4 + rng.below(12) as u32);
    }
    let mut layout = layout.with_memory_budget(rng.below(2) == 0);
    // A limit that a block's rounding (to 4096 bytes at most) may pass.
    if rng.below(3) == 0 {
        layout.max_memory_allocation_size = (2 + rng.below(4)) * MIB + 1000;
    }
    let max = layout.max_memory_allocation_size;
    // Margins on both sides in some walks (they change placements), so
    // that the entry points are compared on the debug path too.
    let margin = [0, 0, 16, 64][rng.below(4) as usize];
    let config = Config {
        small_buffer_limit: if rng.below(3) == 0 { 0 } else { 16 << 10 },
        empty_block_reserve: [0.0, 1.0, 4.0][rng.below(3) as usize],
        empty_block_frames: [1, 3, 120][rng.below(3) as usize],
        debug_margin: margin,
        detect_corruption: margin != 0,
        ..Config::default()
    };
    // Debug fills, and corruption detection without a margin (which does
    // nothing), on the other side alone.
    let other_config = Config {
        debug_fill: rng.below(2) == 0,
        detect_corruption: config.detect_corruption || rng.below(2) == 0,
        ..config
    };
    let context = format!(
        "seed {seed}, layout {}, other side {other_config:?}",
        layout.name
    );
    let (types, heaps) = (
        layout.memory_types.len() as u32,
        layout.memory_heaps.len() as u32,
    );
    let stranger = FakeAllocator::new(FakeDevice::new(layout.clone()), config).unwrap();
    let foreign = stranger.create_pool(&PoolDesc::new(0)).unwrap();
    let mut reference = Side::new(&layout, &config, foreign);
    let mut other = Side::new(&layout, &other_config, foreign);
    let mut probe = Side::new(&layout, &config, foreign);
    let mut history = Vec::new();
    for step_index in 0..steps {
        let step = draw(&mut rng, types, heaps, max);
        history.push(format!("{step:?}"));
        let bad = match &step {
            Step::Batch(batch) => batch
                .iter()
                .find_map(|p| probe.probe(p).err().filter(|e| is_bad(e, p, &probe))),
            _ => None,
        };
        let a = reference.take(&step, false, bad);
        // The probe keeps the pools the reference made (with no blocks
        // made up front, which its device always has room for), and
        // destroys them with it.
        match step {
            Step::CreatePool {
                memory_type,
                block_size,
                max_blocks,
                min_alignment,
                ..
            } if a == "Ok(())" => {
                let empty = Step::CreatePool {
                    memory_type,
                    block_size,
                    min_blocks: 0,
                    max_blocks,
                    min_alignment,
                };
                assert_eq!(probe.take(&empty, false, None), a, "{context}");
            }
            Step::DestroyPool(_) if a == "Ok(())" => {
                assert_eq!(probe.take(&step, false, None), a, "{context}");
            }
            _ => {}
        }
        let b = other.take(&step, true, None);
        let where_ = || {
            let recent = history.len().saturating_sub(8);
            format!(
                "{context}: step {step_index}, after\n{}",
                history[recent..].join("\n")
            )
        };
        assert_eq!(a, b, "the results differ (reference, other); {}", where_());
        for (x, y) in reference.snapshot().iter().zip(&other.snapshot()) {
            assert_eq!(x, y, "the state differs (reference, other); {}", where_());
        }
    }
    reference.finish();
    other.finish();
    probe.finish();
    drop(stranger);
}

/// `allocate`, `allocate_mut`, `allocate_many` (batches of one and more),
/// `free`, `free_mut` and `free_after_frame`, with debug fills on and off,
/// side by side over seeded walks (`VK_SUBALLOC_SEED` replays one).
#[test]
fn entry_points_agree() {
    let mut seeds = Rng::from_env("entry_points_agree");
    for _ in 0..12 {
        walk(seeds.next(), 200);
    }
}
