//! The Lua scripts in `lua/`, compiled in. Every state change of a lock is one of these, run with
//! EVALSHA; when the server has lost its script cache (`SCRIPT FLUSH`, restart) the call is
//! repeated once as EVAL, which also caches the script again. The SHA-1 of each script is
//! computed at compile time: hashing ~10 KiB at every start cost a quarter of the CPU time of
//! an uncontended `redlock run -- true`.
//! Each script is `lua/prelude.lua` (shared helpers) followed by the script's own file.

use redis::{ConnectionLike, ErrorKind, FromRedisValue, RedisResult, ServerErrorKind, ToRedisArgs};

/// One Lua script: its text and the SHA-1 Redis knows it by.
pub(crate) struct Script {
    body: &'static str,
    sha: &'static str,
}

macro_rules! script {
    ($file:literal) => {{
        const BODY: &str = concat!(
            include_str!("../lua/prelude.lua"),
            include_str!(concat!("../lua/", $file))
        );
        const SHA: [u8; 40] = sha1_hex(BODY.as_bytes());
        Script {
            body: BODY,
            sha: match std::str::from_utf8(&SHA) {
                Ok(sha) => sha,
                Err(_) => panic!("hex digits are ASCII"),
            },
        }
    }};
}

pub(crate) static ACQUIRE: Script = script!("acquire.lua");
pub(crate) static EXTEND: Script = script!("extend.lua");
pub(crate) static RELEASE: Script = script!("release.lua");
pub(crate) static INSPECT: Script = script!("inspect.lua");

impl Script {
    pub(crate) fn key<T: ToRedisArgs>(&'static self, key: T) -> Invocation {
        let mut invocation = Invocation {
            script: self,
            keys: Vec::new(),
            args: Vec::new(),
        };
        invocation.key(key);
        invocation
    }
}

/// A script with its keys and arguments, ready to send.
pub(crate) struct Invocation {
    script: &'static Script,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Invocation {
    pub(crate) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// EVALSHA, or EVAL once when the server does not have the script.
    pub(crate) fn invoke<T: FromRedisValue>(&self, con: &mut dyn ConnectionLike) -> RedisResult<T> {
        match self.command("EVALSHA", self.script.sha).query(con) {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.command("EVAL", self.script.body).query(con)
            }
            result => result,
        }
    }

    fn command(&self, verb: &str, script: &str) -> redis::Cmd {
        let mut command = redis::cmd(verb);
        command.arg(script).arg(self.keys.len());
        for key in &self.keys {
            command.arg(key.as_slice());
        }
        for arg in &self.args {
            command.arg(arg.as_slice());
        }
        command
    }
}

/// SHA-1 of `data` as 40 lowercase hex digits, at compile time (FIPS 180-4, section 6.1).
const fn sha1_hex(data: &[u8]) -> [u8; 40] {
    let mut state: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    // Message plus 0x80, zero padding and the 64-bit bit length, in 64-byte blocks.
    let padded_len = (data.len() + 9).div_ceil(64) * 64;
    let mut block = 0;
    while block < padded_len {
        let mut w = [0u32; 80];
        let mut t = 0;
        while t < 16 {
            let at = block + 4 * t;
            w[t] = u32::from_be_bytes([
                padded_byte(data, padded_len, at),
                padded_byte(data, padded_len, at + 1),
                padded_byte(data, padded_len, at + 2),
                padded_byte(data, padded_len, at + 3),
            ]);
            t += 1;
        }
        while t < 80 {
            w[t] = (w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16]).rotate_left(1);
            t += 1;
        }
        let [mut a, mut b, mut c, mut d, mut e] = state;
        t = 0;
        while t < 80 {
            let (f, k) = match t / 20 {
                0 => ((b & c) | (!b & d), 0x5A82_7999),
                1 => (b ^ c ^ d, 0x6ED9_EBA1),
                2 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let next = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(w[t]);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = next;
            t += 1;
        }
        state = [
            state[0].wrapping_add(a),
            state[1].wrapping_add(b),
            state[2].wrapping_add(c),
            state[3].wrapping_add(d),
            state[4].wrapping_add(e),
        ];
        block += 64;
    }
    let mut hex = [0u8; 40];
    let mut i = 0;
    while i < 20 {
        let byte = (state[i / 4] >> (24 - 8 * (i % 4))) as u8;
        hex[2 * i] = b"0123456789abcdef"[(byte >> 4) as usize];
        hex[2 * i + 1] = b"0123456789abcdef"[(byte & 0xf) as usize];
        i += 1;
    }
    hex
}

/// Byte `i` of `data` padded to `padded_len` bytes: 0x80, zeros, then the length in bits.
const fn padded_byte(data: &[u8], padded_len: usize, i: usize) -> u8 {
    if i < data.len() {
        data[i]
    } else if i == data.len() {
        0x80
    } else if i >= padded_len - 8 {
        ((data.len() as u64 * 8) >> (8 * (padded_len - 1 - i))) as u8
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(data: &str) -> String {
        String::from_utf8(sha1_hex(data.as_bytes()).to_vec()).unwrap()
    }

    /// FIPS 180 test vectors, across the one- and two-block padding cases.
    #[test]
    fn sha1_matches_the_standard_vectors() {
        assert_eq!(hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(hex("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(
            hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1"
        );
        assert_eq!(
            hex(&"a".repeat(1000)),
            "291e9a6c66994949b57ba5e650361e98fc36b1ba"
        );
    }
}
