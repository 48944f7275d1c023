//! Seeded random streams: every component draws from its own stream derived from
//! (scenario seed, component name), so adding a draw in one component never shifts another's.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The generator every stream uses: ChaCha8, whose output is specified and portable across
/// platforms and crate versions (unlike `SmallRng`/`StdRng`).
pub type SimRng = ChaCha8Rng;

/// Derives the random stream of component `name` for a run with scenario seed `seed`.
///
/// The derivation is FNV-1a over the name, mixed with the seed by SplitMix64; both are fixed
/// algorithms written out here so the mapping never changes with a compiler or library version.
pub fn stream(seed: u64, name: &str) -> SimRng {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in name.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut state = seed ^ hash.rotate_left(17);
    let mut key = [0u8; 32];
    for chunk in key.chunks_exact_mut(8) {
        chunk.copy_from_slice(&splitmix64(&mut state).to_le_bytes());
    }
    ChaCha8Rng::from_seed(key)
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngExt;

    #[test]
    fn same_seed_and_name_give_the_same_stream() {
        let a: Vec<u64> = (0..4)
            .map(|_| 0)
            .scan(stream(42, "arrivals"), |r, _: u64| Some(r.random()))
            .collect();
        let b: Vec<u64> = (0..4)
            .map(|_| 0)
            .scan(stream(42, "arrivals"), |r, _: u64| Some(r.random()))
            .collect();
        assert_eq!(a, b);
    }

    #[test]
    fn different_names_or_seeds_give_different_streams() {
        let first = |seed, name| -> u64 { stream(seed, name).random() };
        assert_ne!(first(42, "arrivals"), first(42, "topics"));
        assert_ne!(first(42, "arrivals"), first(43, "arrivals"));
    }

    #[test]
    fn stream_output_is_pinned() {
        // Pins the derivation: a change here silently changes every published result.
        let value: u64 = stream(7, "pin").random();
        assert_eq!(value, PINNED);
    }
    const PINNED: u64 = 14_072_539_817_589_017_923;
}
