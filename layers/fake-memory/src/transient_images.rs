//! Which live images were created with `VK_IMAGE_USAGE_TRANSIENT_ATTACHMENT_BIT`.
//!
//! A lazily allocated fake type may be offered to an image only when the
//! image was created transient (`memory_type_map.rs`), but
//! `vkGetImageMemoryRequirements[2]` name the image, not its create info. So
//! the layer intercepts `vkCreateImage` and `vkDestroyImage` and keeps, per
//! device, the handles of its live transient images. (The maintenance4
//! `vkGetDeviceImageMemoryRequirements` carries the create info itself.)

use std::collections::HashSet;
use std::sync::Mutex;

use ash::vk;
use ash::vk::Handle;

use crate::dispatch_registry::device_state;
use crate::ffi_guard::guard;
use crate::memory_accounting::lock;
use crate::memory_type_map::ResourceKind;

/// The live transient-attachment images of one device.
#[derive(Debug, Default)]
pub struct TransientImages {
    images: Mutex<HashSet<u64>>,
}

impl TransientImages {
    /// Records `image`, just created with `usage`, if that usage is transient.
    pub fn created(&self, image: vk::Image, usage: vk::ImageUsageFlags) {
        if ResourceKind::of_image(usage) == ResourceKind::TransientImage {
            lock(&self.images).insert(image.as_raw());
        }
    }

    /// Forgets `image`, about to be destroyed.
    pub fn destroyed(&self, image: vk::Image) {
        lock(&self.images).remove(&image.as_raw());
    }

    /// The kind of the live `image`, for its memory requirements.
    pub fn kind(&self, image: vk::Image) -> ResourceKind {
        if lock(&self.images).contains(&image.as_raw()) {
            ResourceKind::TransientImage
        } else {
            ResourceKind::Image
        }
    }
}

/// `vkCreateImage`: creates, then records a transient-attachment image.
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
                let (usage, handle) = unsafe { ((*create_info).usage, image.read()) };
                fake.transient_images.created(handle, usage);
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
            fake.transient_images.destroyed(image);
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
    fn only_transient_images_are_recorded_until_destroyed() {
        let images = TransientImages::default();
        let transient = vk::Image::from_raw(1);
        let plain = vk::Image::from_raw(2);
        images.created(
            transient,
            vk::ImageUsageFlags::COLOR_ATTACHMENT | vk::ImageUsageFlags::TRANSIENT_ATTACHMENT,
        );
        images.created(plain, vk::ImageUsageFlags::COLOR_ATTACHMENT);
        assert_eq!(images.kind(transient), ResourceKind::TransientImage);
        assert_eq!(images.kind(plain), ResourceKind::Image);
        images.destroyed(transient);
        assert_eq!(images.kind(transient), ResourceKind::Image);
    }
}
