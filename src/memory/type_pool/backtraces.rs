//! Where each live allocation was made (`Config::allocation_backtraces`):
//! a backtrace recorded as the allocation is placed, dropped as it is
//! freed, and printed under the allocation's line when the pool reports it
//! as a leak (`empty_blocks.rs`). Apart from the leak report because this
//! is the table's upkeep, on the debug paths of every allocation and free
//! (`debug_fill.rs`'s `on_placed`, `free.rs`'s `free_debug`).

use std::backtrace::Backtrace;
use std::collections::HashMap;
use std::sync::Arc;

use super::{Location, TypePool};
use crate::memory::context::MemoryContext;

/// The backtrace of each live allocation's call, by its location; shared
/// with the destination of a defragmentation move while both live.
pub(crate) type BacktraceTable = HashMap<Location, Arc<Backtrace>>;

/// A backtrace of the calling thread, when `context` records them
/// (`Config::allocation_backtraces`); `None` otherwise. Taken before the
/// allocation's pool is locked where the caller can: the capture unwinds
/// the stack (a few microseconds) under std's process-wide backtrace lock,
/// and symbols are resolved only when a leak is printed.
pub(crate) fn capture<D>(context: &MemoryContext<D>) -> Option<Arc<Backtrace>> {
    context
        .records_backtraces()
        .then(|| Arc::new(Backtrace::force_capture()))
}

impl<M> TypePool<M> {
    /// Records `backtrace`, the call that placed the allocation at
    /// `location` ([`capture`]), when there is one.
    ///
    /// # Time complexity
    /// An insertion into a hash table.
    pub(super) fn record_backtrace(
        &mut self,
        location: Location,
        backtrace: Option<Arc<Backtrace>>,
    ) {
        if let Some(backtrace) = backtrace {
            self.backtraces.insert(location, backtrace);
        }
    }

    /// The backtrace recorded for the live allocation at `location`, if
    /// any: a defragmentation move's destination takes its source's, so
    /// that a moved allocation's leak says where it was first made.
    pub(crate) fn backtrace_of(&self, location: Location) -> Option<Arc<Backtrace>> {
        self.backtraces.get(&location).cloned()
    }

    /// Drops the backtrace of the allocation at `location`, being freed.
    pub(super) fn forget_backtrace(&mut self, location: Location) {
        if !self.backtraces.is_empty() {
            self.backtraces.remove(&location);
        }
    }

    /// The end of a leak line about the allocation at `location`: where it
    /// was made, on the lines below, when that was recorded; else nothing.
    pub(super) fn made_at(&self, location: Location) -> String {
        self.backtraces
            .get(&location)
            .map_or_else(String::new, |backtrace| {
                format!(", allocated at:\n{}", callers(&backtrace.to_string()))
            })
    }

    /// Drops every backtrace: the pool's allocations are all gone.
    pub(super) fn forget_backtraces(&mut self) {
        // Each one recorded is a live allocation's: frees drop theirs.
        debug_assert!(
            self.backtraces.keys().all(|&at| self.name_of(at).is_ok()),
            "a freed allocation's backtrace was kept"
        );
        self.backtraces.clear();
    }
}

/// A printed backtrace (`Backtrace`'s `Display`: each frame a line
/// `  N: symbol`, then its `at file:line` lines) from the first frame
/// after the last one of this crate: the allocator's own frames, the same
/// for every allocation, are left out, and a first line says how many.
/// The whole text when no frame is this crate's (no symbols).
fn callers(printed: &str) -> String {
    let mut frames: Vec<&str> = Vec::new();
    let mut start = 0;
    for (at, line) in line_starts(printed) {
        let is_frame = line
            .trim_start()
            .split_once(": ")
            .is_some_and(|(number, _)| {
                !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit())
            });
        if is_frame && at > start {
            frames.push(&printed[start..at]);
            start = at;
        }
    }
    frames.push(&printed[start..]);
    let ours = |frame: &&str| {
        let symbol = frame
            .trim_start()
            .split_once(": ")
            .map_or("", |(_, symbol)| symbol);
        symbol.starts_with("vk_suballoc::") || symbol.starts_with("<vk_suballoc::")
    };
    match frames.iter().rposition(ours) {
        Some(last) => format!(
            "  ({} frames of the allocator's call left out)\n{}",
            last + 1,
            frames[last + 1..].concat()
        ),
        None => printed.to_owned(),
    }
}

/// Each line of `text` with the byte offset it starts at.
fn line_starts(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.split_inclusive('\n').scan(0, |at, line| {
        let start = *at;
        *at += line.len();
        Some((start, line))
    })
}

#[cfg(test)]
mod tests {
    use super::callers;

    #[test]
    fn the_allocators_own_frames_are_left_out() {
        let printed = "   0: vk_suballoc::memory::type_pool::backtraces::record\n             at ./src/a.rs:1:1\n   1: core::ops::function::FnOnce::call_once\n   2: <vk_suballoc::allocator::place::Locked<M> as Foo>::with_pool\n             at ./src/b.rs:2:2\n   3: vk_suballoc::allocator::Allocator<D,M>::allocate\n   4: engine::load_mesh\n             at ./src/mesh.rs:10:5\n   5: main\n";
        assert_eq!(
            callers(printed),
            "  (4 frames of the allocator's call left out)\n   4: engine::load_mesh\n             at ./src/mesh.rs:10:5\n   5: main\n"
        );
    }

    #[test]
    fn without_symbols_every_frame_stays() {
        let printed = "   0: <unknown>\n   1: <unknown>\n";
        assert_eq!(callers(printed), printed);
        assert_eq!(callers(""), "");
    }
}
