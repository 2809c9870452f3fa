//! Blocks and policy: which memory type, which block, how large, when
//! dedicated, what is mapped. Generic over the device seam
//! ([`MemoryDeviceExt`](crate::device::MemoryDeviceExt)); the
//! [`Allocator`](crate::Allocator) facade puts one lock around each memory
//! type's pool of blocks.

mod block;
pub(crate) mod block_size;
mod budget_cache;
pub(crate) mod context;
pub(crate) mod deferred_log;
pub(crate) mod events;
pub(crate) mod first_panic;
pub(crate) mod held_lock;
pub(crate) mod mapping;
pub(crate) mod memory_type_choice;
pub(crate) mod runs;
pub(crate) mod slab;
pub(crate) mod type_pool;
mod usage;

pub use events::{MemoryEvent, MemoryEventKind};
pub use usage::{ResourceKind, Usage};
