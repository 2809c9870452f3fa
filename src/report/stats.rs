//! [`Stats`]: figures per memory type and heap.

use crate::device::HeapBudget;
use crate::memory::type_pool::PoolCounters;

/// Figures of one memory type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TypeStats {
    /// Memory type index.
    pub memory_type: u32,
    /// Its heap.
    pub heap: u32,
    /// Blocks (shared `VkDeviceMemory` objects).
    pub blocks: u64,
    /// Bytes of all blocks.
    pub block_bytes: u64,
    /// Blocks without any allocation, kept for reuse: a default pool's
    /// largest, and others while
    /// [`Config::empty_block_reserve`](crate::Config::empty_block_reserve)
    /// and [`Config::empty_block_frames`](crate::Config::empty_block_frames)
    /// allow; one per custom pool, or its `min_blocks`.
    /// [`Allocator::trim`](crate::Allocator::trim) releases them (but
    /// `min_blocks`).
    pub empty_blocks: u64,
    /// Blocks a defragmentation plan is emptying: released when the moved
    /// allocations in them are freed, but for a custom pool's: one that
    /// empties while the pool has no block above its `min_blocks` (`trim`
    /// released them meanwhile) stays, no longer retiring
    /// (`BlockMap::retiring` says which).
    pub retiring_blocks: u64,
    /// Allocations inside blocks.
    pub block_allocations: u64,
    /// Bytes of allocations inside blocks.
    pub block_allocated_bytes: u64,
    /// Dedicated allocations (one `VkDeviceMemory` each).
    pub dedicated_allocations: u64,
    /// Bytes of dedicated allocations.
    pub dedicated_bytes: u64,
}

impl TypeStats {
    pub(crate) fn from_counters(memory_type: u32, heap: u32, counters: &PoolCounters) -> Self {
        Self {
            memory_type,
            heap,
            blocks: counters.blocks,
            block_bytes: counters.block_bytes,
            empty_blocks: counters.empty_blocks,
            retiring_blocks: counters.retiring_blocks,
            block_allocations: counters.block_allocations,
            block_allocated_bytes: counters.block_allocated_bytes,
            dedicated_allocations: counters.dedicated,
            dedicated_bytes: counters.dedicated_bytes,
        }
    }

    /// Bytes of `VkDeviceMemory` held: blocks plus dedicated. Like every
    /// sum of these plain figures, saturates at `u64::MAX`.
    pub fn reserved_bytes(&self) -> u64 {
        self.block_bytes.saturating_add(self.dedicated_bytes)
    }

    /// Bytes in live allocations (those freed behind a frame included,
    /// until collected).
    pub fn live_bytes(&self) -> u64 {
        self.block_allocated_bytes
            .saturating_add(self.dedicated_bytes)
    }

    /// Live allocations.
    pub fn allocations(&self) -> u64 {
        self.block_allocations
            .saturating_add(self.dedicated_allocations)
    }
}

/// Figures of one heap: the sum of its memory types, and its budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapStats {
    /// Heap index.
    pub heap: u32,
    /// Heap size.
    pub size: u64,
    /// Bytes of `VkDeviceMemory` this allocator holds in the heap.
    pub reserved_bytes: u64,
    /// Bytes of live allocations in the heap.
    pub live_bytes: u64,
    /// Live allocations in the heap.
    pub allocations: u64,
    /// Budget and process-wide usage (`VK_EXT_memory_budget`), or the
    /// configured fraction of the heap and this allocator's usage; as
    /// [`Allocator::budgets`](crate::Allocator::budgets) reports them.
    pub budget: HeapBudget,
}

impl HeapStats {
    pub(crate) fn sum(heap: u32, size: u64, budget: HeapBudget, types: &[TypeStats]) -> Self {
        let mine = types.iter().filter(|t| t.heap == heap);
        let mut stats = Self {
            heap,
            size,
            budget,
            ..Self::default()
        };
        for t in mine {
            stats.reserved_bytes = stats.reserved_bytes.saturating_add(t.reserved_bytes());
            stats.live_bytes = stats.live_bytes.saturating_add(t.live_bytes());
            stats.allocations = stats.allocations.saturating_add(t.allocations());
        }
        stats
    }
}

/// A snapshot of the allocator's figures, from [`Allocator::stats`](crate::Allocator::stats).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// One entry per memory type, by index.
    pub memory_types: Vec<TypeStats>,
    /// One entry per heap, by index.
    pub heaps: Vec<HeapStats>,
    /// `VkDeviceMemory` objects alive (blocks and dedicated).
    pub memory_objects: u32,
}

impl Stats {
    /// Bytes of `VkDeviceMemory` held, all types (saturating, as every sum
    /// here).
    pub fn reserved_bytes(&self) -> u64 {
        self.sum(TypeStats::reserved_bytes)
    }

    /// Bytes in live allocations, all types (those freed behind a frame
    /// included, until collected).
    pub fn live_bytes(&self) -> u64 {
        self.sum(TypeStats::live_bytes)
    }

    /// Live allocations, all types.
    pub fn allocations(&self) -> u64 {
        self.sum(TypeStats::allocations)
    }

    fn sum(&self, figure: impl Fn(&TypeStats) -> u64) -> u64 {
        self.memory_types
            .iter()
            .map(figure)
            .fold(0, u64::saturating_add)
    }
}

/// One line: `type 1 (heap 0): 2 blocks 96.00 MiB (0 empty, 0 being
/// emptied), 40 suballocations 50.00 MiB, 1 dedicated 4.00 MiB`; also what
/// [`Allocator::pool_stats`](crate::Allocator::pool_stats) gives for one
/// custom pool.
impl std::fmt::Display for TypeStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const MIB: f64 = (1u64 << 20) as f64;
        write!(
            f,
            "type {} (heap {}): {} blocks {:.2} MiB ({} empty, {} being emptied), {} suballocations {:.2} MiB, {} dedicated {:.2} MiB",
            self.memory_type,
            self.heap,
            self.blocks,
            self.block_bytes as f64 / MIB,
            self.empty_blocks,
            self.retiring_blocks,
            self.block_allocations,
            self.block_allocated_bytes as f64 / MIB,
            self.dedicated_allocations,
            self.dedicated_bytes as f64 / MIB
        )
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const MIB: f64 = (1u64 << 20) as f64;
        writeln!(
            f,
            "{} allocations, {:.2} MiB live in {:.2} MiB reserved, {} memory objects",
            self.allocations(),
            self.live_bytes() as f64 / MIB,
            self.reserved_bytes() as f64 / MIB,
            self.memory_objects
        )?;
        for t in self.memory_types.iter().filter(|t| t.reserved_bytes() > 0) {
            writeln!(f, "  {t}")?;
        }
        for h in self.heaps.iter().filter(|h| h.reserved_bytes > 0) {
            writeln!(
                f,
                "  heap {}: {:.2} MiB reserved of {:.2} MiB, budget {:.2} MiB, usage {:.2} MiB",
                h.heap,
                h.reserved_bytes as f64 / MIB,
                h.size as f64 / MIB,
                h.budget.budget as f64 / MIB,
                h.budget.usage as f64 / MIB
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Type 1 of heap 0 holds two 48 MiB blocks and a 4 MiB dedicated
    /// allocation; type 0, of the same heap, and heap 1 hold nothing.
    fn two_types_one_used() -> Stats {
        let used = TypeStats {
            memory_type: 1,
            heap: 0,
            blocks: 2,
            block_bytes: 96 << 20,
            empty_blocks: 1,
            retiring_blocks: 0,
            block_allocations: 40,
            block_allocated_bytes: 50 << 20,
            dedicated_allocations: 1,
            dedicated_bytes: 4 << 20,
        };
        let unused = TypeStats {
            memory_type: 0,
            heap: 0,
            ..TypeStats::default()
        };
        let types = [unused, used];
        let budget = HeapBudget {
            budget: 800 << 20,
            usage: 128 << 20,
        };
        Stats {
            memory_types: types.to_vec(),
            heaps: vec![
                HeapStats::sum(0, 1 << 30, budget, &types),
                HeapStats::sum(1, 2 << 30, HeapBudget::default(), &types),
            ],
            memory_objects: 3,
        }
    }

    /// The summary a caller logs gives its figures in MiB, and lists only
    /// the types and heaps that hold memory: an idle type or heap is noise
    /// in a log, and one that holds memory must not be missing.
    #[test]
    fn summary_lists_the_types_and_heaps_holding_memory_in_mib() {
        let text = two_types_one_used().to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "41 allocations, 54.00 MiB live in 100.00 MiB reserved, 3 memory objects",
                "  type 1 (heap 0): 2 blocks 96.00 MiB (1 empty, 0 being emptied), \
                 40 suballocations 50.00 MiB, 1 dedicated 4.00 MiB",
                "  heap 0: 100.00 MiB reserved of 1024.00 MiB, budget 800.00 MiB, usage 128.00 MiB",
            ],
            "{text}"
        );
    }
}
