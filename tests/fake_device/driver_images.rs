//! Images aligned as each preset's driver aligns them
//! (`FakeLayout::image_requirements`: RADV's 64 KiB swizzle blocks from
//! 32 KiB on and for depth/stencil, NVK's 16 KiB tiles, a Gen12 aux map's
//! 64 KiB, Arc's and Turnip's 4 KiB, linear images' 64 or 256 bytes) among
//! buffers aligned as the driver aligns those, on every preset: every
//! allocation on its alignment, none overlapping, linear and optimal
//! resources never sharing a `bufferImageGranularity` page, and
//! defragmentation's destinations keeping all of it.

use ash::vk;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DefragmentationLimits, Error, Movable, PoolDesc, Request,
    ResourceKind, Usage,
};

use super::model::check_disjoint;
use super::seeded_rng::Rng;
use super::{allocator_with, finish, free, FakeAllocator, STRATEGIES};

const KIB: u64 = 1 << 10;
const RGBA8: vk::Format = vk::Format::R8G8B8A8_UNORM;
const MIB: u64 = 1 << 20;

/// Images as drivers size them: a 64x64 RGBA8 texture, 128x128 and
/// 256x256 ones, a 1024x1024 one, 2048x2048 with its mips, a 1080p depth
/// buffer (D32), and sizes just under and over RADV's 32 KiB threshold.
const IMAGE_SIZES: [u64; 9] = [
    16 * KIB,
    64 * KIB,
    256 * KIB,
    4 * MIB,
    2048 * 2048 * 4 * 4 / 3,
    1920 * 1080 * 4,
    32 * KIB - 4 * KIB,
    32 * KIB,
    40 * KIB,
];

struct Live {
    allocation: Allocation,
    requirements: vk::MemoryRequirements,
    kind: ResourceKind,
}

/// A random image, linear image or buffer, with the requirements the
/// layout's driver would give it.
fn random_request(
    layout: &FakeLayout,
    rng: &mut Rng,
) -> (vk::MemoryRequirements, ResourceKind, Usage) {
    match rng.below(5) {
        0 | 1 => {
            let size = if rng.below(3) == 0 {
                1 + rng.below(8 * MIB)
            } else {
                IMAGE_SIZES[rng.below(IMAGE_SIZES.len() as u64) as usize]
            };
            // A depth buffer in four.
            let format = [vk::Format::D32_SFLOAT, RGBA8, RGBA8, RGBA8][rng.below(4) as usize];
            let requirements = layout
                .image_requirements(size, format, vk::ImageTiling::OPTIMAL)
                .unwrap();
            (
                requirements,
                ResourceKind::OptimalImage,
                Usage::DEVICE_LOCAL,
            )
        }
        2 => {
            let size = 1 + rng.below(MIB);
            let requirements = layout
                .image_requirements(size, RGBA8, vk::ImageTiling::LINEAR)
                .unwrap();
            let usage =
                [Usage::UPLOAD, Usage::READBACK, Usage::DEVICE_LOCAL][rng.below(3) as usize];
            (requirements, ResourceKind::LinearImage, usage)
        }
        _ => {
            let limit = if rng.below(2) == 0 { 4 * KIB } else { 2 * MIB };
            let size = 1 + rng.below(limit);
            let usage = vk::BufferUsageFlags::STORAGE_BUFFER;
            let answer = layout.buffer_requirements;
            let requirements = vk::MemoryRequirements {
                size: answer.size(size, usage).unwrap(),
                alignment: answer.alignment(usage),
                memory_type_bits: layout.buffer_memory_type_bits(),
            };
            let usage =
                [Usage::UPLOAD, Usage::READBACK, Usage::DEVICE_LOCAL][rng.below(3) as usize];
            (requirements, ResourceKind::Buffer, usage)
        }
    }
}

/// Every live allocation on its alignment with at least its size, none
/// overlapping, and no linear and optimal pair in one memory sharing a
/// granularity page.
fn check(live: &[Live], granularity: u64, context: &str) {
    for l in live {
        let a = &l.allocation;
        assert_eq!(
            a.offset() % l.requirements.alignment,
            0,
            "{context}: {:?} of {} bytes at {} off its alignment {}",
            l.kind,
            l.requirements.size,
            a.offset(),
            l.requirements.alignment
        );
        assert!(a.size() >= l.requirements.size, "{context}");
    }
    check_disjoint(
        live.iter().map(|l| (&l.allocation, l.kind)),
        granularity,
        context,
    );
}

/// Rounds of random allocations and frees, then a defragmentation plan
/// carried out, on every preset: placements and destinations keep every
/// alignment the driver gave and the granularity.
#[test]
fn driver_image_alignments_hold_through_allocation_and_defragmentation() {
    let mut rng =
        Rng::from_env("driver_image_alignments_hold_through_allocation_and_defragmentation");
    for layout in FakeLayout::presets() {
        let name = layout.name;
        let granularity = layout.buffer_image_granularity;
        // Small and large blocks, with and without debug margins, images
        // mixed with buffers in blocks or kept apart.
        let config = Config {
            large_heap_block_size: [4 * MIB, 32 * MIB][rng.below(2) as usize],
            debug_margin: [0, 64, 1024][rng.below(3) as usize],
            max_padded_granularity: [4096, 1][rng.below(2) as usize],
            ..Config::default()
        };
        println!(
            "{name}: blocks of {} bytes, margin {}, padded granularity up to {}",
            config.large_heap_block_size, config.debug_margin, config.max_padded_granularity
        );
        let (allocator, device) = allocator_with(layout, config);
        let layout = device.layout().clone();
        let mut live: Vec<Live> = Vec::new();
        let mut moves = 0;
        for round in 0..8 {
            let context = format!("{name} round {round}");
            for _ in 0..rng.below(120) {
                let (requirements, kind, usage) = random_request(&layout, &mut rng);
                let allocation = allocator
                    .allocate(&Request::new(requirements, usage, kind))
                    .unwrap_or_else(|e| panic!("{context}: {requirements:?} {kind:?}: {e}"));
                live.push(Live {
                    allocation,
                    requirements,
                    kind,
                });
            }
            moves += end_round(&allocator, &mut live, &mut rng, granularity, &context);
        }
        println!("{name}: {moves} moves");
        for l in live {
            free(&allocator, l.allocation);
        }
        finish(allocator, &device);
    }
}

/// A round's end: everything live checked, a random share freed, a
/// defragmentation plan carried out ([`defragment`]) and everything
/// checked again; returns the plan's moves.
fn end_round(
    allocator: &FakeAllocator,
    live: &mut Vec<Live>,
    rng: &mut Rng,
    granularity: u64,
    context: &str,
) -> usize {
    check(live, granularity, context);
    for _ in 0..rng.below(live.len() as u64 + 1) {
        let gone = live.swap_remove(rng.below(live.len() as u64) as usize);
        free(allocator, gone.allocation);
    }
    let moves = defragment(allocator, live, rng, context);
    check(live, granularity, &format!("{context}, defragmented"));
    moves
}

/// Plans a defragmentation over every live allocation and carries it out
/// (destinations checked against their sources' requirements); returns
/// the moves.
fn defragment(allocator: &FakeAllocator, live: &mut [Live], rng: &mut Rng, context: &str) -> usize {
    let listed: Vec<Movable<'_>> = live
        .iter()
        .map(|l| Movable::new(&l.allocation, l.requirements, l.kind))
        .collect();
    let limits = DefragmentationLimits::default()
        .split_blocks(rng.below(2) == 0)
        .compact_blocks(rng.below(2) == 0);
    let plan = allocator.plan_defragmentation(&listed, &limits).unwrap();
    drop(listed);
    let moves = plan.moves.len();
    for planned in plan.moves.into_iter().rev() {
        let slot = &mut live[planned.movable];
        let destination = &planned.destination;
        assert_eq!(
            destination.offset() % slot.requirements.alignment,
            0,
            "{context}: {:?} of {} bytes moved to {} off its alignment {}",
            slot.kind,
            slot.requirements.size,
            destination.offset(),
            slot.requirements.alignment
        );
        let old = std::mem::replace(&mut slot.allocation, planned.destination);
        free(allocator, old);
    }
    moves
}

/// The figures the presets answer for the images the brief's research
/// named: a 64x64 RGBA8 texture takes every driver's small alignment, a
/// 2048x2048 one with mips RADV's 64 KiB and NVK's 16 KiB; a depth image
/// RADV's 64 KiB at any size; any optimal image ANV's 64 KiB on a Gen12
/// iGPU (aux map); linear images ANV's and Turnip's 64 bytes, RADV's 256.
#[test]
fn presets_align_images_as_their_drivers() {
    let optimal = vk::ImageTiling::OPTIMAL;
    let linear = vk::ImageTiling::LINEAR;
    let small = 64 * 64 * 4;
    let large = 2048 * 2048 * 4 * 4 / 3;
    let alignment = |layout: &FakeLayout, size, tiling| {
        layout
            .image_requirements(size, RGBA8, tiling)
            .unwrap()
            .alignment
    };
    let depth = |layout: &FakeLayout, size| {
        let format = vk::Format::D32_SFLOAT;
        let optimal = layout.image_requirements(size, format, vk::ImageTiling::OPTIMAL);
        optimal.unwrap().alignment
    };
    let amd = FakeLayout::amd();
    assert_eq!(alignment(&amd, small, optimal), 4096);
    assert_eq!(alignment(&amd, 28 * KIB, optimal), 4096);
    assert_eq!(alignment(&amd, 32 * KIB, optimal), 64 * KIB);
    assert_eq!(alignment(&amd, large, optimal), 64 * KIB);
    assert_eq!(alignment(&amd, large, linear), 256);
    // RADV's depth/stencil images take 64 KiB Z swizzle blocks at any
    // size; the others' as their colour images of that size.
    assert_eq!(depth(&amd, small), 64 * KIB);
    assert_eq!(depth(&FakeLayout::discrete(), small), 4096);
    assert_eq!(depth(&FakeLayout::discrete(), large), 16 * KIB);
    assert_eq!(depth(&FakeLayout::mobile(), small), 4096);
    let discrete = FakeLayout::discrete();
    assert_eq!(alignment(&discrete, small, optimal), 4096);
    assert_eq!(alignment(&discrete, large, optimal), 16 * KIB);
    assert_eq!(
        alignment(&FakeLayout::integrated(), small, optimal),
        64 * KIB
    );
    assert_eq!(depth(&FakeLayout::integrated(), small), 64 * KIB);
    assert_eq!(alignment(&FakeLayout::integrated(), small, linear), 64);
    for layout in [FakeLayout::intel_arc(), FakeLayout::mobile()] {
        assert_eq!(alignment(&layout, large, optimal), 4096, "{}", layout.name);
        assert_eq!(alignment(&layout, small, linear), 64, "{}", layout.name);
    }
    assert_eq!(alignment(&FakeLayout::lavapipe(), large, optimal), 16);
    // Sizes are whole alignments (tiles), and lazily allocated types are
    // left out.
    let mobile = FakeLayout::mobile();
    let requirements = mobile.image_requirements(1000, RGBA8, optimal).unwrap();
    assert_eq!((requirements.size, requirements.alignment), (4096, 4096));
    assert_eq!(requirements.memory_type_bits, 0b0111);
    assert!(amd
        .image_requirements(u64::MAX - 1, RGBA8, optimal)
        .is_none());
}

/// The same workload in a custom pool of small fixed blocks (128 KiB to
/// 1 MiB, or growing ones), every strategy drawn per request: a request
/// whose size a block cannot hold is refused, any other lands on its
/// driver alignment, apart from the others and off linear resources'
/// pages, and so do defragmentation's destinations within the pool.
#[test]
fn driver_image_alignments_hold_in_pools_of_small_blocks() {
    let mut rng = Rng::from_env("driver_image_alignments_hold_in_pools_of_small_blocks");
    for layout in FakeLayout::presets() {
        let name = layout.name;
        let granularity = layout.buffer_image_granularity;
        let margin = [0, 64][rng.below(2) as usize];
        let config = Config {
            debug_margin: margin,
            ..Config::default()
        };
        let (allocator, device) = allocator_with(layout, config);
        let layout = device.layout().clone();
        let memory_type = allocator
            .memory_type_for(layout.buffer_memory_type_bits(), Usage::DEVICE_LOCAL)
            .unwrap();
        let block_size = [128 * KIB, 256 * KIB, MIB, 0][rng.below(4) as usize];
        let pool = allocator
            .create_pool(&PoolDesc::new(memory_type).block_size(block_size))
            .unwrap();
        println!("{name}: blocks of {block_size} bytes in type {memory_type}");
        let mut live: Vec<Live> = Vec::new();
        let (mut refused, mut moves) = (0, 0);
        for round in 0..6 {
            let context = format!("{name} round {round}");
            for _ in 0..rng.below(100) {
                let (mut requirements, kind, _) = random_request(&layout, &mut rng);
                if requirements.size > 2 * block_size.max(MIB) {
                    continue;
                }
                requirements.memory_type_bits = 1 << memory_type;
                let desc = AllocationDesc::new(Usage::DEVICE_LOCAL)
                    .pool(pool)
                    .strategy(STRATEGIES[rng.below(4) as usize]);
                match allocator.allocate(&Request::with_desc(requirements, kind, desc)) {
                    Ok(allocation) => live.push(Live {
                        allocation,
                        requirements,
                        kind,
                    }),
                    Err(Error::TooLargeForPool { .. }) if block_size != 0 => {
                        // Only a request no empty block could hold: its
                        // size and margin (an optimal image's in whole
                        // granularity pages) past the block.
                        let mut held = requirements.size + margin;
                        if kind == ResourceKind::OptimalImage && granularity <= 4096 {
                            held = held.next_multiple_of(granularity);
                        }
                        assert!(
                            held > block_size,
                            "{context}: {requirements:?} {kind:?} refused by blocks of {block_size}"
                        );
                        refused += 1;
                    }
                    Err(e) => panic!("{context}: {requirements:?} {kind:?}: {e}"),
                }
            }
            moves += end_round(&allocator, &mut live, &mut rng, granularity, &context);
        }
        println!("{name}: {refused} refused, {moves} moves");
        for l in live {
            free(&allocator, l.allocation);
        }
        allocator.destroy_pool(pool).unwrap();
        finish(allocator, &device);
    }
}
