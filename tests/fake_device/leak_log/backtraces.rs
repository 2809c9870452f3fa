//! Leaks that say where they were made (`Config::allocation_backtraces`),
//! a defragmentation move's destination keeping its source's backtrace.
//! (`has_line_tables` stays in `leak_log.rs`: it looks for that file's name
//! in its own frame.)

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{DedicatedPolicy, Usage};

use super::super::{allocator_with, buffer, finish, requirements, without_runs, FakeAllocator};
use super::{has_line_tables, record_thread_lines, take_thread_warnings};

/// With `Config::allocation_backtraces`, each leak line says where the
/// leaked allocation was made (the test's own frame is in it): in a
/// block, in a run's slot, in dedicated memory and in a custom pool. An
/// allocation freed before the drop is no leak, and a leak without the
/// setting has no backtrace.
#[test]
fn leaks_print_where_they_were_made() {
    record_thread_lines();
    let config = vk_suballoc::Config {
        allocation_backtraces: true,
        ..vk_suballoc::Config::default()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let pool = allocator
        .create_pool(&vk_suballoc::PoolDesc::new(1))
        .unwrap();
    let pooled = vk_suballoc::Request::with_desc(
        requirements(1 << 20, 256),
        vk_suballoc::ResourceKind::Buffer,
        vk_suballoc::AllocationDesc::new(Usage::DEVICE_LOCAL)
            .pool(pool)
            .name("traced pooled"),
    );
    let requests = [
        buffer(64 << 10, 256, Usage::DEVICE_LOCAL).name("traced block"),
        buffer(1000, 16, Usage::DEVICE_LOCAL).name("traced slot"),
        buffer(4096, 256, Usage::UPLOAD)
            .name("traced dedicated")
            .dedicated(DedicatedPolicy::Always),
        pooled,
    ];
    let leaked: Vec<_> = requests
        .iter()
        .map(|request| allocator.allocate(request).unwrap())
        .collect();
    assert!(leaked[2].is_dedicated());
    let freed = allocator
        .allocate(&buffer(1000, 16, Usage::DEVICE_LOCAL).name("traced freed"))
        .unwrap();
    // SAFETY: the fake device runs no GPU work.
    unsafe { allocator.free(freed) }.unwrap();
    finish(allocator, &device);

    let (plain, device) = super::super::allocator(FakeLayout::discrete());
    let untraced = plain
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL).name("untraced"))
        .unwrap();
    finish(plain, &device);

    let warnings = take_thread_warnings();
    let line_tables = has_line_tables();
    let find = |name: &str| {
        warnings
            .iter()
            .find(|line| line.contains(&format!("leaked allocation \"{name}\"")))
            .unwrap_or_else(|| panic!("no leak line for {name} in {warnings:#?}"))
    };
    for name in ["traced block", "traced slot", "traced pooled"] {
        let line = find(name);
        let (_, made_at) = line
            .split_once("allocated at:\n")
            .unwrap_or_else(|| panic!("{line}"));
        // The allocator's own frames are left out: the first frame shown
        // is the test's (the closure that allocates).
        let mut lines = made_at.lines();
        assert!(
            lines
                .next()
                .is_some_and(|l| l.contains("frames of the allocator's call left out")),
            "{line}"
        );
        let first = lines.next().unwrap_or_default();
        if line_tables {
            assert!(first.contains("leaks_print_where_they_were_made"), "{line}");
        }
        // No frame shown is one of the allocator's own functions. A
        // caller's frame may name the crate's types among its generic
        // arguments (`map_fold::<&vk_suballoc::Request, ..>` under v0 symbol
        // mangling, nightly's default): it is the caller's all the same.
        let allocator_frame = |frame: &str| {
            frame
                .trim_start()
                .split_once(": ")
                .is_some_and(|(number, symbol)| {
                    number.bytes().all(|b| b.is_ascii_digit())
                        && (symbol.starts_with("vk_suballoc::")
                            || symbol.starts_with("<vk_suballoc::"))
                })
        };
        assert!(
            !first.is_empty() && !made_at.lines().any(allocator_frame),
            "{line}"
        );
    }
    let dedicated = warnings
        .iter()
        .find(|line| line.contains("leaked dedicated allocation \"traced dedicated\""))
        .unwrap_or_else(|| panic!("no dedicated leak line in {warnings:#?}"));
    assert!(
        dedicated.contains("leaks_print_where_they_were_made") || !line_tables,
        "{dedicated}"
    );
    assert!(
        !warnings.iter().any(|line| line.contains("traced freed")),
        "{warnings:#?}"
    );
    assert!(
        !find("untraced").contains("allocated at"),
        "{}",
        find("untraced")
    );
    drop((leaked, untraced));
}

/// A defragmentation move's destination keeps the backtrace of the
/// allocation it replaces: a leak of a moved allocation says where it was
/// first made, not where the plan was made.
#[test]
fn moved_allocations_keep_where_they_were_made() {
    use vk_suballoc::{DefragmentationLimits, Movable, ResourceKind};
    record_thread_lines();
    let config = vk_suballoc::Config {
        allocation_backtraces: true,
        ..without_runs()
    };
    let (allocator, device) = allocator_with(FakeLayout::discrete(), config);
    let mut live = allocations_made_before_the_plan(&allocator);
    let movables: Vec<Movable<'_>> = live
        .iter()
        .map(|a| Movable::new(a, requirements(a.size(), 256), ResourceKind::Buffer))
        .collect();
    let plan = allocator
        .plan_defragmentation(&movables, &DefragmentationLimits::default())
        .unwrap();
    drop(movables);
    assert!(!plan.moves.is_empty());
    let moved = plan.moves.len();
    for planned in plan.moves {
        let old = std::mem::replace(&mut live[planned.movable], planned.destination);
        // SAFETY: the fake device runs no GPU work.
        unsafe { allocator.free(old) }.unwrap();
    }
    finish(allocator, &device);
    let leaks: Vec<String> = take_thread_warnings()
        .into_iter()
        .filter(|line| line.contains("\"defragmented\""))
        .collect();
    assert_eq!(leaks.len(), live.len(), "{leaks:#?}");
    let line_tables = has_line_tables();
    for line in &leaks {
        assert!(
            line.contains("allocations_made_before_the_plan") || !line_tables,
            "{line}"
        );
    }
    assert!(moved > 0 && moved < live.len());
    drop(live);
}

/// Two blocks of 1 MiB buffers named "defragmented" with holes in the
/// first (`defragment::two_fragmented_blocks`'s shape): the second
/// block's buffers fit in the holes.
fn allocations_made_before_the_plan(allocator: &FakeAllocator) -> Vec<vk_suballoc::Allocation> {
    let all: Vec<_> = (0..64)
        .map(|_| {
            allocator
                .allocate(&buffer(1 << 20, 256, Usage::DEVICE_LOCAL).name("defragmented"))
                .unwrap()
        })
        .collect();
    let mut live = Vec::new();
    for (i, allocation) in all.into_iter().enumerate() {
        if (i < 32 && i % 2 == 0) || i >= 56 {
            live.push(allocation);
        } else {
            // SAFETY: the fake device runs no GPU work.
            unsafe { allocator.free(allocation) }.unwrap();
        }
    }
    live
}
