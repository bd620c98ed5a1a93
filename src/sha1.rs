//! SHA-1 (FIPS 180-4, section 6.1), std only: the build script names each Lua script by the
//! SHA-1 Redis gives it (EVALSHA), and the scripts' tests check those names against the texts
//! compiled in. Included by `build.rs` and by `src/scripts.rs`.

/// SHA-1 of `data` as 40 lowercase hex digits.
pub(crate) fn sha1_hex(data: &[u8]) -> [u8; 40] {
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
fn padded_byte(data: &[u8], padded_len: usize, i: usize) -> u8 {
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
