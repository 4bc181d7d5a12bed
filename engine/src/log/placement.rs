//! Which log directory a new partition goes to, on a broker with several
//! (`log.dirs`, JBOD): Kafka's `LogManager.nextLogDirs` rule, the online
//! directory holding the fewest partitions, the first of those in `log.dirs`
//! order on a tie. Kafka counts partitions, not bytes: a directory's size
//! moves with every append, its partitions only when one is created.

/// One log directory as placement sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirLoad {
    /// Partitions it holds now.
    pub partitions: usize,
    /// False once it failed: nothing new goes there.
    pub online: bool,
}

/// The index of the directory a new partition goes to; `None` when every
/// directory is offline.
pub fn least_loaded(dirs: &[DirLoad]) -> Option<usize> {
    dirs.iter()
        .enumerate()
        .filter(|(_, dir)| dir.online)
        .min_by_key(|(index, dir)| (dir.partitions, *index))
        .map(|(index, _)| index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn online(partitions: usize) -> DirLoad {
        DirLoad {
            partitions,
            online: true,
        }
    }

    #[test]
    fn the_online_directory_with_the_fewest_partitions_first_in_order_on_a_tie() {
        assert_eq!(least_loaded(&[online(3), online(1), online(2)]), Some(1));
        assert_eq!(least_loaded(&[online(2), online(2)]), Some(0));
        assert_eq!(least_loaded(&[online(0)]), Some(0));
        let failed = DirLoad {
            partitions: 0,
            online: false,
        };
        assert_eq!(least_loaded(&[failed, online(7)]), Some(1));
        assert_eq!(least_loaded(&[failed, failed]), None);
        assert_eq!(least_loaded(&[]), None);
    }

    #[test]
    fn partitions_created_one_after_another_spread_evenly() {
        let mut dirs = [online(0), online(0), online(0)];
        for _ in 0..9 {
            let next = least_loaded(&dirs).unwrap();
            dirs[next].partitions += 1;
        }
        assert!(dirs.iter().all(|dir| dir.partitions == 3), "{dirs:?}");
    }
}
