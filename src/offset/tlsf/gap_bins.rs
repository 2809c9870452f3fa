//! The bins of an [`OffsetAllocator`]'s free gaps: the search for a gap
//! that holds a request (the O(1) good-fit lookup through the two-level
//! bitmask, then the cold walk of the boundary bins that keeps a failure
//! from being false), and the filing of gaps in their bins' free lists and
//! their removal. Apart from `tlsf.rs`, which holds the allocator's state
//! and the operations that change it, because this is the size-class index
//! over the gaps, which those operations only keep up to date.

use super::{OffsetAllocator, MAX_CAPACITY};
use crate::offset::node::{Node, NIL};
use crate::offset::size_class::{bin_down, bin_up};

/// The most gaps a [`Strategy::MinMemory`](crate::offset::Strategy::MinMemory)
/// placement looks at before the good fit: a bound that keeps it O(1).
/// On the peer bench's traces 8 kept all of an unbounded walk's saving
/// of memory.
pub(crate) const TIGHT_FIT_LOOKS: u32 = 8;

impl<const M: u32> OffsetAllocator<M> {
    // ----- search -----

    /// Finds a gap that holds `size` bytes at alignment `align`: returns the
    /// gap's owner node and the aligned offset.
    ///
    /// Always inlined, as [`place`](Self::place): with `#[inline]` the
    /// packed path's speed hung on how rustc split the crate into codegen
    /// units; when `MinMemory`'s path came with its own call of `place`,
    /// LLVM stopped inlining both into `allocate_packed` (callgrind, the
    /// pools on the peer traces: about 19 more instructions per call).
    #[inline(always)]
    pub(super) fn find_fit(&mut self, size: u64, align: u64) -> Option<(u32, u64)> {
        // 1. Good fit: the first non-empty bin whose every gap holds `size`.
        //    With `align == 1` its head always fits.
        if let Some(bin) = self.mask.first_at_or_above(bin_up::<M>(size)) {
            let head = self.bin_heads[bin as usize];
            if let Some(offset) = self.fit_in_gap(head, size, align) {
                return Some((head, offset));
            }
            // 2. Alignment shifted it out: gaps of at least `size + align - 1`
            //    hold the request wherever they start.
            let worst_case = size + (align - 1);
            if worst_case <= MAX_CAPACITY {
                if let Some(bin) = self.mask.first_at_or_above(bin_up::<M>(worst_case)) {
                    let head = self.bin_heads[bin as usize];
                    if let Some(offset) = self.fit_in_gap(head, size, align) {
                        return Some((head, offset));
                    }
                }
            }
        }
        self.find_fit_exhaustive(size, align)
    }

    /// The first look of [`Strategy::MinMemory`], before
    /// [`find_fit`](Self::find_fit): up to [`TIGHT_FIT_LOOKS`] gaps of the
    /// bin `size` rounds down to, the one bin whose gaps may hold `size`
    /// bytes with less than a bin's width over, head first; returns the
    /// first that holds the aligned request. A walk that reaches the bin's
    /// end without a fit makes the bin's bound exact, as the boundary walk
    /// does. A size on a bin's lower bound at alignment 1 is left to
    /// `find_fit`: every gap of its own bin holds it, and `find_fit` takes
    /// that bin's head. At a larger alignment its own bin's gaps may not
    /// hold it (a gap's start may need aligning), and `find_fit` looks at
    /// the head alone before a bin past `size + align - 1`, so the walk
    /// looks there.
    ///
    /// [`Strategy::MinMemory`]: crate::offset::Strategy::MinMemory
    #[inline]
    pub(super) fn find_tight_gap(&mut self, size: u64, align: u64) -> Option<(u32, u64)> {
        let bin = bin_down::<M>(size);
        // An empty bin's bound is 0, below every size.
        if (align == 1 && bin == bin_up::<M>(size)) || self.bin_max_hint[bin as usize] < size {
            return None;
        }
        let mut node = self.bin_heads[bin as usize];
        let mut largest = 0;
        for _ in 0..TIGHT_FIT_LOOKS {
            if node == NIL {
                self.bin_max_hint[bin as usize] = largest;
                return None;
            }
            if let Some(offset) = self.fit_in_gap(node, size, align) {
                return Some((node, offset));
            }
            let entry = &self.nodes[node as usize];
            largest = largest.max(entry.gap());
            node = entry.bin_next;
        }
        None
    }

    /// The cold path of [`find_fit`](Self::find_fit): every gap of a bin that
    /// may hold `size` bytes is tried, in bins from small to large, skipping
    /// bins whose bound shows they cannot help.
    ///
    /// Exact: a gap of at least `size` bytes is filed under a bin at or above
    /// `bin_down(size)`, and a bin is skipped only when its upper bound says
    /// that all its gaps are smaller than `size`. When the guaranteed search
    /// failed, every bin at or above `bin_up(size + align - 1)` is empty (its
    /// head would have fitted), so only the boundary bins below it are ever
    /// walked.
    #[cold]
    fn find_fit_exhaustive(&mut self, size: u64, align: u64) -> Option<(u32, u64)> {
        self.search.boundary_searches += 1;
        let mut next_bin = Some(bin_down::<M>(size));
        while let Some(bin) = next_bin.and_then(|b| self.mask.first_at_or_above(b)) {
            next_bin = bin.checked_add(1);
            if self.bin_max_hint[bin as usize] < size {
                continue;
            }
            let mut largest = 0;
            let mut node = self.bin_heads[bin as usize];
            while node != NIL {
                self.search.gaps_visited += 1;
                if let Some(offset) = self.fit_in_gap(node, size, align) {
                    return Some((node, offset));
                }
                let entry = &self.nodes[node as usize];
                largest = largest.max(entry.gap());
                node = entry.bin_next;
            }
            // The whole bin was seen: its bound is now exact.
            self.bin_max_hint[bin as usize] = largest;
        }
        None
    }

    /// The aligned offset at which `size` bytes fit in `node`'s gap, if they do.
    #[inline]
    pub(super) fn fit_in_gap(&self, node: u32, size: u64, align: u64) -> Option<u64> {
        let entry = &self.nodes[node as usize];
        // No overflow: ends are below 2^48 and `align` at most 2^63.
        let aligned = (entry.end() + (align - 1)) & !(align - 1);
        (aligned + size <= entry.gap_end()).then_some(aligned)
    }

    // ----- bins -----

    /// Files `node`'s gap of `gap > 0` bytes under its bin.
    #[inline(always)]
    pub(super) fn insert_gap(&mut self, node: u32, gap: u64) {
        let bin = bin_down::<M>(gap) as usize;
        let head = self.bin_heads[bin];
        let entry = &mut self.nodes[node as usize];
        entry.bin_prev = NIL;
        entry.bin_next = head;
        if head == NIL {
            self.mask.set(bin as u32);
        } else {
            self.nodes[head as usize].bin_prev = node;
        }
        self.bin_heads[bin] = node;
        let hint = &mut self.bin_max_hint[bin];
        *hint = (*hint).max(gap);
        self.free_ranges += 1;
    }

    /// Takes `node`'s gap of `gap > 0` bytes out of its bin.
    #[inline(always)]
    pub(super) fn remove_gap(&mut self, node: u32, gap: u64) {
        let Node {
            bin_prev, bin_next, ..
        } = self.nodes[node as usize];
        if bin_prev == NIL {
            // The head of its bin: only then is the bin itself needed.
            let bin = bin_down::<M>(gap) as usize;
            // A `gap` other than the one it was filed with would unlink
            // another bin's head and leave this node listed.
            debug_assert_eq!(self.bin_heads[bin], node, "gap {gap} filed elsewhere");
            self.bin_heads[bin] = bin_next;
            if bin_next == NIL {
                self.mask.clear(bin as u32);
                self.bin_max_hint[bin] = 0;
            }
        } else {
            self.nodes[bin_prev as usize].bin_next = bin_next;
        }
        if bin_next != NIL {
            self.nodes[bin_next as usize].bin_prev = bin_prev;
        }
        self.free_ranges -= 1;
    }
}
