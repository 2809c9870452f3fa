//! The kind of every live image whose memory requirements differ from a
//! plain optimal colour image's: those created with
//! `VK_IMAGE_USAGE_TRANSIENT_ATTACHMENT_BIT` or with `VK_IMAGE_TILING_LINEAR`
//! (other memory types), and those of a depth/stencil format (which a
//! profile's driver may align apart: RADV's 64 KiB Z swizzle blocks).
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

use crate::call_failures::{failed_creation, ResourceCall};
use crate::dispatch_registry::device_state;
use crate::ffi_guard::guard;
use crate::memory_accounting::lock;
use crate::memory_type_map::ResourceKind;

/// Whether `format` has a depth or stencil aspect.
pub fn is_depth_stencil(format: vk::Format) -> bool {
    matches!(
        format,
        vk::Format::D16_UNORM
            | vk::Format::X8_D24_UNORM_PACK32
            | vk::Format::D32_SFLOAT
            | vk::Format::S8_UINT
            | vk::Format::D16_UNORM_S8_UINT
            | vk::Format::D24_UNORM_S8_UINT
            | vk::Format::D32_SFLOAT_S8_UINT
    )
}

/// The live transient-attachment, linear and depth/stencil images of one
/// device: their kind, and whether their format is depth/stencil.
#[derive(Debug, Default)]
pub struct ImageKinds {
    images: Mutex<HashMap<u64, (ResourceKind, bool)>>,
}

impl ImageKinds {
    /// Records `image`, just created with `usage`, `tiling` and `format`,
    /// unless it is a plain optimal colour image.
    pub fn created(
        &self,
        image: vk::Image,
        usage: vk::ImageUsageFlags,
        tiling: vk::ImageTiling,
        format: vk::Format,
    ) {
        let kind = ResourceKind::of_image(usage, tiling);
        let depth_stencil = is_depth_stencil(format);
        if kind != ResourceKind::Image || depth_stencil {
            lock(&self.images).insert(image.as_raw(), (kind, depth_stencil));
        }
    }

    /// Forgets `image`, about to be destroyed.
    pub fn destroyed(&self, image: vk::Image) {
        lock(&self.images).remove(&image.as_raw());
    }

    /// The kind of the live `image` and whether its format is
    /// depth/stencil, for its memory requirements.
    pub fn class(&self, image: vk::Image) -> (ResourceKind, bool) {
        lock(&self.images)
            .get(&image.as_raw())
            .copied()
            .unwrap_or((ResourceKind::Image, false))
    }
}

/// `vkCreateImage`: fails a call the configuration chose
/// (`call_failures.rs`, writing a null handle), else creates, then
/// records a transient-attachment, linear or depth/stencil image.
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
            // SAFETY: the caller's output handle.
            let failed = unsafe { failed_creation(&state, ResourceCall::CreateImage, image) };
            if let Some(result) = failed {
                return result;
            }
            // SAFETY: forwarding the caller's arguments.
            let result = unsafe { next(device, create_info, allocator, image) };
            if let (Some(fake), vk::Result::SUCCESS, false, false) =
                (&state.fake, result, create_info.is_null(), image.is_null())
            {
                // SAFETY: a valid create info (contract); on success the
                // driver wrote the new handle. The application does not have
                // the handle yet, so no other thread can destroy it first.
                let (usage, tiling, format, handle) = unsafe {
                    let info = &*create_info;
                    (info.usage, info.tiling, info.format, image.read())
                };
                fake.image_kinds.created(handle, usage, tiling, format);
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
        let rgba8 = vk::Format::R8G8B8A8_UNORM;
        images.created(transient, attachment, optimal, rgba8);
        images.created(plain, vk::ImageUsageFlags::COLOR_ATTACHMENT, optimal, rgba8);
        images.created(
            linear,
            vk::ImageUsageFlags::TRANSFER_DST,
            vk::ImageTiling::LINEAR,
            rgba8,
        );
        let depth = vk::Image::from_raw(4);
        let usage = vk::ImageUsageFlags::DEPTH_STENCIL_ATTACHMENT;
        images.created(depth, usage, optimal, vk::Format::D32_SFLOAT);
        assert_eq!(images.class(depth), (ResourceKind::Image, true));
        assert_eq!(images.class(plain), (ResourceKind::Image, false));
        assert_eq!(images.class(transient).0, ResourceKind::TransientImage);
        assert_eq!(images.class(plain).0, ResourceKind::Image);
        assert_eq!(images.class(linear).0, ResourceKind::LinearImage);
        images.destroyed(transient);
        images.destroyed(linear);
        assert_eq!(images.class(transient).0, ResourceKind::Image);
        assert_eq!(images.class(linear).0, ResourceKind::Image);
    }
}
