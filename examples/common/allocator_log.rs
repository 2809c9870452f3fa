//! A logger both examples install first, so that what the allocator logs
//! through the `log` crate is seen, and its warnings and errors fail the
//! run: with no logger those lines go nowhere, and a leak the allocator
//! reports at drop (`log::warn!`, "leaked allocation …") would pass
//! unnoticed.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Warnings and errors logged by vk-suballoc.
static ALLOCATOR_WARNINGS: AtomicUsize = AtomicUsize::new(0);

/// Prints warnings and errors (of any crate) to stderr, and counts
/// vk-suballoc's.
struct WarningCounter;

impl log::Log for WarningCounter {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        eprintln!("{} {}: {}", record.level(), record.target(), record.args());
        // Only the allocator's lines fail the run: the window system's
        // crates may warn about the display, which is not what the
        // examples check.
        if record.target().starts_with("vk_suballoc") {
            ALLOCATOR_WARNINGS.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn flush(&self) {}
}

/// Installs the logger (once, first in `main`).
pub fn install() {
    static LOGGER: WarningCounter = WarningCounter;
    log::set_logger(&LOGGER).expect("no other logger is installed");
    log::set_max_level(log::LevelFilter::Warn);
}

/// How many warnings and errors vk-suballoc logged: leaks at the
/// allocator's drop, retries and fallbacks, damaged debug margins.
pub fn allocator_warnings() -> usize {
    ALLOCATOR_WARNINGS.load(Ordering::Relaxed)
}
