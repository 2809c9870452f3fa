//! Build script of `vk-suballoc`.
//!
//! Its one job: tell the crate's tests and examples where cargo puts this
//! profile's artifacts (`VK_SUBALLOC_PROFILE_DIR`, e.g. `target/debug`), so they
//! can find the fake-memory Vulkan layer that `cargo build -p vk-fake-memory-layer`
//! writes there and point the Vulkan loader at it. It reads no files, runs no
//! tools and has no build dependencies, so library users pay nothing for it.

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
}
