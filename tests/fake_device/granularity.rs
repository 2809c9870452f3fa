//! `bufferImageGranularity`: linear and optimal resources never share a page.

use crate::FakeTarget;
use ash::vk::Handle;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{
    Allocation, AllocationDesc, Config, DedicatedPolicy, DedicatedTarget, Error, PoolDesc, Request,
    ResourceKind, Usage,
};

use super::{allocator_with, finish, free, requirements, without_runs, FakeAllocator};

const MIB: u64 = 1 << 20;

/// A device-local allocation of `size` bytes at `alignment` for a `kind`
/// resource; panics on error.
fn device_local(
    allocator: &FakeAllocator,
    size: u64,
    alignment: u64,
    kind: ResourceKind,
) -> Allocation {
    allocator
        .allocate(&Request::new(
            requirements(size, alignment),
            Usage::DEVICE_LOCAL,
            kind,
        ))
        .unwrap()
}

/// Asserts that no two of `live` in one memory object whose kinds may not
/// share a page ([`ResourceKind::may_share_page_with`]) share a page of
/// `granularity` bytes. Returns the memory objects holding such pairs.
fn assert_no_shared_page(
    live: &[(ResourceKind, Allocation)],
    granularity: u64,
    context: &str,
) -> std::collections::HashSet<u64> {
    let page = |offset: u64| offset / granularity;
    let mut mixed = std::collections::HashSet::new();
    for (i, (kind_a, a)) in live.iter().enumerate() {
        for (kind_b, b) in &live[i + 1..] {
            if a.memory() != b.memory() || kind_a.may_share_page_with(*kind_b) {
                continue;
            }
            mixed.insert(a.memory().as_raw());
            let (first, second) = if a.offset() < b.offset() {
                (a, b)
            } else {
                (b, a)
            };
            assert!(
                page(first.offset() + first.size() - 1) < page(second.offset()),
                "granularity {granularity}{context}: {kind_a:?} {a:?} and {kind_b:?} {b:?} \
                 share a page"
            );
        }
    }
    mixed
}

/// Allocates an interleaved mix of buffers, linear and optimal images and
/// checks that no linear and optimal allocation share a granularity page of
/// the same memory object. Returns how many memory objects held both kinds.
fn mixed_resources_never_share_a_page(granularity: u64, config: Config) -> usize {
    let (allocator, device) =
        allocator_with(FakeLayout::discrete().with_granularity(granularity), config);
    let kinds = [
        ResourceKind::Buffer,
        ResourceKind::OptimalImage,
        ResourceKind::LinearImage,
    ];
    let mut live: Vec<(ResourceKind, Allocation)> = Vec::new();
    for i in 0..600u64 {
        let kind = kinds[(i % 3) as usize];
        let alignment = if kind == ResourceKind::Buffer {
            256
        } else {
            4096
        };
        let size = 100 + (i * 7919) % 20_000;
        live.push((kind, device_local(&allocator, size, alignment, kind)));
        if i % 4 == 3 {
            let (_, victim) = live.swap_remove((i as usize * 31) % live.len());
            free(&allocator, victim);
        }
    }
    let mixed = assert_no_shared_page(&live, granularity, "");
    for (_, allocation) in live {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
    mixed.len()
}

#[test]
fn granularity_up_to_4096_mixes_kinds_in_blocks() {
    // The default pads optimal images to whole pages up to 4096 (lavapipe
    // 64, NVIDIA 1024, mobile 4096): both kinds share blocks, never a page.
    for granularity in [64, 256, 1024, 4096] {
        let mixed = mixed_resources_never_share_a_page(granularity, Config::default());
        assert!(
            mixed > 0,
            "granularity {granularity}: no block held both kinds"
        );
    }
}

#[test]
fn large_granularity_separates_kinds() {
    assert_eq!(
        mixed_resources_never_share_a_page(65536, Config::default()),
        0
    );
    let separate = Config {
        max_padded_granularity: 256,
        ..Config::default()
    };
    assert_eq!(mixed_resources_never_share_a_page(1024, separate), 0);
}

/// With kinds in blocks of their own, the kept empty block serves either
/// kind: once the only image is freed, a buffer takes its block rather than
/// a new one being made beside it (before, two blocks, one of them empty).
#[test]
fn an_empty_block_changes_kind() {
    let (allocator, device) = allocator_with(
        FakeLayout::discrete().with_granularity(65536),
        Config::default(),
    );
    let image = device_local(&allocator, MIB, 65536, ResourceKind::OptimalImage);
    let memory = image.memory();
    free(&allocator, image);
    let buffer = device_local(&allocator, MIB, 256, ResourceKind::Buffer);
    assert_eq!(buffer.memory(), memory);
    let stats = allocator.stats();
    assert_eq!(
        (stats.memory_objects, device.counters().allocate_calls),
        (1, 1)
    );
    // And back: an image takes the block the buffer leaves empty.
    free(&allocator, buffer);
    let image = device_local(&allocator, MIB, 65536, ResourceKind::OptimalImage);
    assert_eq!(image.memory(), memory);
    assert_eq!(device.counters().allocate_calls, 1);
    // Never while the block holds anything: the kinds stay apart.
    let buffer = device_local(&allocator, MIB, 256, ResourceKind::Buffer);
    assert_ne!(buffer.memory(), memory);
    for allocation in [image, buffer] {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// Only an empty block changes kind: with an empty block kept elsewhere in
/// the pool, a buffer too large for it makes a new block rather than take
/// the image's block, however much room that has.
#[test]
fn a_block_in_use_never_changes_kind() {
    let (allocator, device) = allocator_with(
        FakeLayout::discrete().with_granularity(65536),
        Config::default(),
    );
    // A 64 MiB block for the image (its first block holds twice the
    // request), half of it free.
    let image = device_local(&allocator, 20 * MIB, 65536, ResourceKind::OptimalImage);
    // A 32 MiB block for buffers, left empty.
    let buffer = device_local(&allocator, MIB, 256, ResourceKind::Buffer);
    let emptied = buffer.memory();
    free(&allocator, buffer);
    let mut sizes: Vec<u64> = device.live_allocations().iter().map(|m| m.size).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [32 * MIB, 64 * MIB]);
    // Neither the empty buffer block (too small) nor the image's block
    // (in use) can take it.
    let large = device_local(&allocator, 40 * MIB, 256, ResourceKind::Buffer);
    assert_ne!(large.memory(), image.memory());
    assert_ne!(large.memory(), emptied);
    assert_eq!(device.counters().allocate_calls, 3);
    for allocation in [image, large] {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// A request for existing memory only takes the kept empty block of the
/// other kind too, as an ordinary request does: it is memory that exists.
/// Before, it failed with `NoRoomInExistingMemory` beside an empty block
/// that could hold it.
#[test]
fn existing_memory_only_takes_the_empty_block_of_the_other_kind() {
    let (allocator, device) = allocator_with(
        FakeLayout::discrete().with_granularity(65536),
        Config::default(),
    );
    let only = |alignment: u64, kind: ResourceKind| {
        Request::new(requirements(MIB, alignment), Usage::DEVICE_LOCAL, kind).existing_memory_only()
    };
    let image = device_local(&allocator, MIB, 65536, ResourceKind::OptimalImage);
    let memory = image.memory();
    free(&allocator, image);
    let buffer = allocator
        .allocate(&only(256, ResourceKind::Buffer))
        .unwrap();
    assert_eq!(buffer.memory(), memory);
    // And back, once the buffer leaves the block empty.
    free(&allocator, buffer);
    let image = allocator
        .allocate(&only(65536, ResourceKind::OptimalImage))
        .unwrap();
    assert_eq!(image.memory(), memory);
    assert_eq!(device.counters().allocate_calls, 1);
    free(&allocator, image);
    finish(allocator, &device);
}

/// A granularity that is not a power of two (no driver reports one; the
/// limit does not forbid it) keeps the kinds in separate blocks: padding
/// images to its pages would need an alignment the offset allocator cannot
/// give. Before, every optimal image made a new block it then could not
/// use, left it behind empty, and went to dedicated memory.
#[test]
fn a_granularity_that_is_not_a_power_of_two_separates_kinds() {
    assert_eq!(
        mixed_resources_never_share_a_page(3072, Config::default()),
        0
    );
    let (allocator, device) = allocator_with(
        FakeLayout::discrete().with_granularity(3072),
        Config::default(),
    );
    let images: Vec<Allocation> = (0..2)
        .map(|_| device_local(&allocator, 4096, 256, ResourceKind::OptimalImage))
        .collect();
    let buffer = device_local(&allocator, 4096, 256, ResourceKind::Buffer);
    assert!(images.iter().all(|a| !a.is_dedicated()));
    assert_eq!(images[0].memory(), images[1].memory());
    assert_ne!(images[0].memory(), buffer.memory());
    let stats = allocator.stats();
    assert_eq!(stats.memory_objects, 2, "one block per kind");
    assert!(stats.memory_types.iter().all(|t| t.empty_blocks == 0));
    for allocation in images.into_iter().chain([buffer]) {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// NVIDIA's layout: granularity 1024, buffers aligned to 16, optimal images
/// to 1024. Buffers pack densely; an image takes whole pages of the same
/// block, and the next buffer starts on the page after it. (Runs off: this
/// is how buffers that take ranges of their own, named or larger than
/// `Config::small_buffer_limit`, pack.)
#[test]
fn optimal_images_take_whole_pages_and_buffers_are_not_padded() {
    let (allocator, device) = allocator_with(
        FakeLayout::discrete().with_granularity(1024),
        without_runs(),
    );
    let request = |size, alignment, kind| device_local(&allocator, size, alignment, kind);
    let first = request(112, 16, ResourceKind::Buffer);
    let second = request(112, 16, ResourceKind::Buffer);
    let image = request(1000, 16, ResourceKind::OptimalImage);
    // Too large for the 800 bytes left in page 0 before the image.
    let third = request(900, 16, ResourceKind::Buffer);
    // Fits there: page 0 holds buffers only.
    let fourth = request(112, 16, ResourceKind::Buffer);
    assert_eq!(first.memory(), image.memory());
    assert_eq!(third.memory(), image.memory());
    assert_eq!((first.offset(), second.offset()), (0, 112));
    assert_eq!((image.offset(), image.size()), (1024, 1000));
    // The image's page [1024, 2048) is its own although it uses 1000 bytes.
    assert_eq!(third.offset(), 2048);
    assert_eq!(fourth.offset(), 224);
    assert_eq!(allocator.stats().live_bytes(), 3 * 112 + 900 + 1000);
    for allocation in [first, second, image, third, fourth] {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// Runs off, as above.
#[test]
fn small_granularity_shares_blocks_with_padding() {
    let (allocator, device) = allocator_with(FakeLayout::lavapipe(), without_runs());
    let buffer = device_local(&allocator, 100, 4, ResourceKind::Buffer);
    let image = device_local(&allocator, 100, 4, ResourceKind::OptimalImage);
    // One block; the buffer's pages [0, 64) and [64, 128) hold no image.
    assert_eq!(buffer.memory(), image.memory());
    assert_eq!((buffer.offset(), image.offset()), (0, 128));
    assert_eq!(image.size(), 100);
    assert_eq!(allocator.stats().live_bytes(), 200);
    free(&allocator, buffer);
    free(&allocator, image);
    finish(allocator, &device);
}

/// Runs off, as above.
#[test]
fn granularity_1_shares_blocks() {
    let (allocator, device) = allocator_with(FakeLayout::integrated(), without_runs());
    let buffer = device_local(&allocator, 100, 4, ResourceKind::Buffer);
    let image = device_local(&allocator, 100, 4, ResourceKind::OptimalImage);
    assert_eq!(buffer.memory(), image.memory());
    assert_eq!(image.offset(), 100);
    free(&allocator, buffer);
    free(&allocator, image);
    finish(allocator, &device);
}

/// A gap freed below a buffer, in the buffer's page, never takes an optimal
/// image, however well it fits: the page it would share is the one after
/// the gap (vulkano's suballocator checked only the range before a gap).
/// In a default pool's block at 4096 and in a custom pool's at 64 KiB, which
/// custom pools pad to as well.
#[test]
fn an_image_never_takes_a_gap_in_the_page_of_the_buffer_after_it() {
    for (granularity, in_pool) in [(4096, false), (65536, true)] {
        let (allocator, device) = allocator_with(
            FakeLayout::discrete().with_granularity(granularity),
            without_runs(),
        );
        let pool = in_pool.then(|| {
            allocator
                .create_pool(&PoolDesc::new(1).block_size(MIB))
                .unwrap()
        });
        let request = |size, alignment, kind| {
            let mut desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
            if let Some(pool) = pool {
                desc = desc.pool(pool);
            }
            let request = Request::with_desc(requirements(size, alignment), kind, desc);
            allocator.allocate(&request).unwrap()
        };
        let first = request(1024, 16, ResourceKind::Buffer);
        let second = request(1024, 16, ResourceKind::Buffer);
        let after = request(1024, 16, ResourceKind::Buffer);
        assert_eq!(
            (first.offset(), second.offset(), after.offset()),
            (0, 1024, 2048)
        );
        free(&allocator, first);
        free(&allocator, second);
        // [0, 2048) is free and holds 1000 bytes aligned to 16, but page 0
        // ends in `after`.
        let image = request(1000, 16, ResourceKind::OptimalImage);
        assert_eq!(image.memory(), after.memory());
        assert!(
            image.offset() / granularity > (after.offset() + after.size() - 1) / granularity,
            "granularity {granularity}: the image at {} shares a page with the buffer at {}",
            image.offset(),
            after.offset()
        );
        for allocation in [after, image] {
            free(&allocator, allocation);
        }
        if let Some(pool) = pool {
            allocator.destroy_pool(pool).unwrap();
        }
        finish(allocator, &device);
    }
}

/// A resource of unknown kind, `Request`'s default, is linear and optimal
/// at once for the granularity: it takes whole pages, which no other
/// allocation shares, whether images are padded in shared blocks (1024),
/// kept in blocks of their own (64 KiB) or padded in a custom pool; small
/// ones take no run slot, whose neighbours are buffers on shared pages.
#[test]
fn a_resource_of_unknown_kind_shares_no_page() {
    use ResourceKind::{Buffer, LinearImage, OptimalImage, Unknown};
    assert_eq!(Request::default().kind, Unknown);
    for (granularity, in_pool) in [(1024, false), (65536, false), (65536, true)] {
        let layout = FakeLayout::discrete().with_granularity(granularity);
        let (allocator, device) = allocator_with(layout, Config::default());
        let pool = in_pool.then(|| allocator.create_pool(&PoolDesc::new(1)).unwrap());
        let kinds = [Buffer, Unknown, OptimalImage, LinearImage, Unknown];
        let mut live: Vec<(ResourceKind, Allocation)> = Vec::new();
        for i in 0..300u64 {
            let kind = kinds[(i % 5) as usize];
            let mut desc = AllocationDesc::new(Usage::DEVICE_LOCAL);
            if let Some(pool) = pool {
                desc = desc.pool(pool);
            }
            let size = 100 + (i * 7919) % 5000;
            // Unknown through the default, as a request built field by
            // field without a kind is.
            let mut request = Request::default();
            request.requirements = requirements(size, 16);
            request.desc = desc;
            if kind != Unknown {
                request.kind = kind;
            }
            let allocation = allocator.allocate(&request).unwrap();
            if kind == Unknown {
                assert_eq!(allocation.offset() % granularity, 0, "{i}: {allocation:?}");
            }
            live.push((kind, allocation));
            if i % 4 == 3 {
                let (_, victim) = live.swap_remove((i as usize * 31) % live.len());
                free(&allocator, victim);
            }
        }
        let context = format!(", pool {in_pool}");
        assert_no_shared_page(&live, granularity, &context);
        for (_, allocation) in live {
            free(&allocator, allocation);
        }
        if let Some(pool) = pool {
            allocator.destroy_pool(pool).unwrap();
        }
        finish(allocator, &device);
    }
}

/// On a device whose granularity is not a power of two (none known), a
/// resource of unknown kind cannot be padded to whole pages: it takes
/// dedicated memory, even under `DedicatedPolicy::Never`, in a default
/// pool and in a custom one.
#[test]
fn a_resource_of_unknown_kind_takes_dedicated_memory_on_odd_pages() {
    let (allocator, device) = allocator_with(
        FakeLayout::discrete().with_granularity(3072),
        Config::default(),
    );
    let pool = allocator.create_pool(&PoolDesc::new(1)).unwrap();
    let descs = [
        AllocationDesc::new(Usage::DEVICE_LOCAL),
        AllocationDesc::new(Usage::DEVICE_LOCAL).dedicated(DedicatedPolicy::Never),
        AllocationDesc::new(Usage::DEVICE_LOCAL).pool(pool),
    ];
    for desc in descs {
        let request = Request::with_desc(requirements(4096, 256), ResourceKind::Unknown, desc);
        let allocation = allocator.allocate(&request).unwrap();
        assert!(allocation.is_dedicated(), "{desc:?}");
        free(&allocator, allocation);
    }
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A request naming a buffer as its dedicated target and an image as its
/// kind, or the reverse, is refused before any memory is made: its kind
/// decides the placement, so one of the two is wrong. An unknown kind goes
/// with either target.
#[test]
fn a_dedicated_target_of_the_other_kind_is_refused() {
    let (allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    let buffer = DedicatedTarget::Buffer(ash::vk::Buffer::from_raw(0x1000));
    let image = DedicatedTarget::Image(ash::vk::Image::from_raw(0x2000));
    let request = |target, kind| {
        Request::new(requirements(4096, 256), Usage::DEVICE_LOCAL, kind).fake_target(target)
    };
    for (target, kind) in [
        (buffer, ResourceKind::LinearImage),
        (buffer, ResourceKind::OptimalImage),
        (image, ResourceKind::Buffer),
    ] {
        let refused = allocator.allocate(&request(target, kind));
        assert_eq!(
            refused.unwrap_err(),
            Error::DedicatedTargetMismatch,
            "{kind:?}"
        );
    }
    assert_eq!(device.counters().allocate_calls, 0);
    for (target, kind) in [
        (buffer, ResourceKind::Buffer),
        (buffer, ResourceKind::Unknown),
        (image, ResourceKind::LinearImage),
        (image, ResourceKind::OptimalImage),
        (image, ResourceKind::Unknown),
    ] {
        let allocation = allocator.allocate(&request(target, kind)).unwrap();
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// A dedicated target is set, unsafely, for the request's requirements:
/// dedicated memory takes their size, which must be the resource's
/// (VUID-VkMemoryDedicatedAllocateInfo-buffer-02965, -image-02964). The
/// requirements are public, so safe code may change the size afterwards;
/// such a request is refused as a mismatch before any memory is made,
/// where `allocate` (safe) handed the driver memory of the new size
/// dedicated to the old resource.
#[test]
fn a_dedicated_target_whose_size_changed_since_is_refused() {
    use vk_suballoc::device::MemoryDeviceExt;
    let (allocator, device) = allocator_with(FakeLayout::discrete(), Config::default());
    // SAFETY: a fake device.
    let (buffer, buffer_requirements, _) = unsafe {
        device
            .create_buffer(4096, ash::vk::BufferUsageFlags::TRANSFER_DST)
            .unwrap()
    };
    let request = Request::new(
        buffer_requirements,
        Usage::DEVICE_LOCAL,
        ResourceKind::Buffer,
    )
    .dedicated(DedicatedPolicy::Always)
    .fake_target(DedicatedTarget::Buffer(buffer));
    let mut resized = request;
    resized.requirements.size *= 2;
    assert_eq!(
        allocator.allocate(&resized).map(|a| a.size()),
        Err(Error::DedicatedTargetMismatch)
    );
    assert_eq!(device.counters().allocate_calls, 0);
    // As it was set: taken.
    let allocation = allocator.allocate(&request).unwrap();
    assert!(allocation.is_dedicated());
    free(&allocator, allocation);
    // SAFETY: its memory is freed.
    unsafe { device.destroy_buffer(buffer) };
    finish(allocator, &device);
}
