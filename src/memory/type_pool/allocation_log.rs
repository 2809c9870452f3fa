//! `Config::log_allocations`: a debug line for each allocation as it is
//! made and as it is freed (gpu-allocator's `log_allocations` and
//! `log_frees`), found on the debug paths (`debug_fill.rs`'s `on_placed`,
//! `free.rs`'s `free_debug`) under the pool's lock and logged through
//! `deferred_log` once the locks are released.

use ash::vk::Handle;

use super::{Location, TypePool};
use crate::memory::deferred_log;

impl<M> TypePool<M> {
    /// The log's line for the live allocation at `location`, of `size`
    /// requested bytes, `what` ("made", "freed"): its name, size and where
    /// it lies (offset, block, pool, memory type, memory object); `None`
    /// when nothing is live there. Worded like the leak lines, and apart
    /// from the memory objects' own debug lines (`allocating 4096 bytes of
    /// memory type 1`, `freed ...`).
    pub(super) fn allocation_line(
        &self,
        what: &str,
        location: Location,
        size: u64,
    ) -> Option<String> {
        let name = self.name_at(location).unwrap_or("unnamed");
        let pool = self.pool_label();
        let memory_type = self.memory_type;
        let (place, raw) = match location {
            Location::Dedicated(key) => {
                let dedicated = self.dedicated.get(key)?;
                ("of dedicated memory".to_owned(), dedicated.raw)
            }
            _ => {
                let (block, offset, _) = self.held_in_block(location)?;
                let serial = block.serial;
                let place = format!("at offset {offset} of block {memory_type}/{serial}");
                (place, block.raw)
            }
        };
        Some(format!(
            "vk-suballoc: allocation {name:?} {what}: {size} bytes {place}{pool} (memory type {memory_type}, memory {:#x})",
            raw.as_raw()
        ))
    }
}

/// Logs `line` ([`TypePool::allocation_line`]) at debug level, once the
/// locks are released (`deferred_log`); nothing for `None`.
pub(super) fn log_allocation(line: Option<String>) {
    if let Some(line) = line {
        deferred_log::log(log::Level::Debug, line);
    }
}
