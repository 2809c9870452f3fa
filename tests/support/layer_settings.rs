//! Refuses validation-layer settings that would keep messages from the
//! tests.
//!
//! Besides what an application asks for, the validation layer reads
//! settings from the environment and from a settings file, which can mute
//! message ids (`message_id_filter`), turn checks off (`disables`) or report
//! each message id only so many times (`duplicate_message_limit`). A test
//! under such settings passes where it should fail: a developer who once ran
//! the Vulkan Configurator keeps its `vk_layer_settings.txt` in
//! `~/.local/share/vulkan/settings.d/`, which every Vulkan program of theirs
//! then reads. The layer reads the file once per process, before any setting
//! an application could give (1.3.239 has no `VK_EXT_layer_settings`), so
//! the harness cannot override it: it fails every context instead, naming
//! the file or variable.
//!
//! The layer (1.3.239, `vk_layer_config.cpp`) reads the first file of:
//! `$XDG_DATA_HOME` (else `$HOME/.local/share`)
//! `/vulkan/settings.d/vk_layer_settings.txt`; `$VK_LAYER_SETTINGS_PATH`
//! (a file, or a folder holding `vk_layer_settings.txt`); and
//! `vk_layer_settings.txt` in the current folder. Lines are
//! `khronos_validation.<setting> = <value>`, `#` starts a comment, a later
//! line overrides an earlier one.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Settings that hide messages: the file's key (after `khronos_validation.`)
/// and the environment variables that set it (1.3.239's, and later layers'
/// `VK_KHRONOS_VALIDATION_*` names).
const MUTING: [(&str, &[&str]); 3] = [
    (
        "message_id_filter",
        &[
            "VK_LAYER_MESSAGE_ID_FILTER",
            "VK_KHRONOS_VALIDATION_MESSAGE_ID_FILTER",
        ],
    ),
    (
        "disables",
        &["VK_LAYER_DISABLES", "VK_KHRONOS_VALIDATION_DISABLES"],
    ),
    (
        "duplicate_message_limit",
        &[
            "VK_LAYER_DUPLICATE_MESSAGE_LIMIT",
            "VK_KHRONOS_VALIDATION_DUPLICATE_MESSAGE_LIMIT",
        ],
    ),
];

const SETTINGS_FILE: &str = "vk_layer_settings.txt";

/// The settings file the validation layer reads, if any, as 1.3.239 finds
/// it: `env` reads an environment variable, `cwd` is the current folder.
pub fn settings_file(env: &dyn Fn(&str) -> Option<OsString>, cwd: &Path) -> Option<PathBuf> {
    let non_empty = |name: &str| env(name).filter(|value| !value.is_empty());
    let data_home = non_empty("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| non_empty("HOME").map(|home| Path::new(&home).join(".local/share")));
    if let Some(data_home) = data_home {
        let file = data_home.join("vulkan/settings.d").join(SETTINGS_FILE);
        if file.is_file() {
            return Some(file);
        }
    }
    if let Some(path) = non_empty("VK_LAYER_SETTINGS_PATH").map(PathBuf::from) {
        if path.is_dir() {
            return Some(path.join(SETTINGS_FILE));
        }
        if path.exists() {
            return Some(path);
        }
    }
    Some(cwd.join(SETTINGS_FILE)).filter(|file| file.is_file())
}

/// The `khronos_validation.*` settings of a settings file's `text`, by key
/// without the prefix, as the layer parses them.
fn parse(text: &str) -> BTreeMap<String, String> {
    let mut settings = BTreeMap::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        if let Some((key, value)) = line.split_once('=') {
            if let Some(key) = key.trim().strip_prefix("khronos_validation.") {
                settings.insert(key.to_owned(), value.trim().to_owned());
            }
        }
    }
    settings
}

/// Every setting in the environment (`env`) or the settings file the layer
/// would read (from `cwd`) that hides messages, described for a person.
pub fn muting_settings(env: &dyn Fn(&str) -> Option<OsString>, cwd: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for (_, variables) in MUTING {
        for variable in variables {
            if let Some(value) = env(variable).filter(|value| !value.is_empty()) {
                found.push(format!("the environment sets {variable}={value:?}"));
            }
        }
    }
    if let Some(file) = settings_file(env, cwd) {
        let settings = std::fs::read_to_string(&file)
            .map(|text| parse(&text))
            .unwrap_or_default();
        for (key, _) in MUTING {
            if let Some(value) = settings.get(key).filter(|value| !value.is_empty()) {
                found.push(format!(
                    "{} sets khronos_validation.{key} = {value}",
                    file.display()
                ));
            }
        }
    }
    found
}

/// Panics, naming them, if settings of the environment or of the settings
/// file would hide validation messages from the tests.
///
/// # Panics
/// When [`muting_settings`] finds any, at each call.
pub fn refuse_muting_settings() {
    static FOUND: OnceLock<Vec<String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        let cwd = std::env::current_dir().unwrap_or_default();
        muting_settings(&|name| std::env::var_os(name), &cwd)
    });
    assert!(
        found.is_empty(),
        "the validation layer would hide messages from the tests: {}; \
         unset the variable or remove the setting (see tests/support/layer_settings.rs)",
        found.join("; ")
    );
}
