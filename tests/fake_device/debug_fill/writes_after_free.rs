//! Writes into freed memory, made on purpose and caught: when the memory
//! is allocated again or by `check_corruption`, and when the block they
//! land in is released (by `trim` or `destroy_pool`), logged even when the
//! memory callback panics. Each is counted once.

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{PoolDesc, ResourceKind};

use super::super::leak_log::{record_thread_lines, take_thread_lines};
use super::super::{allocator_with, assert_panicked_with, finish, free};

use super::{all, bytes_of, request, with_fill, write_at, HOST, MIB, NEW};

/// A host write through a pointer kept from a freed allocation is listed
/// by `check_corruption` (its free range, the first byte written), then,
/// when an allocation takes those bytes again, logged (memory type,
/// offsets, the pool) and counted once; the new allocation still reads
/// `0xDC`, and the free ranges are clean again. So for a range, a run
/// slot, and a custom pool's range; and for a GPU write.
#[test]
fn a_write_after_free_is_caught() {
    super::super::leak_log::install();
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let pool = allocator
        .create_pool(&PoolDesc::new(HOST).block_size(MIB).name("fill pool"))
        .unwrap();
    let keeper = allocator
        .allocate(&request(64, ResourceKind::Buffer, None))
        .unwrap();
    let in_pool = allocator
        .allocate(&request(64, ResourceKind::Buffer, Some(pool)))
        .unwrap();
    let cases = [
        (
            "range",
            request(50_000, ResourceKind::Buffer, None),
            4321,
            false,
        ),
        (
            "run slot",
            request(200, ResourceKind::Buffer, None),
            199,
            false,
        ),
        (
            "pool range",
            request(9000, ResourceKind::Buffer, Some(pool)),
            0,
            false,
        ),
        (
            "gpu write",
            request(30_000, ResourceKind::Buffer, None),
            17,
            true,
        ),
    ];
    for (name, request, at, gpu) in cases {
        let count = allocator.corruptions_detected();
        let a = allocator.allocate(&request).unwrap();
        let (memory, offset, pointer) = (a.memory(), a.offset(), a.mapped_ptr().unwrap());
        free(&allocator, a);
        assert!(
            allocator.check_corruption(1 << HOST).unwrap().is_clean(),
            "{name}"
        );
        if gpu {
            // SAFETY: no slice of these bytes is alive.
            assert!(unsafe { device.write(memory, offset + at, &[0x42]) });
        } else {
            write_at(pointer, at, &[0x42]);
        }
        let report = allocator.check_corruption(!0).unwrap();
        assert!(!report.is_clean(), "{name}");
        assert!(report.damaged.is_empty(), "{name}: {report:?}");
        assert_eq!(report.written_after_free.len(), 1, "{name}: {report:?}");
        let written = &report.written_after_free[0];
        assert_eq!(
            (written.memory_type, written.memory, written.first_changed),
            (HOST, memory, offset + at),
            "{name}"
        );
        assert!(written.offset <= offset + at && offset + at < written.offset + written.size);
        // Found, not counted.
        assert_eq!(allocator.corruptions_detected(), count, "{name}");
        let again = allocator.allocate(&request).unwrap();
        assert_eq!((again.memory(), again.offset()), (memory, offset), "{name}");
        assert_eq!(allocator.corruptions_detected(), count + 1, "{name}");
        assert!(all(&bytes_of(&device, &again), NEW), "{name}");
        let lines = super::super::leak_log::lines();
        let needle = format!("byte {} of memory {memory:?}", offset + at);
        let line = lines
            .iter()
            .find(|line| line.contains(&needle))
            .unwrap_or_else(|| panic!("{name}: no line has {needle:?}: {lines:#?}"));
        let mut figures = vec![
            "written after it was freed".to_owned(),
            format!("memory type {HOST}"),
            format!("at offset {offset}"),
        ];
        if name == "pool range" {
            figures.push("in custom pool \"fill pool\"".to_owned());
        }
        for figure in figures {
            assert!(line.contains(&figure), "{line:?} lacks {figure:?}");
        }
        assert!(allocator.check_corruption(!0).unwrap().is_clean(), "{name}");
        free(&allocator, again);
        assert_eq!(allocator.corruptions_detected(), count + 1, "{name}");
    }
    free(&allocator, keeper);
    free(&allocator, in_pool);
    allocator.destroy_pool(pool).unwrap();
    finish(allocator, &device);
}

/// A write after free found as the memory is allocated again is logged as
/// an error (`log::error!`, as the README and `Config::debug_fill` say),
/// not a warning.
#[test]
fn a_write_after_free_is_logged_as_an_error() {
    record_thread_lines();
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let request = request(50_000, ResourceKind::Buffer, None);
    let a = allocator.allocate(&request).unwrap();
    let (memory, offset, pointer) = (a.memory(), a.offset(), a.mapped_ptr().unwrap());
    free(&allocator, a);
    write_at(pointer, 10, &[0x42]);
    let again = allocator.allocate(&request).unwrap();
    assert_eq!((again.memory(), again.offset()), (memory, offset));
    let written: Vec<String> = take_thread_lines()
        .into_iter()
        .filter(|line| line.contains("written after it was freed"))
        .collect();
    assert_eq!(written.len(), 1, "{written:#?}");
    assert!(written[0].starts_with("ERROR: "), "{written:#?}");
    free(&allocator, again);
    finish(allocator, &device);
}

/// A write into freed memory that no allocation takes again before its
/// block goes is caught when the block is released: by `trim` for the
/// empty block a memory type keeps, by `destroy_pool` for a custom pool's
/// block; counted once and logged (the byte, its memory, the pool). An
/// untouched block is released with nothing found.
#[test]
fn a_write_after_free_is_caught_when_its_block_is_released() {
    super::super::leak_log::install();
    let (allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let pool = allocator
        .create_pool(&PoolDesc::new(HOST).block_size(MIB).name("released pool"))
        .unwrap();
    let cases = [
        ("untouched", None, None),
        ("trimmed", Some(123), None),
        ("destroyed pool", Some(4095), Some(pool)),
    ];
    let mut count = 0;
    for (name, written, pool) in cases {
        let a = allocator
            .allocate(&request(50_000, ResourceKind::Buffer, pool))
            .unwrap();
        let (memory, offset, pointer) = (a.memory(), a.offset(), a.mapped_ptr().unwrap());
        free(&allocator, a);
        // The emptied block is kept: its bytes are still mapped.
        if let Some(at) = written {
            write_at(pointer, at, &[0x42]);
            count += 1;
        }
        match pool {
            Some(pool) => allocator.destroy_pool(pool).unwrap(),
            None => assert!(allocator.trim() > 0, "{name}"),
        }
        assert!(device.live_allocations().is_empty(), "{name}");
        assert_eq!(allocator.corruptions_detected(), count, "{name}");
        let Some(at) = written else { continue };
        let lines = super::super::leak_log::lines();
        let needle = format!("byte {} of memory {memory:?}", offset + at);
        let line = lines
            .iter()
            .find(|line| line.contains(&needle))
            .unwrap_or_else(|| panic!("{name}: no line has {needle:?}: {lines:#?}"));
        assert!(line.contains("was released"), "{line}");
        if pool.is_some() {
            assert!(line.contains("in custom pool \"released pool\""), "{line}");
        }
    }
    finish(allocator, &device);
}

/// A memory callback that panics on the `Freed` event of a released block
/// in which a write after free is found: the block is released, and the
/// line logged, before the panic reaches the caller.
#[test]
fn a_write_found_as_its_block_is_released_is_logged_when_the_callback_panics() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    super::super::leak_log::install();
    let (mut allocator, device) = allocator_with(FakeLayout::discrete(), with_fill());
    let armed = Arc::new(AtomicBool::new(false));
    let trigger = Arc::clone(&armed);
    allocator.set_memory_callback(move |event| {
        if event.kind == vk_suballoc::MemoryEventKind::Freed
            && trigger.swap(false, Ordering::SeqCst)
        {
            panic!("the test's callback panics on Freed");
        }
    });
    let a = allocator
        .allocate(&request(30_000, ResourceKind::Buffer, None))
        .unwrap();
    let (memory, offset, pointer) = (a.memory(), a.offset(), a.mapped_ptr().unwrap());
    free(&allocator, a);
    write_at(pointer, 77, &[0]);
    armed.store(true, Ordering::SeqCst);
    let trimmed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| allocator.trim()));
    let callback = "the test's callback panics on Freed";
    assert_panicked_with(trimmed, callback, "the callback's panic reaches the caller");
    assert!(device.live_allocations().is_empty());
    assert_eq!(allocator.corruptions_detected(), 1);
    let needle = format!("byte {} of memory {memory:?}", offset + 77);
    assert!(
        super::super::leak_log::lines()
            .iter()
            .any(|line| line.contains(&needle)),
        "no line has {needle:?}"
    );
    finish(allocator, &device);
}
