//! The Lua scripts in `lua/`, compiled in. Every state change of a lock is one of these, run with
//! EVALSHA; `redis::Script` falls back to loading the script when the server has lost its cache
//! (`SCRIPT FLUSH`, restart), so the SHA is fixed and the source is sent only when needed.
//! Each script is `lua/prelude.lua` (shared helpers) followed by the script's own file.

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../lua/prelude.lua"),
                include_str!(concat!("../lua/", $file))
            ))
        })
    };
}

pub(crate) static ACQUIRE: LazyLock<Script> = script!("acquire.lua");
pub(crate) static EXTEND: LazyLock<Script> = script!("extend.lua");
pub(crate) static RELEASE: LazyLock<Script> = script!("release.lua");
pub(crate) static INSPECT: LazyLock<Script> = script!("inspect.lua");
