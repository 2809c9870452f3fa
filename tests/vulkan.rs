//! The Vulkan integration tests: one test binary, so the fake-memory layer is
//! built and made findable once. Each module lives in `tests/vulkan/`; add
//! yours with a `#[path]` line below. The shared harness is `tests/support/`.
//!
//! Run: `scripts/with-vulkan.sh cargo test --test vulkan`; one profile only:
//! `scripts/with-vulkan.sh cargo test --test vulkan -- ::mobile`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

#[path = "vulkan/aliasing_suite.rs"]
mod aliasing_suite;
#[path = "vulkan/allocator_setup.rs"]
mod allocator_setup;
#[path = "vulkan/allocator_suite.rs"]
mod allocator_suite;
#[path = "vulkan/api_version_suite.rs"]
mod api_version_suite;
#[path = "vulkan/budget_suite.rs"]
mod budget_suite;
#[path = "vulkan/corruption_suite.rs"]
mod corruption_suite;
#[path = "vulkan/defragment_suite.rs"]
mod defragment_suite;
#[path = "vulkan/engine_loop.rs"]
mod engine_loop;
#[path = "vulkan/frames_suite.rs"]
mod frames_suite;
#[path = "vulkan/layer_dedicated_binds.rs"]
mod layer_dedicated_binds;
#[path = "vulkan/layer_self_test.rs"]
mod layer_self_test;
#[path = "vulkan/layer_threads.rs"]
mod layer_threads;
#[path = "vulkan/non_coherent_suite.rs"]
mod non_coherent_suite;
// Opaque POSIX file descriptors (`VK_KHR_external_memory_fd`): Unix only.
#[cfg(unix)]
#[path = "vulkan/pool_export_suite.rs"]
mod pool_export_suite;
#[path = "vulkan/pool_memory_suite.rs"]
mod pool_memory_suite;
#[path = "vulkan/pool_suite.rs"]
mod pool_suite;
#[path = "vulkan/priority_suite.rs"]
mod priority_suite;
#[path = "vulkan/refusals_suite.rs"]
mod refusals_suite;
#[path = "common/seeded_rng.rs"]
mod seeded_rng;
#[path = "vulkan/transient_suite.rs"]
mod transient_suite;
#[path = "vulkan/validation_checks.rs"]
mod validation_checks;
