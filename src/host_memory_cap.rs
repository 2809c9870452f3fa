//! The global allocator of the crate's unit tests: the system allocator,
//! except that it refuses any single allocation above [`CAP`] bytes.
//!
//! Tests of host-memory exhaustion (an offset allocator asked for billions of
//! slots) then fail the same way on every machine. Without the cap, whether
//! the system allocator refuses a 128 GiB request depends on the machine's
//! memory and overcommit policy, and one that grants it would then be
//! written in full.

use std::alloc::{GlobalAlloc, Layout, System};

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
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > CAP {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with `layout` (the caller's
        // contract for `dealloc`).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > CAP {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract for `realloc`, passed on; `ptr` came
        // from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static CAPPED: Capped = Capped;
