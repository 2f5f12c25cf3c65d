//! The dashboard's chart (completed, retried and dead jobs per minute) and each queue's
//! completions per minute, from the outcome counters sampled by src/ui/live.rs.

use std::collections::{HashMap, VecDeque};

/// How far back a queue's rate looks, and the least span of samples it is told from.
const RATE_WINDOW: u64 = 300;
const RATE_SPAN: u64 = 5;

/// Completed, retried and dead jobs per minute, all queues together, the last 60 minutes; and
/// each queue's count of completed jobs at each sample of the last RATE_WINDOW seconds.
#[derive(Default)]
pub struct History {
    pub minutes: VecDeque<(u64, [i64; 3])>,
    last: Option<[i64; 3]>,
    completed: HashMap<String, VecDeque<(u64, i64)>>,
}

impl History {
    /// Each queue's count of completed jobs at `second` (a queue missing from a sample keeps
    /// what it had; one whose count fell, the server restarted, starts over).
    pub fn add_queues(&mut self, second: u64, counts: &[(String, i64)]) {
        for (queue, n) in counts {
            let samples = self.completed.entry(queue.clone()).or_default();
            if samples.back().is_some_and(|(_, last)| n < last) {
                samples.clear();
            }
            samples.push_back((second, *n));
        }
        for samples in self.completed.values_mut() {
            while samples
                .front()
                .is_some_and(|(s, _)| *s + RATE_WINDOW < second)
            {
                samples.pop_front();
            }
        }
        self.completed.retain(|_, samples| !samples.is_empty());
    }

    /// The queue's completed jobs per minute over the samples of the last RATE_WINDOW seconds,
    /// once they span RATE_SPAN seconds at least.
    pub fn completed_per_minute(&self, queue: &str) -> Option<f64> {
        let samples = self.completed.get(queue)?;
        let (first, last) = (samples.front()?, samples.back()?);
        let span = last.0.checked_sub(first.0).filter(|s| *s >= RATE_SPAN)?;
        Some((last.1 - first.1) as f64 * 60.0 / span as f64)
    }

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

    #[test]
    fn a_queues_rate_spans_its_samples_of_the_last_five_minutes() {
        let mut h = History::default();
        let q = |n: i64| [("mail".to_string(), n)];
        h.add_queues(1000, &q(100));
        assert_eq!(h.completed_per_minute("mail"), None); // one sample: no span
        h.add_queues(1002, &q(101));
        assert_eq!(h.completed_per_minute("mail"), None); // under 5 s
        h.add_queues(1030, &q(130));
        assert_eq!(h.completed_per_minute("mail"), Some(60.0));
        h.add_queues(1320, &q(160)); // the first two samples are past the window
        assert_eq!(h.completed_per_minute("mail"), Some(30.0 * 60.0 / 290.0));
        h.add_queues(1330, &q(3)); // the server restarted: starts over
        assert_eq!(h.completed_per_minute("mail"), None);
        assert_eq!(h.completed_per_minute("other"), None);
    }
}
