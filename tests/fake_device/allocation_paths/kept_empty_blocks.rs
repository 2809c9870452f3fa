//! Which empty blocks a memory type keeps: up to
//! `Config::empty_block_reserve` times the bytes in use beside the largest,
//! so live bytes that swing back reuse them; the smallest go first and, of
//! two of one size, the one just emptied; and they age out after
//! `Config::empty_block_frames` frames (but the largest, which never ages),
//! counted after `collect_idle` too.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{Allocation, Config, Usage};

use super::super::frames::free_all_and_finish;
use super::super::{allocator, allocator_with, assert_panicked_with, buffer, finish, free};

use super::{free_all, twenty_mib, twenty_mib_buffers, MIB};

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
            device.signal_fence(super::super::frames::end_frame(&allocator, &device));
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
    device.signal_fence(super::super::frames::end_frame(&allocator, &device));
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

/// With `Config::empty_block_reserve` 0 (VMA's rule) the one empty block
/// kept is the memory type's largest, which aging never releases: however
/// many frames pass, it stays until `trim`, a request short of memory or
/// the allocator's drop (as VMA's stays, but VMA gives it back at a later
/// free once it has sorted last).
#[test]
fn the_one_block_a_zero_reserve_keeps_does_not_age() {
    let config = Config {
        empty_block_reserve: 0.0,
        empty_block_frames: 1,
        ..Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let long_lived = twenty_mib_buffers(&allocator, 15);
    let transient = twenty_mib_buffers(&allocator, 30);
    free_all(&allocator, transient);
    let empty_blocks = || allocator.stats().memory_types[1].empty_blocks;
    assert_eq!(empty_blocks(), 1);
    for frame in 0..4 {
        let fence = super::super::frames::end_frame(&allocator, &device);
        device.signal_fence(fence);
        allocator.collect().unwrap();
        assert_eq!(empty_blocks(), 1, "after sealing frame {frame}");
    }
    allocator.trim();
    assert_eq!(empty_blocks(), 0);
    free_all_and_finish(allocator, &device, long_lived);
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
        let fence = super::super::frames::end_frame(&allocator, &device);
        device.signal_fence(fence);
        allocator.collect().unwrap();
        assert_eq!(empty_blocks(), expected, "after sealing frame {frame}");
    }
    free_all_and_finish(allocator, &device, long_lived);
}

/// What `end_frame`'s docs say of a memory callback that panics as the
/// frame's end releases an aged empty block: the panic reaches the caller
/// with the frame sealed (its index not returned), the frees queued in it
/// wait for its fence and `collect` releases them as any frame's; the
/// block is freed all the same.
#[test]
fn a_callback_panicking_on_an_aged_release_leaves_the_frame_sealed() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use vk_suballoc::{Collected, MemoryEventKind};

    let config = Config {
        empty_block_frames: 1,
        ..Config::default()
    };
    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let long_lived = twenty_mib_buffers(&allocator, 15);
    // Emptied in frame 0: two 256 MiB blocks kept (300 MiB in use).
    free_all(&allocator, twenty_mib_buffers(&allocator, 30));
    let empty_blocks = || allocator.stats().memory_types[1].empty_blocks;
    assert_eq!(empty_blocks(), 2);
    let queued = allocator.allocate(&twenty_mib()).unwrap();
    allocator.free_after_frame(queued).unwrap();
    let objects = device.live_allocations().len();
    let armed = Arc::new(AtomicBool::new(true));
    let arm = Arc::clone(&armed);
    allocator.set_memory_callback(move |event| {
        if event.kind == MemoryEventKind::Freed && arm.swap(false, Ordering::SeqCst) {
            panic!("the test's callback panics on the aged block's free");
        }
    });
    let fence = device.create_fence();
    let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: a fake fence, signalled below.
        unsafe { allocator.end_frame(fence) }
    }));
    let callback = "the test's callback panics on the aged block's free";
    assert_panicked_with(ended, callback, "the callback's panic reaches the caller");
    assert!(
        !armed.load(Ordering::SeqCst),
        "the callback heard the release"
    );
    // Sealed: frame 1 is current, and frame 0 waits for its fence.
    assert_eq!(allocator.current_frame(), 1);
    assert_eq!(allocator.frames_in_flight(), 1);
    assert_eq!(allocator.collect(), Ok(Collected::default()));
    // The aged block is freed, not left half released.
    assert_eq!(device.live_allocations().len(), objects - 1);
    assert_eq!(allocator.stats().memory_types[1].empty_blocks, 1);
    device.signal_fence(fence);
    assert_eq!(
        allocator.collect(),
        Ok(Collected {
            frames: 1,
            frees: 1
        })
    );
    free_all_and_finish(allocator, &device, long_lived);
}
