//! The dashboard's chart: completed, retried and dead jobs per minute, from the outcome
//! counters sampled by src/ui/live.rs.

use std::collections::VecDeque;

/// Completed, retried and dead jobs per minute, all queues together, the last 60 minutes.
#[derive(Default)]
pub struct History {
    pub minutes: VecDeque<(u64, [i64; 3])>,
    last: Option<[i64; 3]>,
}

impl History {
    pub fn add(&mut self, minute: u64, totals: [i64; 3]) {
        // Counters restart with the server: a total that fell starts over from it.
        let delta = match self.last {
            Some(last) if totals.iter().zip(last).all(|(t, l)| *t >= l) => [
                totals[0] - last[0],
                totals[1] - last[1],
                totals[2] - last[2],
            ],
            _ => [0; 3],
        };
        self.last = Some(totals);
        match self.minutes.back_mut() {
            Some((m, counts)) if *m == minute => {
                for (c, d) in counts.iter_mut().zip(delta) {
                    *c += d;
                }
            }
            _ => self.minutes.push_back((minute, delta)),
        }
        while self.minutes.front().is_some_and(|(m, _)| *m + 60 <= minute) {
            self.minutes.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::History;

    #[test]
    fn history_counts_growth_per_minute_and_keeps_an_hour() {
        let mut h = History::default();
        h.add(100, [10, 1, 0]);
        h.add(100, [15, 1, 2]);
        h.add(101, [16, 3, 2]);
        h.add(101, [4, 0, 0]); // the server restarted: start over
        assert_eq!(
            h.minutes.iter().copied().collect::<Vec<_>>(),
            [(100, [5, 0, 2]), (101, [1, 2, 0])]
        );
        h.add(161, [5, 0, 0]);
        assert_eq!(h.minutes.front().map(|m| m.0), Some(161));
    }
}
