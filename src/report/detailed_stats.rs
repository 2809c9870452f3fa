//! [`DetailedStats`]: VMA's `VmaDetailedStatistics`, the figures of each
//! `Stats` object of a VMA JSON dump.

/// Blocks, allocations and free ranges of a set of memory, as VMA's
/// `VmaDetailedStatistics` counts them: a dedicated allocation is one block
/// and one allocation; free ranges are those inside blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DetailedStats {
    /// `VkDeviceMemory` objects: blocks and dedicated allocations.
    pub block_count: u64,
    /// Bytes of those objects.
    pub block_bytes: u64,
    /// Live allocations.
    pub allocation_count: u64,
    /// Bytes of live allocations.
    pub allocation_bytes: u64,
    /// Free ranges between (and around) allocations inside blocks.
    pub unused_range_count: u64,
    /// Smallest allocation; `u64::MAX` when there is none (VMA's `VK_WHOLE_SIZE`).
    pub allocation_size_min: u64,
    /// Largest allocation; 0 when there is none.
    pub allocation_size_max: u64,
    /// Smallest free range; `u64::MAX` when there is none.
    pub unused_range_size_min: u64,
    /// Largest free range; 0 when there is none.
    pub unused_range_size_max: u64,
}

impl Default for DetailedStats {
    fn default() -> Self {
        Self {
            block_count: 0,
            block_bytes: 0,
            allocation_count: 0,
            allocation_bytes: 0,
            unused_range_count: 0,
            allocation_size_min: u64::MAX,
            allocation_size_max: 0,
            unused_range_size_min: u64::MAX,
            unused_range_size_max: 0,
        }
    }
}

impl DetailedStats {
    pub(crate) fn add_block(&mut self, size: u64) {
        self.block_count = self.block_count.saturating_add(1);
        self.block_bytes = self.block_bytes.saturating_add(size);
    }

    pub(crate) fn add_allocation(&mut self, size: u64) {
        self.allocation_count = self.allocation_count.saturating_add(1);
        self.allocation_bytes = self.allocation_bytes.saturating_add(size);
        self.allocation_size_min = self.allocation_size_min.min(size);
        self.allocation_size_max = self.allocation_size_max.max(size);
    }

    pub(crate) fn add_unused_range(&mut self, size: u64) {
        self.unused_range_count = self.unused_range_count.saturating_add(1);
        self.unused_range_size_min = self.unused_range_size_min.min(size);
        self.unused_range_size_max = self.unused_range_size_max.max(size);
    }

    /// The figures of both sets together. Sums saturate at `u64::MAX`
    /// (figures of a hand-built [`MemoryMap`](super::MemoryMap) may be
    /// anything).
    #[must_use]
    pub fn merged(self, other: Self) -> Self {
        Self {
            block_count: self.block_count.saturating_add(other.block_count),
            block_bytes: self.block_bytes.saturating_add(other.block_bytes),
            allocation_count: self.allocation_count.saturating_add(other.allocation_count),
            allocation_bytes: self.allocation_bytes.saturating_add(other.allocation_bytes),
            unused_range_count: self
                .unused_range_count
                .saturating_add(other.unused_range_count),
            allocation_size_min: self.allocation_size_min.min(other.allocation_size_min),
            allocation_size_max: self.allocation_size_max.max(other.allocation_size_max),
            unused_range_size_min: self.unused_range_size_min.min(other.unused_range_size_min),
            unused_range_size_max: self.unused_range_size_max.max(other.unused_range_size_max),
        }
    }

    /// Bytes of blocks not in any allocation.
    pub fn unused_bytes(&self) -> u64 {
        self.block_bytes.saturating_sub(self.allocation_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_like_vma() {
        let mut a = DetailedStats::default();
        a.add_block(1024);
        a.add_allocation(256);
        a.add_allocation(512);
        a.add_unused_range(256);
        let mut b = DetailedStats::default();
        b.add_block(4096);
        b.add_allocation(4096);
        let total = a.merged(b);
        assert_eq!(total.block_count, 2);
        assert_eq!(total.block_bytes, 5120);
        assert_eq!(total.allocation_count, 3);
        assert_eq!(total.allocation_bytes, 4864);
        assert_eq!(total.unused_bytes(), 256);
        assert_eq!(
            (total.allocation_size_min, total.allocation_size_max),
            (256, 4096)
        );
        assert_eq!(total.unused_range_count, 1);
        assert_eq!(
            (total.unused_range_size_min, total.unused_range_size_max),
            (256, 256)
        );
        assert_eq!(
            DetailedStats::default().merged(DetailedStats::default()),
            DetailedStats::default()
        );
    }
}
