//! The global allocator of the crate's unit tests: the system allocator,
//! except that it refuses any single allocation above [`CAP`] bytes.
//!
//! Tests of host-memory exhaustion (an offset allocator asked for billions of
//! slots) then fail the same way on every machine. Without the cap, whether
//! the system allocator refuses a 128 GiB request depends on the machine's
//! memory and overcommit policy, and one that grants it would then be
//! written in full.
//!
//! It also counts, per thread, the bytes allocated less the bytes freed
//! ([`thread_net_bytes`]), for tests that check a steady workload stops
//! taking host memory (gpu-alloc's `BuddyAllocator::pairs` grew by a
//! megabyte every few seconds under the same allocations and frees each
//! frame, zakarumych/gpu-alloc issue #55). Only where the target's thread
//! locals are native (Linux, macOS, Windows with MSVC): elsewhere std may
//! keep them behind an OS key and allocate on a thread's first access,
//! which from inside the allocator would recurse.

use std::alloc::{GlobalAlloc, Layout, System};

/// The per-thread count, on Linux, macOS and Windows (MSVC), whose thread
/// locals need no allocation (`cfg(thread_counts)`, which `build.rs` sets). The tests that read it are left out
/// elsewhere (`allocator::host_memory_tests`, under the same `cfg`).
#[cfg(thread_counts)]
mod thread_bytes {
    use std::cell::Cell;

    thread_local! {
        /// Bytes this thread allocated less the bytes it freed. A `const`
        /// initialiser and no destructor: a native thread local, read
        /// without allocating.
        static NET_BYTES: Cell<i64> = const { Cell::new(0) };
        /// Allocations this thread made (`alloc`, `alloc_zeroed` and
        /// `realloc` calls granted), freed since or not.
        static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    }

    /// Bytes the calling thread allocated less those it freed, since it
    /// started: the host memory it holds, when no other thread frees what
    /// it allocated or the reverse.
    #[cfg_attr(not(feature = "fake-device"), allow(dead_code))]
    pub(crate) fn thread_net_bytes() -> i64 {
        NET_BYTES.with(Cell::get)
    }

    /// Allocations the calling thread made since it started (`alloc`,
    /// `alloc_zeroed` and `realloc` calls granted): for tests of code that
    /// promises not to touch the heap, which a temporary freed again would
    /// break without changing [`thread_net_bytes`].
    pub(crate) fn thread_allocations() -> u64 {
        ALLOCATIONS.with(Cell::get)
    }

    /// Adds `bytes` to the calling thread's count (nothing while the
    /// thread's locals are being torn down).
    pub(super) fn count(bytes: i64) {
        let _ = NET_BYTES.try_with(|net| net.set(net.get() + bytes));
    }

    /// Counts one allocation of the calling thread (nothing while the
    /// thread's locals are being torn down).
    pub(super) fn count_allocation() {
        let _ = ALLOCATIONS.try_with(|made| made.set(made.get() + 1));
    }
}

#[cfg(thread_counts)]
pub(crate) use thread_bytes::thread_allocations;
#[cfg(thread_counts)]
#[cfg_attr(not(feature = "fake-device"), allow(unused_imports))]
pub(crate) use thread_bytes::thread_net_bytes;

/// Counts one allocation of the calling thread where [`thread_net_bytes`]
/// counts bytes.
fn count_allocation() {
    #[cfg(thread_counts)]
    thread_bytes::count_allocation();
}

/// Counts `bytes` for the calling thread where [`thread_net_bytes`] counts.
fn count(bytes: i64) {
    #[cfg(thread_counts)]
    thread_bytes::count(bytes);
    #[cfg(not(thread_counts))]
    let _ = bytes;
}

/// The largest allocation granted: far above anything a test needs. On a
/// 32-bit target, half the address space (`16 << 30` there is 0 in `usize`:
/// the bits are shifted out, and every allocation was refused).
pub(crate) const CAP: usize = if usize::BITS > 32 {
    (16u64 << 30) as usize
} else {
    usize::MAX / 2
};

struct Capped;

// SAFETY: every call is forwarded to `System` unchanged, except that
// allocations above `CAP` return null, which `GlobalAlloc` allows to signal
// failure; `dealloc` and `realloc` only ever see `System`'s pointers.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > CAP {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract for `alloc`, passed on.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            count(layout.size() as i64);
            count_allocation();
        }
        pointer
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > CAP {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        let pointer = unsafe { System.alloc_zeroed(layout) };
        if !pointer.is_null() {
            count(layout.size() as i64);
            count_allocation();
        }
        pointer
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with `layout` (the caller's
        // contract for `dealloc`).
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as i64));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > CAP {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract for `realloc`, passed on; `ptr` came
        // from `System`.
        let pointer = unsafe { System.realloc(ptr, layout, new_size) };
        if !pointer.is_null() {
            count(new_size as i64 - layout.size() as i64);
            count_allocation();
        }
        pointer
    }
}

#[global_allocator]
static CAPPED: Capped = Capped;
