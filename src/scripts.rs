//! The Lua scripts in `lua/`, compiled in. Every state change of a lock is one of these, run with
//! EVALSHA; `redis::Script` falls back to loading the script when the server has lost its cache
//! (`SCRIPT FLUSH`, restart), so the SHA is fixed and the source is sent only when needed.

use std::sync::LazyLock;

use redis::Script;

pub(crate) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/acquire.lua")));
pub(crate) static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/extend.lua")));
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/release.lua")));
pub(crate) static INSPECT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/inspect.lua")));
