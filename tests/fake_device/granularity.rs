//! `bufferImageGranularity`: linear and optimal resources never share a page.

use ash::vk::Handle;
use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Allocation, Request, ResourceKind, Usage};

use super::{allocator, finish, free, requirements};

/// Allocates an interleaved mix of buffers, linear and optimal images and
/// checks that no linear and optimal allocation share a granularity page of
/// the same memory object.
fn mixed_resources_never_share_a_page(granularity: u64) {
    let (allocator, device) = allocator(FakeLayout::discrete().with_granularity(granularity));
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
        let request = Request::new(requirements(size, alignment), Usage::DEVICE_LOCAL, kind);
        live.push((kind, allocator.allocate(&request).unwrap()));
        if i % 4 == 3 {
            let (_, victim) = live.swap_remove((i as usize * 31) % live.len());
            free(&allocator, victim);
        }
    }
    let page = |offset: u64| offset / granularity;
    for (i, (kind_a, a)) in live.iter().enumerate() {
        for (kind_b, b) in &live[i + 1..] {
            if a.memory() != b.memory() || kind_a.is_linear() == kind_b.is_linear() {
                continue;
            }
            let (first, second) = if a.offset() < b.offset() {
                (a, b)
            } else {
                (b, a)
            };
            assert!(
                page(first.offset() + first.size() - 1) < page(second.offset()),
                "granularity {granularity}: {:?}+{} and {:?}+{} share a page of {:#x}",
                first.offset(),
                first.size(),
                second.offset(),
                second.size(),
                a.memory().as_raw()
            );
        }
    }
    for (_, allocation) in live {
        free(&allocator, allocation);
    }
    finish(allocator, &device);
}

#[test]
fn granularity_1024() {
    mixed_resources_never_share_a_page(1024);
}

#[test]
fn granularity_65536() {
    mixed_resources_never_share_a_page(65536);
}

#[test]
fn granularity_64_and_256_pad_instead() {
    mixed_resources_never_share_a_page(64);
    mixed_resources_never_share_a_page(256);
}

#[test]
fn small_granularity_shares_blocks_with_padding() {
    let (allocator, device) = allocator(FakeLayout::lavapipe());
    let buffer = allocator
        .allocate(&Request::new(
            requirements(100, 4),
            Usage::DEVICE_LOCAL,
            ResourceKind::Buffer,
        ))
        .unwrap();
    let image = allocator
        .allocate(&Request::new(
            requirements(100, 4),
            Usage::DEVICE_LOCAL,
            ResourceKind::OptimalImage,
        ))
        .unwrap();
    // One block; the buffer's page [0, 64) and [64, 128) are its own.
    assert_eq!(buffer.memory(), image.memory());
    assert_eq!((buffer.offset(), image.offset()), (0, 128));
    assert_eq!(image.size(), 100);
    assert_eq!(allocator.stats().live_bytes(), 200);
    free(&allocator, buffer);
    free(&allocator, image);
    finish(allocator, &device);
}

#[test]
fn granularity_1_shares_blocks() {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let buffer = allocator
        .allocate(&Request::new(
            requirements(100, 4),
            Usage::DEVICE_LOCAL,
            ResourceKind::Buffer,
        ))
        .unwrap();
    let image = allocator
        .allocate(&Request::new(
            requirements(100, 4),
            Usage::DEVICE_LOCAL,
            ResourceKind::OptimalImage,
        ))
        .unwrap();
    assert_eq!(buffer.memory(), image.memory());
    assert_eq!(image.offset(), 100);
    free(&allocator, buffer);
    free(&allocator, image);
    finish(allocator, &device);
}
