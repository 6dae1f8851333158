//! rdyn's counter-based random numbers: [`hash_mix`], the one definition
//! every backend implements (the CPU interpreter and JIT, PTX, WGSL) and
//! the Python eager reference (`python/rdyn/_random.py`) reproduces.
//!
//! A random tensor is `hash_mix(position, key)` for each element's linear
//! position and one key per tensor per call (drawn from torch's generator,
//! so `torch.manual_seed` makes runs repeat). Nothing is carried between
//! elements: any kernel computes any element, in any order, and a backward
//! pass that recomputes a dropout mask gets the same mask.
//!
//! The mix is MurmurHash3's 32-bit finalizer (a bijection of 32-bit words
//! with full avalanche) applied to the key, then to the position spread by
//! the golden-ratio constant plus the mixed key, then once more with the
//! key: distinct positions give distinct words within a tensor, and the
//! words of two keys look unrelated. The result is the top 24 bits, the
//! resolution of a float32 in [0, 1). Positions and keys are taken modulo
//! 2^32 (the lowerings pass both below 2^31).

/// The golden-ratio increment (2^32 / φ).
pub const GOLDEN: u32 = 0x9E37_79B9;
/// MurmurHash3 `fmix32`'s multipliers.
pub const FMIX: [u32; 2] = [0x85EB_CA6B, 0xC2B2_AE35];

/// MurmurHash3's 32-bit finalizer.
pub fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(FMIX[0]);
    h ^= h >> 13;
    h = h.wrapping_mul(FMIX[1]);
    h ^ (h >> 16)
}

/// 24 random bits (as an integer in `[0, 2^24)`) for `position` under
/// `key`.
pub fn hash_mix(position: i64, key: i64) -> i64 {
    let k = fmix32(key as u32 ^ GOLDEN);
    let h = fmix32((position as u32).wrapping_mul(GOLDEN).wrapping_add(k));
    i64::from(fmix32(h ^ k) >> 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_give_distinct_words_and_uniform_bits() {
        let key = 12345;
        let words: std::collections::HashSet<u32> =
            (0..100_000).map(|p| fmix32((p as u32).wrapping_mul(GOLDEN).wrapping_add(fmix32(key ^ GOLDEN)))).collect();
        assert_eq!(words.len(), 100_000);
        let values: Vec<i64> = (0..100_000).map(|p| hash_mix(p, 7)).collect();
        assert!(values.iter().all(|v| (0..1 << 24).contains(v)));
        let mean = values.iter().map(|&v| v as f64 / f64::from(1u32 << 24)).sum::<f64>() / values.len() as f64;
        assert!((mean - 0.5).abs() < 0.005, "{mean}");
        // Each of the 24 bits is set about half the time.
        for bit in 0..24 {
            let ones = values.iter().filter(|&&v| v >> bit & 1 == 1).count();
            assert!((ones as f64 / 1e5 - 0.5).abs() < 0.01, "bit {bit}: {ones}");
        }
    }

    #[test]
    fn keys_give_unrelated_streams() {
        let a: Vec<i64> = (0..10_000).map(|p| hash_mix(p, 1)).collect();
        let b: Vec<i64> = (0..10_000).map(|p| hash_mix(p, 2)).collect();
        let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
        assert!(same < 5, "{same}");
        assert_eq!(hash_mix(5, 9), hash_mix(5, 9));
    }
}
