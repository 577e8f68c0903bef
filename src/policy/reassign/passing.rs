//! Units handed to this worker while others handed over still wait here,
//! passed on as they arrive: the peer it expects free first, and its view
//! of that peer after what it passed. (Its worker asks only when units
//! already waited: from every worker the broker handed units to, they
//! undid the broker's balance.)

use super::ReassignAgent;
use crate::policy::handover::Taker;

impl ReassignAgent {
    /// Of the peers that reported to it this iteration, other than
    /// `except`, the one it expects to be free first (its work left at its
    /// last report, less the time since, and what this worker passed it
    /// since: see [`ReassignAgent::passed`]), as a taker of the units
    /// queued here ([`handover::pass_on`](crate::policy::handover::pass_on)).
    /// None once it passed units on to such a peer this iteration
    /// ([`ReassignAgent::forwarded`]): views of peers are as old as their
    /// reports, and workers passing units on as they arrive, each to the
    /// peer it thought freest, handed them round for ever (3 workers in one
    /// process, where messages take microseconds).
    pub fn freest_peer(&self, except: u32) -> Option<(u32, Taker)> {
        if self.forwarded {
            return None;
        }
        self.left_us
            .iter()
            .filter(|e| e.0 != except && e.2 > 0)
            .map(|&(peer, left, unit_us, at)| {
                let ahead_us = left.saturating_sub(self.now_us.saturating_sub(at));
                (ahead_us, peer, unit_us)
            })
            .min()
            .map(|(ahead_us, peer, unit_us)| {
                (
                    peer,
                    Taker {
                        unit_us,
                        ahead_us,
                        alike: 1,
                    },
                )
            })
    }

    /// Its worker passed units on to the peer [`ReassignAgent::freest_peer`]
    /// named: it names none again this iteration.
    pub fn forwarded(&mut self) {
        self.forwarded = true;
    }

    /// This worker passed `count` units queued here on to `peer`: in its
    /// view, that peer's work left grows by as many of its units.
    pub fn passed(&mut self, peer: u32, count: u32) {
        let now = self.now_us;
        if let Some(e) = self.left_us.iter_mut().find(|e| e.0 == peer) {
            let left = e.1.saturating_sub(now.saturating_sub(e.3));
            *e = (peer, left + u64::from(count) * e.2, e.2, now);
        }
    }
}
