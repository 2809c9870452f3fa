//! Statistics: what the allocator holds, per memory type and heap.

mod stats;

pub use stats::{HeapStats, Stats, TypeStats};
