//! The shared harness of the Vulkan integration tests.
//!
//! Every Vulkan test builds a [`VulkanContext`] for a [`Profile`]: lavapipe as
//! it is, or lavapipe behind the fake-memory layer (`layers/fake-memory`)
//! presenting a discrete (with or without resizable BAR), integrated, mobile or
//! AMD GPU's memory architecture. The validation layer sits above both and
//! every warning or error it reports is recorded; a context that is dropped
//! with unread messages fails the test. Tests that provoke a message on
//! purpose take it with [`VulkanContext::expect_validation_messages`].
//!
//! Only one test thread at a time holds Vulkan contexts ([`StackTurn`]): the
//! validation layer and the loader of Debian 12 race when one thread creates
//! or destroys an instance or device while another makes calls.
//!
//! Missing Vulkan pieces (loader, lavapipe, validation layer) make the tests
//! fail with a message saying what to install; they are never skipped.
//!
//! `VK_SUBALLOC_TEST_DEVICE=<part of a device name>` runs them on another
//! device (a real GPU) instead of lavapipe; `VK_SUBALLOC_FAKE_LAYER_LIB` then
//! names a prebuilt fake-memory layer where no cargo is at hand.

// Each test module uses a part of the harness; none uses all of it.
#![allow(dead_code, unused_imports, unused_macros)]

mod context;
mod device_setup;
pub mod fake_layer_setup;
mod image_info;
mod layer_settings;
mod one_time_commands;
mod profile;
mod stack_turn;
mod transient_attachment;
mod validation_messages;

pub use context::{on_custom_device, ContextOptions, HeapBudget, VulkanContext, TEST_DEVICE};
pub use image_info::rgba8_image_info;
pub use profile::Profile;
pub(crate) use profile::{test_each_fake_profile, test_each_profile, test_profiles};
pub use stack_turn::StackTurn;
pub use transient_attachment::{transient_attachment_info, TRANSIENT_FORMAT};
pub use validation_messages::{has_id, Advice, MessageLog};
