//! Makes the fake-memory layer findable by the Vulkan loader.
//!
//! Once per test process, before the first instance: build the layer with
//! `cargo build -p vk-fake-memory-layer` into this profile's target folder
//! (a no-op when it is up to date; it cannot happen in `build.rs`, where a
//! nested cargo would wait forever on the build lock held by the outer one),
//! write its manifest (library path absolute) into a folder of its own, and add
//! that folder to `VK_ADD_LAYER_PATH` unless it is there already (as it is when
//! the tests run under `scripts/with-vulkan.sh`). `VK_LAYER_PATH` is not used:
//! it would hide the system's validation layer.
//!
//! The loader reads `VK_ADD_LAYER_PATH` when an instance is created. Setting an
//! environment variable while another thread reads the environment is a data
//! race in C, so every context creation goes through [`prepare`] first, which
//! does its work under a `OnceLock` before any instance exists.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The layer's name, as in its manifest.
pub const LAYER_NAME: &str = "VK_LAYER_VK_SUBALLOC_fake_memory";

/// The environment variable the loader searches for extra layer manifests.
pub const ADD_LAYER_PATH: &str = "VK_ADD_LAYER_PATH";

const MANIFEST_TEMPLATE: &str =
    include_str!("../../layers/fake-memory/VkLayer_vk_suballoc_fake_memory.json.in");
const MANIFEST_FILE: &str = "VkLayer_vk_suballoc_fake_memory.json";
const LIBRARY_FILE: &str = "libvk_fake_memory_layer.so";

/// Environment variable naming a prebuilt layer library to use instead of
/// building one.
pub const PREBUILT_LIBRARY: &str = "VK_SUBALLOC_FAKE_LAYER_LIB";

/// The prebuilt layer library named by [`PREBUILT_LIBRARY`], if any.
fn prebuilt_library() -> Option<PathBuf> {
    std::env::var_os(PREBUILT_LIBRARY)
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
}

/// This build profile's artifact folder, e.g. `target/debug` (from `build.rs`).
pub fn profile_dir() -> PathBuf {
    PathBuf::from(env!("VK_SUBALLOC_PROFILE_DIR"))
}

/// Where the layer's shared library is built (or was, for a prebuilt one).
pub fn library_path() -> PathBuf {
    prebuilt_library().unwrap_or_else(|| profile_dir().join(LIBRARY_FILE))
}

/// The folder holding the layer's manifest (and nothing else): beside the
/// library.
pub fn manifest_dir() -> PathBuf {
    let library = library_path();
    library
        .parent()
        .map_or_else(profile_dir, Path::to_path_buf)
        .join("fake-memory-layer")
}

/// Builds the layer, writes its manifest and points the loader at it, once per
/// process.
///
/// # Panics
/// When the layer cannot be built or its manifest written, with the reason.
pub fn prepare() {
    static PREPARED: OnceLock<Result<(), String>> = OnceLock::new();
    if let Err(reason) = PREPARED.get_or_init(prepare_once) {
        panic!("the fake-memory test layer is not available: {reason}");
    }
}

fn prepare_once() -> Result<(), String> {
    let prebuilt = prebuilt_library().is_some();
    let library = library_path();
    if !prebuilt {
        build_layer()?;
    }
    if !library.is_file() {
        return Err(if prebuilt {
            format!("{PREBUILT_LIBRARY}={} is not a file", library.display())
        } else {
            format!(
                "`cargo build -p vk-fake-memory-layer` succeeded but {} is missing",
                library.display()
            )
        });
    }
    write_manifest(&library)?;
    add_to_layer_path(&manifest_dir());
    Ok(())
}

/// Runs `cargo build -p vk-fake-memory-layer` for this test binary's profile.
fn build_layer() -> Result<(), String> {
    // The cargo running the tests, else the one that compiled them.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let mut command = Command::new(&cargo);
    command.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "build",
        "--quiet",
        "-p",
        "vk-fake-memory-layer",
    ]);
    let profile_dir = profile_dir();
    match profile_dir.file_name().and_then(|name| name.to_str()) {
        Some("debug") | None => {}
        Some("release") => {
            command.arg("--release");
        }
        Some(other) => {
            command.args(["--profile", other]);
        }
    }
    let output = command.output().map_err(|error| {
        format!(
            "could not run {} to build the layer: {error}",
            Path::new(&cargo).display()
        )
    })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`cargo build -p vk-fake-memory-layer` failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// Escapes a path for a JSON string.
fn json_string_body(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => escaped.push_str("\\\""),
            '\\' => escaped.push_str("\\\\"),
            c if c.is_control() => escaped.push_str(&format!("\\u{:04x}", c as u32)),
            c => escaped.push(c),
        }
    }
    escaped
}

/// Writes the manifest, atomically, unless it already has this content.
fn write_manifest(library: &Path) -> Result<(), String> {
    let dir = manifest_dir();
    let library = library
        .canonicalize()
        .unwrap_or_else(|_| library.to_path_buf());
    let content = MANIFEST_TEMPLATE.replace(
        "@LIBRARY_PATH@",
        &json_string_body(&library.to_string_lossy()),
    );
    let path = dir.join(MANIFEST_FILE);
    if std::fs::read_to_string(&path).is_ok_and(|existing| existing == content) {
        return Ok(());
    }
    let failed = |error: std::io::Error| format!("cannot write {}: {error}", path.display());
    std::fs::create_dir_all(&dir).map_err(failed)?;
    let temporary = dir.join(format!(".{MANIFEST_FILE}.{}", std::process::id()));
    std::fs::write(&temporary, content).map_err(failed)?;
    std::fs::rename(&temporary, &path).map_err(failed)
}

/// Prepends `dir` to `VK_ADD_LAYER_PATH` unless it is already listed.
fn add_to_layer_path(dir: &Path) {
    let canonical = |path: &Path| path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let wanted = canonical(dir);
    let current = std::env::var_os(ADD_LAYER_PATH).unwrap_or_default();
    if std::env::split_paths(&current).any(|listed| canonical(&listed) == wanted) {
        return;
    }
    let mut paths = vec![wanted];
    paths.extend(std::env::split_paths(&current));
    if let Ok(joined) = std::env::join_paths(paths) {
        // No instance exists yet and every context creation waits on the
        // OnceLock in `prepare`, so no Vulkan code reads the environment now.
        std::env::set_var(ADD_LAYER_PATH, joined);
    }
}
