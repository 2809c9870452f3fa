//! The kind of every live image whose memory types differ from a plain
//! optimal image's: those created with `VK_IMAGE_USAGE_TRANSIENT_ATTACHMENT_BIT`
//! or with `VK_IMAGE_TILING_LINEAR`.
//!
//! A lazily allocated fake type may be offered to an image only when the
//! image was created transient, and a profile's host memory types that
//! hold no optimal images still hold linear ones (`memory_type_map.rs`),
//! but `vkGetImageMemoryRequirements[2]` name the image, not its create
//! info. So the layer intercepts `vkCreateImage` and `vkDestroyImage` and
//! keeps, per device, the kind of each such live image. (The maintenance4
//! `vkGetDeviceImageMemoryRequirements` carries the create info itself.)

use std::collections::HashMap;
use std::sync::Mutex;

use ash::vk;
use ash::vk::Handle;

use crate::dispatch_registry::device_state;
use crate::ffi_guard::guard;
use crate::memory_accounting::lock;
use crate::memory_type_map::ResourceKind;

/// The live transient-attachment and linear images of one device.
#[derive(Debug, Default)]
pub struct ImageKinds {
    images: Mutex<HashMap<u64, ResourceKind>>,
}

impl ImageKinds {
    /// Records `image`, just created with `usage` and `tiling`, unless it
    /// is a plain optimal image.
    pub fn created(&self, image: vk::Image, usage: vk::ImageUsageFlags, tiling: vk::ImageTiling) {
        let kind = ResourceKind::of_image(usage, tiling);
        if kind != ResourceKind::Image {
            lock(&self.images).insert(image.as_raw(), kind);
        }
    }

    /// Forgets `image`, about to be destroyed.
    pub fn destroyed(&self, image: vk::Image) {
        lock(&self.images).remove(&image.as_raw());
    }

    /// The kind of the live `image`, for its memory requirements.
    pub fn kind(&self, image: vk::Image) -> ResourceKind {
        lock(&self.images)
            .get(&image.as_raw())
            .copied()
            .unwrap_or(ResourceKind::Image)
    }
}

/// `vkCreateImage`: creates, then records a transient-attachment or linear image.
pub(crate) unsafe extern "system" fn create_image(
    device: vk::Device,
    create_info: *const vk::ImageCreateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    image: *mut vk::Image,
) -> vk::Result {
    guard(
        "vkCreateImage",
        vk::Result::ERROR_OUT_OF_HOST_MEMORY,
        || {
            // SAFETY: a live device, from the caller.
            let Some(state) = (unsafe { device_state(device) }) else {
                return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
            };
            let Some(next) = state.next.create_image else {
                return vk::Result::ERROR_OUT_OF_HOST_MEMORY;
            };
            // SAFETY: forwarding the caller's arguments.
            let result = unsafe { next(device, create_info, allocator, image) };
            if let (Some(fake), vk::Result::SUCCESS, false, false) =
                (&state.fake, result, create_info.is_null(), image.is_null())
            {
                // SAFETY: a valid create info (contract); on success the
                // driver wrote the new handle. The application does not have
                // the handle yet, so no other thread can destroy it first.
                let (usage, tiling, handle) =
                    unsafe { ((*create_info).usage, (*create_info).tiling, image.read()) };
                fake.image_kinds.created(handle, usage, tiling);
            }
            result
        },
    )
}

/// `vkDestroyImage`: forgets the image, then destroys it.
///
/// The record goes first: once the driver has destroyed `image`, another
/// thread's `vkCreateImage` may get the same handle and record it, and a
/// removal after the destroy would drop that new record instead.
pub(crate) unsafe extern "system" fn destroy_image(
    device: vk::Device,
    image: vk::Image,
    allocator: *const vk::AllocationCallbacks<'_>,
) {
    guard("vkDestroyImage", (), || {
        // SAFETY: a live device, from the caller.
        let Some(state) = (unsafe { device_state(device) }) else {
            return;
        };
        if let Some(fake) = &state.fake {
            fake.image_kinds.destroyed(image);
        }
        if let Some(next) = state.next.destroy_image {
            // SAFETY: forwarding the caller's arguments.
            unsafe { next(device, image, allocator) };
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_and_linear_images_are_recorded_until_destroyed() {
        let images = ImageKinds::default();
        let transient = vk::Image::from_raw(1);
        let plain = vk::Image::from_raw(2);
        let linear = vk::Image::from_raw(3);
        let attachment =
            vk::ImageUsageFlags::COLOR_ATTACHMENT | vk::ImageUsageFlags::TRANSIENT_ATTACHMENT;
        let optimal = vk::ImageTiling::OPTIMAL;
        images.created(transient, attachment, optimal);
        images.created(plain, vk::ImageUsageFlags::COLOR_ATTACHMENT, optimal);
        images.created(
            linear,
            vk::ImageUsageFlags::TRANSFER_DST,
            vk::ImageTiling::LINEAR,
        );
        assert_eq!(images.kind(transient), ResourceKind::TransientImage);
        assert_eq!(images.kind(plain), ResourceKind::Image);
        assert_eq!(images.kind(linear), ResourceKind::LinearImage);
        images.destroyed(transient);
        images.destroyed(linear);
        assert_eq!(images.kind(transient), ResourceKind::Image);
        assert_eq!(images.kind(linear), ResourceKind::Image);
    }
}
