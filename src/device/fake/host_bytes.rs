//! [`HostBytes`]: the host memory behind a host-visible fake memory object.
//!
//! The allocator hands out slices of these bytes (`mapped_slice_mut`), made
//! from the pointer `vkMapMemory` returned, while the fake device goes on
//! touching other bytes of the same object: flushes and invalidates of the
//! neighbours, and the test's reads and writes that stand in for the GPU.
//! So the buffer is reached only through its raw pointer, one range at a
//! time. A reference to the whole buffer (`&mut vec[..]`, or `vec[range]`,
//! which makes one first) would end every slice made from an earlier
//! pointer, in use or not (Stacked Borrows: Miri reports the next use of
//! such a slice as undefined behaviour).

use std::ops::Range;
use std::ptr::NonNull;

/// Zeroed host bytes of a memory object, aligned as `vkMapMemory`'s
/// pointers are.
pub(super) struct HostBytes {
    /// Allocated once, with `alignment` bytes of slack; never borrowed as a
    /// whole (only `as_ptr` / `as_mut_ptr`, which make no reference).
    buffer: Vec<u8>,
    /// Where the object's byte 0 lies in `buffer`: an aligned address.
    base: usize,
    /// The object's size.
    size: usize,
}

impl std::fmt::Debug for HostBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the bytes: reading them all would end the slices handed out.
        f.debug_struct("HostBytes")
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// `len` zeroed bytes, allocated lazily by the OS as `vec![0; len]`'s
/// are, or `None` when the host cannot allocate them: past `isize::MAX`
/// bytes, or more than the OS gives, where a driver returns
/// `VK_ERROR_OUT_OF_HOST_MEMORY`. `vec!` panicked there (capacity
/// overflow) or aborted the process (allocation failure).
pub(super) fn zeroed_bytes(len: usize) -> Option<Vec<u8>> {
    if len == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(len).ok()?;
    // SAFETY: the layout's size, `len`, is not zero.
    let pointer = unsafe { std::alloc::alloc_zeroed(layout) };
    if pointer.is_null() {
        return None;
    }
    // SAFETY: allocated just now by the global allocator with the layout
    // of `len` bytes (`u8`'s alignment, capacity `len`), all of them
    // initialised (zeroed), and owned by nothing else.
    Some(unsafe { Vec::from_raw_parts(pointer, len, len) })
}

impl HostBytes {
    /// `size` zeroed bytes (allocated lazily by the OS) whose first byte is
    /// aligned to `alignment`; `None` when the host cannot allocate them
    /// ([`zeroed_bytes`]).
    pub(super) fn new(size: usize, alignment: usize) -> Option<Self> {
        let buffer = zeroed_bytes(size.checked_add(alignment)?)?;
        let base = buffer.as_ptr().align_offset(alignment);
        Some(Self { buffer, base, size })
    }

    /// The address of byte `offset` (at most the size), for `vkMapMemory`.
    pub(super) fn pointer(&mut self, offset: usize) -> Option<NonNull<u8>> {
        if offset > self.size {
            return None;
        }
        NonNull::new(self.buffer.as_mut_ptr().wrapping_add(self.base + offset))
    }

    /// Bytes `range` of the object, to read.
    ///
    /// # Panics
    /// When `range` is not within the object (callers check it first).
    pub(super) fn range(&self, range: Range<usize>) -> &[u8] {
        assert!(range.start <= range.end && range.end <= self.size);
        // SAFETY: `base + size` bytes plus slack were allocated, so the range
        // is inside `buffer`; the pointer comes from `as_ptr`, so no
        // reference covers bytes outside `range`.
        unsafe {
            std::slice::from_raw_parts(
                self.buffer.as_ptr().add(self.base + range.start),
                range.len(),
            )
        }
    }

    /// Bytes `range` of the object, to write.
    ///
    /// # Panics
    /// As [`range`](Self::range).
    pub(super) fn range_mut(&mut self, range: Range<usize>) -> &mut [u8] {
        assert!(range.start <= range.end && range.end <= self.size);
        // SAFETY: as in `range`, from `as_mut_ptr`; `&mut self` makes this the
        // device's only slice of the buffer.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.buffer.as_mut_ptr().add(self.base + range.start),
                range.len(),
            )
        }
    }

    /// The object's size in bytes.
    pub(super) fn size(&self) -> usize {
        self.size
    }

    /// Fills every byte with `poison`, as the object enters the quarantine
    /// (`state/quarantine.rs`). Touches every page (the OS allocated them
    /// lazily).
    pub(super) fn poison(&mut self, poison: u8) {
        self.range_mut(0..self.size).fill(poison);
    }

    /// The first byte that is not `poison` any more: a write after the
    /// object was freed.
    pub(super) fn first_changed(&self, poison: u8) -> Option<usize> {
        // Page by page with `==` (a `memcmp`, fast in unoptimised test
        // builds too), then byte by byte only in the page that differs.
        const PAGE: usize = 4096;
        let pattern = [poison; PAGE];
        let bytes = self.range(0..self.size);
        bytes
            .chunks(PAGE)
            .position(|page| page != &pattern[..page.len()])
            .and_then(|page| {
                let start = page * PAGE;
                bytes[start..]
                    .iter()
                    .position(|&b| b != poison)
                    .map(|i| start + i)
            })
    }
}
