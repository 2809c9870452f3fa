//! Dropping the allocator with live allocations names each leak in the log.

use std::cell::{Cell, RefCell};
use std::sync::{Mutex, Once};

use vk_suballoc::device::fake::FakeLayout;
use vk_suballoc::{DedicatedPolicy, UploadRingDesc, Usage};

use super::{allocator, buffer, finish};

#[path = "leak_log/backtraces.rs"]
mod backtraces;

/// Keeps every warning logged in this test binary; panics on a line of
/// any level that [`panic_on_line_with`] armed on the logging thread.
struct Capture;

static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());
static CAPTURE: Capture = Capture;

/// A line's text and the hook the logger runs on it ([`on_line_with`]).
type Hook = (&'static str, Box<dyn FnOnce()>);

thread_local! {
    /// The text of the next line this thread's logger panics on.
    static PANIC_ON: Cell<Option<&'static str>> = const { Cell::new(None) };
    /// The text of the next line on which this thread's logger runs a
    /// hook, and the hook.
    static HOOK_ON: RefCell<Option<Hook>> = const { RefCell::new(None) };
    /// Every line logged on this thread, of any level, while recording
    /// ([`record_thread_lines`]).
    static THREAD_LINES: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// Starts keeping every line logged on this thread, of any level (debug
/// lines too), with its level, for [`take_thread_lines`]; installs the
/// capture.
pub(super) fn record_thread_lines() {
    install();
    THREAD_LINES.with(|lines| *lines.borrow_mut() = Some(Vec::new()));
}

/// The lines this thread logged since [`record_thread_lines`] or the last
/// call, in order.
pub(super) fn take_thread_lines() -> Vec<String> {
    THREAD_LINES.with(|lines| {
        lines
            .borrow_mut()
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    })
}

/// The warnings among [`take_thread_lines`]' lines, in order.
pub(super) fn take_thread_warnings() -> Vec<String> {
    take_thread_lines()
        .into_iter()
        .filter(|line| line.starts_with("WARN"))
        .collect()
}

/// Disarms [`panic_on_line_with`] on this thread when no line fired it.
pub(super) fn disarm_panic_on_line() {
    PANIC_ON.with(|armed| armed.set(None));
}

/// Makes the logger run `hook` on the next line logged on this thread
/// that contains `text`, once, before it keeps the line: as a logger that
/// calls back into the allocator (to read its stats, say) on an error.
pub(super) fn on_line_with(text: &'static str, hook: impl FnOnce() + 'static) {
    install();
    HOOK_ON.with(|armed| *armed.borrow_mut() = Some((text, Box::new(hook))));
}

/// Makes the logger panic on the next line logged on this thread that
/// contains `text`, once, as a logger that fails a test on a warning does.
pub(super) fn panic_on_line_with(text: &'static str) {
    install();
    PANIC_ON.with(|armed| armed.set(Some(text)));
}

impl log::Log for Capture {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record<'_>) {
        let line = record.args().to_string();
        THREAD_LINES.with(|lines| {
            if let Some(lines) = lines.borrow_mut().as_mut() {
                lines.push(format!("{}: {line}", record.level()));
            }
        });
        if let Some(text) = PANIC_ON.with(Cell::get).filter(|text| line.contains(text)) {
            PANIC_ON.with(|armed| armed.set(None));
            panic!("the test's logger panics on {text:?}");
        }
        let hook = HOOK_ON.with(|armed| {
            let mut armed = armed.borrow_mut();
            match &*armed {
                Some((text, _)) if line.contains(text) => armed.take().map(|(_, hook)| hook),
                _ => None,
            }
        });
        if let Some(hook) = hook {
            hook();
        }
        if self.enabled(record.metadata()) {
            let mut lines = LINES.lock().unwrap_or_else(|e| e.into_inner());
            lines.push(line);
        }
    }

    fn flush(&self) {}
}

/// Installs the capture, once per test binary (other files' tests read
/// the lines too: `margins/overrun_checks.rs`).
pub(super) fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        log::set_logger(&CAPTURE).unwrap();
        // Debug lines reach the logger for `panic_on_line_with`; only
        // warnings and errors are kept.
        log::set_max_level(log::LevelFilter::Debug);
    });
}

/// Every line captured so far, by every test of the binary.
pub(super) fn lines() -> Vec<String> {
    LINES.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

#[test]
fn leaks_are_logged_with_name_size_and_type() {
    install();
    let (allocator, device) = allocator(FakeLayout::discrete());
    let kept = allocator
        .allocate(&buffer(1000, 16, Usage::UPLOAD).name("leaky staging buffer"))
        .unwrap();
    let dedicated = allocator
        .allocate(
            &buffer(3000, 16, Usage::DEVICE_LOCAL)
                .name("leaky render target")
                .dedicated(DedicatedPolicy::Always),
        )
        .unwrap();
    // A name with quotes and a line break stays on its line, escaped.
    let odd = allocator
        .allocate(&buffer(64 << 10, 16, Usage::DEVICE_LOCAL).name("odd \"name\"\nforged line"))
        .unwrap();
    finish(allocator, &device);
    let in_run = allocator_leak_in_run();
    let lines = LINES.lock().unwrap().clone();
    let find = |name: &str| {
        lines
            .iter()
            .find(|line| line.contains(name))
            .unwrap_or_else(|| panic!("no leak line for {name} in {lines:#?}"))
            .clone()
    };
    let block_leak = find("leaky staging buffer");
    // A named buffer in a run: its slot's class, 1700 bytes -> 1792.
    assert!(
        lines
            .iter()
            .any(|line| line
                .contains("\"leaky slot\": 1792 bytes held at offset 1048576 of block 0/0")),
        "no leak line for the run slot in {lines:#?}"
    );
    assert!(
        // 1000 bytes rounded up to the buffer's alignment (16).
        block_leak.contains("1008 bytes held") && block_leak.contains("memory type 2"),
        "{block_leak}"
    );
    let dedicated_leak = find("leaky render target");
    assert!(
        dedicated_leak.contains("3000 bytes") && dedicated_leak.contains("memory type 1"),
        "{dedicated_leak}"
    );
    let odd_leak = find("odd");
    assert!(
        odd_leak.contains(r#"leaked allocation "odd \"name\"\nforged line": "#),
        "{odd_leak}"
    );
    assert!(!lines.iter().any(|line| line.starts_with("forged line")));
    drop((kept, dedicated, odd, in_run));
}

/// Leaks a 1700-byte buffer named "leaky slot", a slot of a run after a 1 MiB one,
/// on the integrated layout (memory type 0), and drops its allocator.
fn allocator_leak_in_run() -> [vk_suballoc::Allocation; 2] {
    let (allocator, device) = allocator(FakeLayout::integrated());
    let first = allocator
        .allocate(&buffer(1 << 20, 256, Usage::DEVICE_LOCAL))
        .unwrap();
    let in_run = allocator
        .allocate(&buffer(1700, 4, Usage::DEVICE_LOCAL).name("leaky slot"))
        .unwrap();
    finish(allocator, &device);
    [first, in_run]
}

/// A leak in a custom pool names the pool: its first block is `block
/// 1/0`, as the default pool's first block of the type is, and without the
/// name the two leaks would read alike.
#[test]
fn leaks_in_custom_pools_name_their_pool() {
    install();
    let (allocator, device) = allocator(FakeLayout::discrete());
    let pool = allocator
        .create_pool(&vk_suballoc::PoolDesc::new(1).name("streamed textures"))
        .unwrap();
    let desc = vk_suballoc::AllocationDesc::new(Usage::DEVICE_LOCAL)
        .pool(pool)
        .name("leaky pooled texture");
    let request = vk_suballoc::Request::with_desc(
        super::requirements(1 << 20, 256),
        vk_suballoc::ResourceKind::Buffer,
        desc,
    );
    let pooled = allocator.allocate(&request).unwrap();
    finish(allocator, &device);
    let lines = LINES.lock().unwrap().clone();
    let line = lines
        .iter()
        .find(|line| line.contains("leaky pooled texture"))
        .unwrap_or_else(|| panic!("no leak line in {lines:#?}"));
    assert!(line.contains("streamed textures"), "{line}");
    drop(pooled);
}

/// A request for existing memory only that finds no room in one memory type
/// tries the next without a warning: its misses are expected (an
/// opportunistic request, possibly every frame), not a fallback.
#[test]
fn existing_memory_only_misses_are_not_logged() {
    install();
    // Mobile: TRANSIENT ranks the lazily allocated type (always dedicated)
    // first, then the device-local ones, none with a block yet.
    let (allocator, device) = allocator(FakeLayout::mobile());
    let request = vk_suballoc::Request::new(
        super::requirements(1 << 20, 256),
        Usage::TRANSIENT,
        vk_suballoc::ResourceKind::OptimalImage,
    )
    .existing_memory_only();
    assert_eq!(
        allocator.allocate(&request).unwrap_err(),
        vk_suballoc::Error::NoRoomInExistingMemory
    );
    let logged: Vec<String> = lines()
        .into_iter()
        .filter(|line| line.contains("no room in existing memory"))
        .collect();
    assert!(logged.is_empty(), "{logged:?}");
    finish(allocator, &device);
}

/// A memory type that fails a request the next one then takes is a
/// fallback worth a warning, which names the type and its error.
#[test]
fn a_fallback_to_the_next_memory_type_is_logged() {
    install();
    let (allocator, device) = allocator(FakeLayout::discrete());
    // A VRAM budget that neither a block nor the 4 MiB buffer fits, of a
    // size no other test's line names.
    let budget = (3 << 20) + 12_288;
    device.set_heap_budget(0, budget, 0);
    allocator.budgets(); // the allocator's checks read the new budget
    let placed = allocator
        .allocate(&buffer(4 << 20, 256, Usage::DEVICE_LOCAL).within_budget())
        .unwrap();
    assert_ne!(placed.memory_type(), 1);
    let end = format!(" > {budget}); trying the next one");
    let logged: Vec<String> = lines()
        .into_iter()
        .filter(|line| line.contains(&end))
        .collect();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(
        logged[0].starts_with("vk-suballoc: memory type 1 failed (heap 0 budget exceeded: "),
        "{logged:?}"
    );
    super::free(&allocator, placed);
    finish(allocator, &device);
}

/// A memory type that keeps failing (its heap at its budget, as an
/// engine's VRAM often is) warns once that it retries a smaller block and
/// once that it sends a request on to the next type, not at every request:
/// that was a warning per smaller block tried and one per request sent on,
/// a log on the allocation path for as long as the heap stayed full. Once
/// the type makes memory again, its next failures warn again.
#[test]
fn a_memory_type_that_keeps_failing_warns_once() {
    install();
    let (allocator, device) = allocator(FakeLayout::discrete());
    // A VRAM budget that no 8 MiB buffer fits, of a size no other test's
    // line names.
    let budget = (3 << 20) + 20_480;
    device.set_heap_budget(0, budget, 0);
    allocator.budgets();
    let next_type = format!(" > {budget}); trying the next one");
    let smaller = format!(" > {budget} in memory type 1, retrying with a ");
    let warnings = || {
        let lines = lines();
        let count = |text: &str| lines.iter().filter(|line| line.contains(text)).count();
        (count(&smaller), count(&next_type))
    };
    let spill = |count| -> Vec<_> {
        (0..count)
            .map(|_| {
                let spilled = allocator.allocate(&buffer(8 << 20, 256, Usage::DEVICE_LOCAL));
                let spilled = spilled.unwrap();
                assert_ne!(spilled.memory_type(), 1);
                spilled
            })
            .collect()
    };
    let mut kept = spill(10);
    assert_eq!(
        warnings(),
        (1, 1),
        "one of each for ten requests that fell back"
    );
    // Room again: the type makes memory, and fails anew once it is full.
    device.set_heap_budget(0, 1 << 30, 0);
    allocator.budgets();
    let placed = allocator.allocate(&buffer(200 << 20, 256, Usage::DEVICE_LOCAL));
    let placed = placed.unwrap();
    assert_eq!(placed.memory_type(), 1);
    kept.push(placed);
    device.set_heap_budget(0, budget, 0);
    allocator.budgets();
    kept.extend(spill(3));
    assert_eq!(
        warnings(),
        (2, 2),
        "new failures after the type made memory"
    );
    for allocation in kept {
        super::free(&allocator, allocation);
    }
    finish(allocator, &device);
}

/// An upload ring alive when the allocator is dropped is a leak, as a live
/// allocation is: its memory is freed with a line naming it. Before, its
/// chunks were freed silently. Its bytes are all its chunks', a growing
/// ring's outgrown chunk included. A ring destroyed before the drop is not
/// named.
#[test]
fn an_upload_ring_alive_at_drop_is_logged_as_a_leak() {
    install();
    let (allocator, device) = allocator(FakeLayout::discrete());
    let desc = |name| UploadRingDesc {
        size: 96 << 10,
        name: Some(name),
        ..Default::default()
    };
    allocator
        .create_upload_ring(&desc("leaky uniform ring"))
        .unwrap();
    // A growing ring outgrown by a 160 KiB request: a second chunk of that
    // size.
    let growing = UploadRingDesc {
        grow: true,
        ..desc("leaky growing ring")
    };
    let growing = allocator.create_upload_ring(&growing).unwrap();
    allocator.ring_allocate(growing, 160 << 10, 256).unwrap();
    let destroyed = allocator.create_upload_ring(&desc("tidy ring")).unwrap();
    allocator.destroy_upload_ring(destroyed).unwrap();
    finish(allocator, &device);
    let lines = lines();
    let leak = lines
        .iter()
        .find(|line| line.contains("leaky uniform ring"))
        .unwrap_or_else(|| panic!("no leak line for the ring in {lines:#?}"));
    assert!(
        leak.contains(r#"leaked upload ring "leaky uniform ring": 1 chunk(s), 98304 bytes"#),
        "{leak}"
    );
    let grown = r#"leaked upload ring "leaky growing ring": 2 chunk(s), 262144 bytes"#;
    assert!(
        lines.iter().any(|line| line.contains(grown)),
        "no line with {grown} in {lines:#?}"
    );
    assert!(!lines.iter().any(|line| line.contains("tidy ring")));
}

/// Frees still waiting for their frame at the drop (a sealed frame whose
/// fence never signalled, and the current frame) are carried out, as the
/// `Allocator` docs say, whatever their fences say: no leak line names
/// them, the buffer and image queued with them are destroyed once, an
/// alias queued alone too, and the device is left clean (`finish`).
#[test]
fn frees_waiting_for_their_frame_at_the_drop_are_no_leak() {
    use ash::vk::{self, Handle};

    install();
    let (allocator, device) = allocator(FakeLayout::discrete());
    let allocate = |name| {
        allocator
            .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL).name(name))
            .unwrap()
    };
    let resource = || device.create_resource();
    let (sealed, current) = (allocate("queued sealed"), allocate("queued current"));
    let (with_buffer, with_image) = (allocate("queued buffer"), allocate("queued image"));
    allocator.free_after_frame(sealed).unwrap();
    // SAFETY: the fake device's own handles, destroyed only by the allocator.
    unsafe {
        allocator
            .destroy_buffer_after_frame(vk::Buffer::from_raw(resource()), with_buffer)
            .unwrap();
    }
    // SAFETY: a fake fence, never signalled.
    unsafe { allocator.end_frame(device.create_fence()) }.unwrap();
    allocator.free_after_frame(current).unwrap();
    // SAFETY: as above.
    unsafe {
        allocator
            .destroy_image_after_frame(vk::Image::from_raw(resource()), with_image)
            .unwrap();
        allocator.destroy_alias_buffer_after_frame(vk::Buffer::from_raw(resource()));
    }
    assert_eq!(device.live_resources(), 3);
    let counters = device.counters();
    assert_eq!(counters.frees, 0, "{counters:?}");
    finish(allocator, &device);
    let lines = lines();
    assert!(
        !lines.iter().any(|line| line.contains("\"queued ")),
        "a queued free logged as a leak: {lines:#?}"
    );
}

/// A logger panicking on the line of an upload ring alive at the drop
/// stops that line, not the drop's release of what waits for its frame
/// and of the ring's chunks: every buffer is destroyed, no queued free is
/// logged as a leak, and the panic reaches the caller once all is
/// released, as a panic on a leaked allocation's line does (the
/// `Allocator`'s drop). Before, the unwind skipped every queued free and
/// chunk: the queued buffer and the chunk's buffer were never destroyed,
/// and their allocations were logged as leaks as the pools freed their
/// blocks.
#[test]
fn a_logger_panicking_on_a_leaked_ring_s_line_stops_no_release_at_the_drop() {
    use ash::vk::{self, Handle};

    install();
    let (allocator, device) = allocator(FakeLayout::discrete());
    let queued = allocator
        .allocate(&buffer(4096, 256, Usage::DEVICE_LOCAL).name("queued before a logger panic"))
        .unwrap();
    // SAFETY: the fake device's own handle, destroyed only by the allocator.
    unsafe {
        allocator
            .destroy_buffer_after_frame(vk::Buffer::from_raw(device.create_resource()), queued)
            .unwrap();
    }
    let desc = UploadRingDesc {
        size: 64 << 10,
        name: Some("ring leaked before a logger panic"),
        ..Default::default()
    };
    allocator.create_upload_ring(&desc).unwrap();
    assert_eq!(device.live_resources(), 2);
    panic_on_line_with("leaked upload ring");
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(allocator)));
    assert!(dropped.is_err(), "the logger's panic reaches the caller");
    device.assert_clean();
    let lines = lines();
    assert!(
        !lines
            .iter()
            .any(|line| line.contains("before a logger panic")
                && !line.contains("leaked upload ring")),
        "a queued free or a ring's chunk logged as a leak: {lines:#?}"
    );
}

/// A logger panicking on the line of one leaked allocation at the drop
/// stops that line, not the lines of the pool's other leaks: each is
/// logged, as a dedicated allocation's and an upload ring's are, and the
/// panic reaches the caller once every block is freed.
#[test]
fn a_logger_panicking_on_a_leak_s_line_stops_no_other_leak_line() {
    install();
    record_thread_lines();
    let (allocator, device) = allocator(FakeLayout::discrete());
    // Two allocations in one block, logged in address order.
    let first = allocator
        .allocate(&buffer(64 << 10, 256, Usage::DEVICE_LOCAL).name("first leak, a logger panic"))
        .unwrap();
    let second = allocator
        .allocate(&buffer(64 << 10, 256, Usage::DEVICE_LOCAL).name("second leak after it"))
        .unwrap();
    assert_eq!(first.memory(), second.memory());
    assert!(first.offset() < second.offset());
    panic_on_line_with("first leak, a logger panic");
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(allocator)));
    disarm_panic_on_line();
    assert!(dropped.is_err(), "the logger's panic reaches the caller");
    device.assert_clean();
    let lines = take_thread_warnings();
    for name in ["first leak, a logger panic", "second leak after it"] {
        assert!(
            lines
                .iter()
                .any(|line| line.contains("leaked allocation") && line.contains(name)),
            "no leak line for {name:?} in {lines:#?}"
        );
    }
    drop((first, second));
}

/// Whether this test binary has line tables (`cargo test`'s default
/// profile; `cargo test --release` has none): without them a backtrace
/// shows no inlined function, and the closures that allocate in these
/// tests are inlined into the iterator calling them in release builds, so
/// no frame names them (`Config::allocation_backtraces` says so).
fn has_line_tables() -> bool {
    std::backtrace::Backtrace::force_capture()
        .to_string()
        .contains("leak_log.rs")
}
