//! Replicas that take units from each other within an iteration (the
//! data-parallel `rapid-reassign` inside a pipeline). A replica's first
//! stage feeds its units' micro-batches; when it has fed them all, it asks
//! the other replicas' first stages for units they have not begun, and a
//! first stage gives whole units from the end of its list when the asker
//! would finish them before it could. Each replica's micro-batch list
//! therefore grows at its end (units taken) or shrinks at its end (units
//! given) while the iteration runs; a stage's schedule follows the list's
//! length ([`Open`]). Pure functions, shared by the stage operator and its
//! tests.

use super::schedule::{Pass, Schedule, ScheduleError};

/// A stage's passes while its replica's list may still change: the order
/// for the micro-batches known so far, and how far into it the stage may
/// run before it must know whether more come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Open {
    /// The order for the micro-batches known now.
    pub order: Vec<Pass>,
    /// While the list is open, the passes of `order` the stage may run
    /// (those it shares with the order of one micro-batch more); closed,
    /// all of them.
    pub limit: usize,
}

impl Open {
    /// Stage `stage` of `stages` with `micro` micro-batches known, the list
    /// `open` or final.
    pub fn new(
        schedule: Schedule,
        (stages, stage): (u32, u32),
        micro: u32,
        open: bool,
    ) -> Result<Self, ScheduleError> {
        let order = schedule.order(stages, stage, micro)?;
        let limit = if open {
            let more = schedule.order(stages, stage, micro + 1)?;
            order.iter().zip(&more).take_while(|(a, b)| a == b).count()
        } else {
            order.len()
        };
        Ok(Self { order, limit })
    }

    /// The same stage after its list changed to `micro` micro-batches (and
    /// `open` or final), `ran` passes of the old order run: the new order,
    /// or None when the passes run are not its beginning (the list shrank
    /// below what was fed: a caller's error).
    pub fn reshaped(
        &self,
        schedule: Schedule,
        (stages, stage): (u32, u32),
        micro: u32,
        open: bool,
        ran: usize,
    ) -> Option<Self> {
        let next = Self::new(schedule, (stages, stage), micro, open).ok()?;
        (ran <= next.order.len() && next.order[..ran] == self.order[..ran]).then_some(next)
    }
}

/// What the asking replica tells the first stage it asks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Asker {
    /// Its time per micro-batch so far this iteration, µs (its first
    /// stage's time since the iteration began over the micro-batches it
    /// fed).
    pub micro_us: f64,
}

/// Where the asked replica stands, as its first stage sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Giver {
    /// Micro-batches of each of its units, in list order.
    pub unit_micro: Vec<u32>,
    /// Micro-batches its first stage has fed (their forwards run).
    pub fed: u32,
    /// Micro-batches whose backward its first stage has run.
    pub done: u32,
    /// Time since its iteration began, µs.
    pub elapsed_us: f64,
    /// The fewest micro-batches its list may keep (the schedule's).
    pub least: u32,
}

/// How many units, from the end of its list, `giver` hands `asker` in a
/// pipeline of `stages` stages: as many whole units not yet begun as the
/// asker would still finish before the giver finished them. The giver's
/// pace is its time per backward so far (taken for the asker's until it
/// has one); the asker pays its pipeline's fill, `stages − 1`
/// micro-batches, before its first taken unit ends.
pub fn gift(giver: &Giver, asker: Asker, stages: u32) -> usize {
    let total: u32 = giver.unit_micro.iter().sum();
    let ask = asker.micro_us.max(0.0);
    let pace = match giver.done {
        0 => ask.max(giver.elapsed_us),
        d => giver.elapsed_us / f64::from(d),
    };
    let fill = f64::from(stages.saturating_sub(1)) * ask;
    let (mut given, mut kept) = (0u32, total);
    let mut units = 0;
    for &m in giver.unit_micro.iter().rev() {
        let left = kept - m;
        if left < giver.fed.max(giver.least) {
            break;
        }
        // the asker's end with this unit against the giver's without it
        let asker_end = fill + f64::from(given + m) * ask;
        let giver_end = f64::from(left.saturating_sub(giver.done)) * pace;
        if asker_end >= giver_end {
            break;
        }
        given += m;
        kept = left;
        units += 1;
    }
    units
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE_F: Schedule = Schedule::OneFOneB;

    #[test]
    fn an_open_stage_runs_what_every_longer_list_begins_with() {
        for schedule in [Schedule::GPipe, ONE_F] {
            for stage in 0..3 {
                let open = Open::new(schedule, (3, stage), 4, true).expect("valid");
                for more in 5..9 {
                    let longer = schedule.order(3, stage, more).expect("valid");
                    assert_eq!(longer[..open.limit], open.order[..open.limit]);
                }
                // and the next pass differs from the closed order's (1F1B's
                // last stage runs its whole order, then waits)
                if open.limit < open.order.len() {
                    assert_ne!(
                        schedule.order(3, stage, 5).expect("valid")[open.limit],
                        open.order[open.limit]
                    );
                }
                let closed = Open::new(schedule, (3, stage), 4, false).expect("valid");
                assert_eq!(closed.limit, closed.order.len());
            }
        }
        // 1F1B's first stage of two: F0, then it needs to know about F2
        let first = Open::new(ONE_F, (2, 0), 2, true).expect("valid");
        assert_eq!(
            &first.order[..first.limit],
            &[Pass::Forward(0), Pass::Forward(1), Pass::Backward(0)]
        );
    }

    #[test]
    fn a_list_may_grow_or_shrink_behind_what_ran() {
        let open = Open::new(ONE_F, (2, 1), 6, true).expect("valid");
        // stage 1 ran F0 B0 F1 B1: the list may become 2..
        let grown = open.reshaped(ONE_F, (2, 1), 9, true, 4).expect("fits");
        assert_eq!(grown.order, ONE_F.order(2, 1, 9).expect("valid"));
        let shrunk = open.reshaped(ONE_F, (2, 1), 2, false, 4).expect("fits");
        assert_eq!(shrunk.limit, 4);
        // ...but not below what ran
        let early = Open::new(ONE_F, (2, 0), 6, true).expect("valid");
        assert!(early.reshaped(ONE_F, (2, 0), 2, false, 5).is_none());
        // nor below the schedule's least
        assert!(open.reshaped(ONE_F, (3, 1), 2, false, 0).is_none());
    }

    fn giver(units: usize, fed: u32, done: u32, elapsed_us: f64) -> Giver {
        Giver {
            unit_micro: vec![2; units],
            fed,
            done,
            elapsed_us,
            least: 2,
        }
    }

    #[test]
    fn a_slow_replica_gives_what_the_asker_finishes_first() {
        // 8 units of 2 micro-batches, 2 done in 1,000 µs (500 µs each):
        // an asker at 100 µs a micro-batch, fill 100 µs
        let slow = giver(8, 4, 2, 1_000.0);
        let n = gift(&slow, Asker { micro_us: 100.0 }, 2);
        // giving n units: asker ends at 100 + 200 n, giver at (14 − 2n) · 500
        assert_eq!(n, 5, "the units past what was fed, but for the last");
        let ends = |n: u32| (100.0 + 200.0 * f64::from(n), f64::from(14 - 2 * n) * 500.0);
        assert!(ends(5).0 < ends(5).1);
        // the one fed, and the one the giver would finish first, stay
        // (at 50 µs a micro-batch: 300 against 600 µs for one, 500
        // against 500 for two)
        assert_eq!(
            gift(&giver(8, 4, 2, 100.0), Asker { micro_us: 100.0 }, 2),
            1
        );
        // a giver as fast as the asker keeps its last unit for itself
        let even = giver(2, 2, 1, 100.0);
        assert_eq!(gift(&even, Asker { micro_us: 100.0 }, 2), 0);
    }

    #[test]
    fn nothing_fed_goes_and_the_least_stays() {
        let all_fed = giver(4, 8, 1, 10_000.0);
        assert_eq!(gift(&all_fed, Asker { micro_us: 1.0 }, 2), 0);
        let mut least = giver(4, 0, 0, 10_000.0);
        least.least = 6;
        assert_eq!(gift(&least, Asker { micro_us: 1.0 }, 2), 1);
        // a giver that has not begun is taken for as fast as the asker
        let late = giver(8, 0, 0, 0.0);
        let n = gift(&late, Asker { micro_us: 100.0 }, 2);
        assert_eq!(n, 3, "about half, less the fill");
    }
}
