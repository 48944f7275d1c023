//! `--shard K/N`: the K-th of N disjoint slices of a sweep's cells, K counted from 1 (as
//! `sbatch --array=1-N` numbers its tasks). Cell `i` (0-based, plan order) belongs to shard
//! `i mod N + 1`: strided rather than contiguous, so a sweep axis whose cost grows with its value
//! spreads over every shard. Every cell, with all its seeds, lands in exactly one shard, and the
//! slices depend only on N and the cell order.

use std::fmt;
use std::str::FromStr;

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Shard {
    /// 1-based: 1..=count.
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// Whether cell `cell` (0-based plan order) belongs to this shard.
    pub fn contains(self, cell: usize) -> bool {
        cell % self.count + 1 == self.index
    }

    /// The shard that holds `cell` when the sweep is cut into `count` shards.
    pub fn holding(cell: usize, count: usize) -> Shard {
        Shard {
            index: cell % count + 1,
            count,
        }
    }

    /// This shard's cells of a sweep of `n_cells` cells, in plan order.
    pub fn cells(self, n_cells: usize) -> Vec<usize> {
        (self.index - 1..n_cells).step_by(self.count).collect()
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(text: &str) -> Result<Shard, String> {
        let usage = "expected K/N with 1 <= K <= N, e.g. 2/8 (K is 1-based: with Slurm, \
                     sbatch --array=1-N and --shard \"$SLURM_ARRAY_TASK_ID/N\")";
        let (k, n) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?}: {usage}"))?;
        let parse = |part: &str| part.trim().parse::<usize>().ok();
        match (parse(k), parse(n)) {
            (Some(index), Some(count)) if count >= 1 && (1..=count).contains(&index) => {
                Ok(Shard { index, count })
            }
            _ => Err(format!("{text:?}: {usage}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_the_cells() {
        let n_cells = 10;
        for count in 1..=12 {
            let mut seen = vec![0; n_cells];
            for index in 1..=count {
                let shard = Shard { index, count };
                for cell in shard.cells(n_cells) {
                    assert!(shard.contains(cell));
                    assert_eq!(Shard::holding(cell, count), shard);
                    seen[cell] += 1;
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "count {count}: {seen:?}");
        }
        assert_eq!(Shard { index: 2, count: 3 }.cells(8), vec![1, 4, 7]);
    }

    #[test]
    fn parses_one_based_k_of_n() {
        assert_eq!("3/3".parse(), Ok(Shard { index: 3, count: 3 }));
        assert_eq!("1/1".parse(), Ok(Shard { index: 1, count: 1 }));
        for bad in ["0/3", "4/3", "1/0", "3", "a/b", "-1/3", ""] {
            let err = bad.parse::<Shard>().unwrap_err();
            assert!(err.contains("1-based"), "{bad}: {err}");
        }
    }
}
