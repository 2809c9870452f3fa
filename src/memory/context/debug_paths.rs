//! The context's debug paths: which memory types take them (margins'
//! corruption patterns, debug fills, backtraces, the allocation log), and
//! the count of corruption they find.

use std::sync::atomic::Ordering;

use super::MemoryContext;

impl<D> MemoryContext<D> {
    /// Whether allocations and frees in `memory_type` take the debug
    /// paths: margins' patterns, debug fills, backtraces or the
    /// allocation log (the field `debug_types`).
    #[inline]
    pub(crate) fn is_debug_type(&self, memory_type: u32) -> bool {
        // Zero first: the only test the default path pays. The type's bit
        // apart, cold: inline, LLVM shifted the mask before that test, on
        // every free (twice: `Allocator::free_mut`, `TypePool::free`).
        self.debug_types != 0 && self.has_debug_bit(memory_type)
    }

    /// Whether `memory_type`'s bit is set in `debug_types`
    /// ([`is_debug_type`](Self::is_debug_type), once it is not 0).
    #[cold]
    #[inline(never)]
    fn has_debug_bit(&self, memory_type: u32) -> bool {
        self.debug_types & 1u32.wrapping_shl(memory_type) != 0
    }

    /// The memory types whose allocations and frees take the debug paths,
    /// one bit per type: those with margins' patterns or debug fills
    /// ([`checked_types`](Self::checked_types)), every type when
    /// `Config::allocation_backtraces` or `Config::log_allocations` is
    /// on, and the host-visible types with `Config::strict_host_access`
    /// (whose allocations' mappings the debug path withholds); 0 otherwise.
    #[inline]
    pub(crate) fn debug_types(&self) -> u32 {
        self.debug_types
    }

    /// The memory types with margins' patterns or debug fills, one bit
    /// per type: those `check_corruption` checks; 0 unless
    /// `Config::detect_corruption` (with a margin) or `Config::debug_fill`
    /// is on.
    pub(crate) fn checked_types(&self) -> u32 {
        self.corruption_types | self.fill_types
    }

    /// Whether each allocation records the backtrace of its call
    /// (`Config::allocation_backtraces`), for leak reports.
    pub(crate) fn records_backtraces(&self) -> bool {
        self.config.allocation_backtraces
    }

    /// Whether allocations are mapped only where their request asks for
    /// host access (`Config::strict_host_access`).
    pub(crate) fn strict_host_access(&self) -> bool {
        self.config.strict_host_access
    }

    /// Whether every allocation and free is logged
    /// (`Config::log_allocations`).
    pub(crate) fn logs_allocations(&self) -> bool {
        self.config.log_allocations
    }

    /// Whether allocations in blocks of `memory_type` get the corruption
    /// pattern in their margins (the field `corruption_types`). Not on
    /// the default path: [`is_debug_type`](Self::is_debug_type) is.
    pub(crate) fn detects_corruption(&self, memory_type: u32) -> bool {
        self.corruption_types & 1u32.wrapping_shl(memory_type) != 0
    }

    /// Whether `memory_type` is filled on allocation and free (the field
    /// `fill_types`). Not on the default path either.
    pub(crate) fn fills(&self, memory_type: u32) -> bool {
        self.fill_types & 1u32.wrapping_shl(memory_type) != 0
    }

    /// The memory types filled on allocation and free, one bit per type.
    pub(crate) fn fill_types(&self) -> u32 {
        self.fill_types
    }

    /// Counts a damaged margin found when its allocation was freed, or
    /// memory written after its free found when it was allocated again or
    /// when its empty block was released.
    pub(crate) fn count_corruption(&self) {
        self.corruptions.fetch_add(1, Ordering::Relaxed);
    }

    /// Damaged margins and writes after free found so far.
    pub(crate) fn corruptions(&self) -> u64 {
        self.corruptions.load(Ordering::Relaxed)
    }
}
