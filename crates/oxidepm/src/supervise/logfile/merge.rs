//! Several logs read as one, in the order of their line stamps (the
//! merged view of `logs` with no target, or a time window), in bounded
//! memory: each source holds at most one block of lines at a time.

use super::{TailReader, BLOCK};
use crate::timefmt::split_stamp;
use std::collections::VecDeque;
use std::io;

/// One log in the merge.
struct Source<K> {
    key: K,
    reader: TailReader,
    queue: VecDeque<Vec<u8>>,
    more: bool,
    /// The stamp of the last stamped line taken: an unstamped line goes
    /// with it.
    last: Option<Vec<u8>>,
}

impl<K> Source<K> {
    /// Refills the queue when it is empty; false when the log is done.
    fn fill(&mut self) -> io::Result<bool> {
        while self.queue.is_empty() && self.more {
            let q = &mut self.queue;
            self.more = self.reader.read(BLOCK, |l| q.push_back(l.to_vec()))?;
        }
        Ok(!self.queue.is_empty())
    }

    /// The time of the next line: its own stamp, or the last one.
    fn next_stamp(&self) -> Option<&[u8]> {
        let line = self.queue.front()?;
        split_stamp(line).map(|(s, _)| s).or(self.last.as_deref())
    }
}

/// Passes the lines of every reader to `each`, oldest stamp first, until
/// a line is stamped after `until` (each log is in time order, so the
/// rest of that log is too) or `each` returns false. A log whose lines
/// carry no stamp is passed in its order, ahead of stamped lines.
pub fn merge<K>(
    readers: Vec<(K, TailReader)>,
    until: Option<&[u8]>,
    mut each: impl FnMut(&K, &[u8]) -> bool,
) -> io::Result<()> {
    let mut sources: Vec<Source<K>> = readers
        .into_iter()
        .map(|(key, reader)| Source {
            key,
            reader,
            queue: VecDeque::new(),
            more: true,
            last: None,
        })
        .collect();
    loop {
        let mut best: Option<usize> = None;
        let mut i = 0;
        while i < sources.len() {
            let s = &mut sources[i];
            let past = match (s.fill()?, until) {
                (false, _) => true,
                (true, Some(u)) => s.next_stamp().is_some_and(|t| t > u),
                (true, None) => false,
            };
            if past {
                sources.swap_remove(i);
                continue;
            }
            let earlier = match best {
                None => true,
                Some(b) => sources[i].next_stamp() < sources[b].next_stamp(),
            };
            if earlier {
                best = Some(i);
            }
            i += 1;
        }
        let Some(b) = best else { return Ok(()) };
        let s = &mut sources[b];
        let Some(line) = s.queue.pop_front() else {
            continue;
        };
        if let Some((t, _)) = split_stamp(&line) {
            s.last = Some(t.to_vec());
        }
        if !each(&s.key, &line) {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn at(s: u32) -> String {
        format!("2026-11-30T10:00:{s:02}.000Z")
    }

    #[test]
    fn lines_of_two_logs_come_in_time_order_up_to_until() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.log");
        let b = dir.path().join("b.log");
        let mut fa = std::fs::File::create(&a).unwrap();
        let mut fb = std::fs::File::create(&b).unwrap();
        for s in [1, 4, 5, 9] {
            writeln!(fa, "{} a{s}", at(s)).unwrap();
        }
        writeln!(fa, "  a9 continued").unwrap();
        for s in [2, 3, 6, 8] {
            writeln!(fb, "{} b{s}", at(s)).unwrap();
        }
        let readers = vec![
            ("a", TailReader::open(&a, 0, 100).unwrap()),
            ("b", TailReader::open(&b, 0, 100).unwrap()),
        ];
        let mut got = Vec::new();
        merge(readers, None, |k, l| {
            let l = String::from_utf8_lossy(l);
            got.push(format!("{k}:{}", l.rsplit(' ').next().unwrap()));
            true
        })
        .unwrap();
        assert_eq!(
            got,
            [
                "a:a1",
                "b:b2",
                "b:b3",
                "a:a4",
                "a:a5",
                "b:b6",
                "b:b8",
                "a:a9",
                "a:continued"
            ]
        );
        let readers = vec![
            ("a", TailReader::open(&a, 0, 100).unwrap()),
            ("b", TailReader::open(&b, 0, 100).unwrap()),
        ];
        let mut got = Vec::new();
        merge(readers, Some(at(5).as_bytes()), |k, _| {
            got.push(*k);
            true
        })
        .unwrap();
        assert_eq!(got, ["a", "b", "b", "a", "a"]);
    }
}
