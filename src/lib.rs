#![doc = include_str!("../README.md")]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod allocator;
mod config;
pub mod device;
mod error;
pub mod frames;
#[cfg(test)]
mod host_memory_cap;
// The offset core's unit tests run the shadow model of
// `tests/offset_model/shadow.rs`, written against the public paths.
#[cfg(test)]
extern crate self as vk_suballoc;
pub mod memory;
pub mod offset;
pub mod report;

pub use allocator::{
    Allocation, AllocationDesc, Allocator, CorruptionReport, DamagedFree, DamagedMargin,
    DedicatedHint, DedicatedPolicy, DefragmentationLimits, DefragmentationMove,
    DefragmentationPlan, Movable, Pool, PoolDesc, Request,
};
pub use config::Config;
pub use device::DedicatedTarget;
pub use error::Error;
pub use frames::{Collected, RingAllocation, UploadRing, UploadRingDesc};
pub use memory::{MemoryEvent, MemoryEventKind, ResourceKind, Usage};
pub use offset::Strategy;
