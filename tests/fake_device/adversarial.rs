//! Adversarial arguments to every public entry point: sizes, offsets and
//! alignments at 0, 1, non-powers of two and near `u64::MAX`, reversed and
//! overflowing ranges, layouts at Vulkan's limits. Each gets a typed error
//! (or a correct result) and leaves the allocator consistent: never a
//! panic, never a wrapped figure.
//!
//! The tests sit in the files below by what they try: device layouts at
//! Vulkan's limits, config figures at theirs, figures that would pass
//! `u64::MAX`, every public entry point's adversarial arguments,
//! alignments of 2^63 from descriptions, pools and rings, handles that
//! outlived their free, and the fake device's own edges. No helper is shared; each file imports what
//! it uses.

#[path = "adversarial/config_limits.rs"]
mod config_limits;
#[path = "adversarial/device_limits.rs"]
mod device_limits;
#[path = "adversarial/entry_points.rs"]
mod entry_points;
#[path = "adversarial/fake_backend.rs"]
mod fake_backend;
#[path = "adversarial/huge_alignments.rs"]
mod huge_alignments;
#[path = "adversarial/past_u64_max.rs"]
mod past_u64_max;
#[path = "adversarial/stale_handles.rs"]
mod stale_handles;
