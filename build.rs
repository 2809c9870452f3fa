//! Build script of `vk-suballoc`.
//!
//! Its job: tell the crate's tests and examples where cargo puts this
//! profile's artifacts (`VK_SUBALLOC_PROFILE_DIR`, e.g. `target/debug`), so they
//! can find the fake-memory Vulkan layer that `cargo build -p vk-fake-memory-layer`
//! writes there and point the Vulkan loader at it; and name once the targets
//! whose thread locals are native (`cfg(thread_counts)`: Linux, macOS, Windows
//! with MSVC), where the unit tests' global allocator counts each thread's
//! allocations (`src/host_memory_cap.rs`), for the `cfg`s of the code and tests
//! that use the count. It reads no files, runs no tools and has no build
//! dependencies, so library users pay nothing for it.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    // OUT_DIR is `<target>/<profile>/build/<pkg>-<hash>/out`; the profile folder
    // is three levels up. Fall back to nothing rather than fail the build.
    let profile_dir = std::env::var_os("OUT_DIR")
        .map(PathBuf::from)
        .and_then(|out| out.ancestors().nth(3).map(Path::to_path_buf));
    if let Some(dir) = profile_dir {
        println!("cargo::rustc-env=VK_SUBALLOC_PROFILE_DIR={}", dir.display());
    }
    // Elsewhere std may keep a thread local behind an OS key and allocate on
    // a thread's first access, which from inside the allocator would recurse.
    println!("cargo::rustc-check-cfg=cfg(thread_counts)");
    let target = |key: &str| std::env::var(key).unwrap_or_default();
    let os = target("CARGO_CFG_TARGET_OS");
    if os == "linux"
        || os == "macos"
        || (os == "windows" && target("CARGO_CFG_TARGET_ENV") == "msvc")
    {
        println!("cargo::rustc-cfg=thread_counts");
    }
}
