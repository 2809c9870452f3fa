//! Persistent mapping, byte access, and flush/invalidate on non-coherent memory.
//!
//! The tests sit in the files below by what they check: the allocator's
//! host access (`host_access.rs`), its flushes and invalidates staying off
//! a neighbour's bytes (`neighbours.rs`), and the fake device's own model
//! of mapped memory that the other tests rely on: its host and device
//! views, its mapping rules (`fake_mapped_memory.rs`) and its quarantine
//! of freed memory (`writes_into_freed_memory.rs`); and the mappings
//! `Config::strict_host_access` withholds (`strict_host_access.rs`).

#[path = "mapping/fake_mapped_memory.rs"]
mod fake_mapped_memory;
#[path = "mapping/host_access.rs"]
mod host_access;
#[path = "mapping/neighbours.rs"]
mod neighbours;
#[path = "mapping/strict_host_access.rs"]
mod strict_host_access;
#[path = "mapping/writes_into_freed_memory.rs"]
mod writes_into_freed_memory;
