//! C-side conventions shared by the entry points: nullable strings, the
//! two-call array idiom, `pNext` chains, and `PFN_vkVoidFunction` for typed
//! intercepts.

use std::ffi::{c_char, c_void, CStr};

use ash::vk;

/// `PFN_vkVoidFunction` of an intercept with the given `PFN_vk*` type.
macro_rules! void_fn {
    ($function:expr, $pfn:ty) => {{
        let typed: $pfn = $function;
        // SAFETY: function pointers all have the same size and ABI class; the
        // loader casts the pointer back to `$pfn` by the command's name.
        Some(unsafe { std::mem::transmute::<$pfn, unsafe extern "system" fn()>(typed) })
    }};
}
pub(crate) use void_fn;

/// Copies an array out through the Vulkan two-call idiom: the count when
/// `out` is null, else up to `*count` items and `INCOMPLETE` if cut short.
///
/// # Safety
/// `count` is valid; `out` is null or points at `*count` writable items.
pub unsafe fn write_array<T: Copy>(items: &[T], count: *mut u32, out: *mut T) -> vk::Result {
    if count.is_null() {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    }
    let total = u32::try_from(items.len()).unwrap_or(u32::MAX);
    if out.is_null() {
        // SAFETY: `count` is valid and non-null.
        unsafe { count.write(total) };
        return vk::Result::SUCCESS;
    }
    // SAFETY: `count` is valid and non-null.
    let capacity = unsafe { count.read() };
    let written = capacity.min(total);
    for (index, item) in items.iter().take(written as usize).enumerate() {
        // SAFETY: `index < written <= *count`, the capacity of `out`.
        unsafe { out.add(index).write(*item) };
    }
    // SAFETY: `count` is valid and non-null.
    unsafe { count.write(written) };
    if written < total {
        vk::Result::INCOMPLETE
    } else {
        vk::Result::SUCCESS
    }
}

/// Reads a possibly null C string.
///
/// # Safety
/// `name` is null or a valid NUL-terminated string.
pub unsafe fn c_str<'a>(name: *const c_char) -> Option<&'a CStr> {
    // SAFETY: non-null and NUL-terminated by the contract.
    (!name.is_null()).then(|| unsafe { CStr::from_ptr(name) })
}

/// The structures of a `pNext` chain from `head` on, each as its `sType`
/// and its address.
///
/// # Safety
/// `head` is null or the first structure of a valid chain: every structure
/// in it starts with `sType` and `pNext`, as every Vulkan structure does,
/// and stays valid while the iterator is used.
pub unsafe fn pnext_chain(
    head: *const c_void,
) -> impl Iterator<Item = (vk::StructureType, *const c_void)> {
    let mut next = head;
    std::iter::from_fn(move || {
        if next.is_null() {
            return None;
        }
        let this = next;
        // SAFETY: a structure of the chain (the contract), which starts
        // with sType and pNext.
        let (s_type, following) = unsafe {
            let header = this.cast::<vk::BaseInStructure<'_>>();
            ((*header).s_type, (*header).p_next)
        };
        next = following.cast();
        Some((s_type, this))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two-call idiom as the layer's device extension list and its own
    /// priorities query answer it: the count alone for a null array, then
    /// at most the caller's count of items, with `VK_INCOMPLETE` when that
    /// cuts the list short and the count written set to the items written.
    #[test]
    fn arrays_follow_the_two_call_idiom() {
        let items = [1u32, 2, 3];
        let mut count = 0;
        // SAFETY: a valid count and no array.
        let result = unsafe { write_array(&items, &mut count, std::ptr::null_mut()) };
        assert_eq!((result, count), (vk::Result::SUCCESS, 3));
        let mut out = [0u32; 5];
        count = 2;
        // SAFETY: `out` has room for `count` items.
        let result = unsafe { write_array(&items, &mut count, out.as_mut_ptr()) };
        assert_eq!((result, count), (vk::Result::INCOMPLETE, 2));
        assert_eq!(out, [1, 2, 0, 0, 0], "written past the caller's count");
        count = 5;
        // SAFETY: as above.
        let result = unsafe { write_array(&items, &mut count, out.as_mut_ptr()) };
        assert_eq!((result, count), (vk::Result::SUCCESS, 3));
        assert_eq!(out, [1, 2, 3, 0, 0]);
        // SAFETY: a null count, which the function refuses.
        let result = unsafe { write_array(&items, std::ptr::null_mut(), out.as_mut_ptr()) };
        assert_eq!(result, vk::Result::ERROR_INITIALIZATION_FAILED);
    }
}
