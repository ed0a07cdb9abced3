//! Timestamps and ids: RFC 3339 UTC times and short, sortable, unique ids
//! (`ckpt_…`, `call_…`, `p_…`, `act_…`, `cf_…`, `e_…`).
//!
//! Time and randomness come in through [`Clock`] so tests can fix them: a fixed
//! clock starts at a given instant and advances one millisecond per reading, and
//! its ids come from a seeded generator.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Where ckpt reads the time and id randomness from.
#[derive(Debug)]
pub struct Clock {
    fixed: Option<Mutex<(u64, u64)>>,
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

impl Clock {
    /// The real clock, with random ids.
    pub fn system() -> Clock {
        Clock { fixed: None }
    }

    /// A deterministic clock starting at `unix_ms`, advancing 1 ms per reading,
    /// with ids drawn from a generator seeded with `seed`.
    pub fn fixed(unix_ms: u64, seed: u64) -> Clock {
        Clock {
            fixed: Some(Mutex::new((unix_ms, seed | 1))),
        }
    }

    /// Returns milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> u64 {
        match &self.fixed {
            Some(m) => {
                let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
                g.0 += 1;
                g.0
            }
            None => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
        }
    }

    fn random(&self) -> u64 {
        match &self.fixed {
            Some(m) => {
                let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
                // xorshift64*
                let mut x = g.1;
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                g.1 = x;
                x.wrapping_mul(0x2545_f491_4f6c_dd1d)
            }
            None => crate::fs_util::random_u64(),
        }
    }

    /// Returns the current time as RFC 3339 UTC with milliseconds.
    pub fn now_rfc3339(&self) -> String {
        rfc3339(self.now_ms())
    }

    /// Returns a new id: `prefix` + 9 base32 characters of time (ms) + 5 random ones.
    /// Ids of one prefix sort by creation time to the millisecond.
    pub fn new_id(&self, prefix: &str) -> String {
        let t = self.now_ms();
        let r = self.random();
        let mut s = String::with_capacity(prefix.len() + 14);
        s.push_str(prefix);
        push_base32(&mut s, t, 9);
        push_base32(&mut s, r, 5);
        s
    }
}

const CROCKFORD: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

fn push_base32(s: &mut String, v: u64, digits: u32) {
    for i in (0..digits).rev() {
        s.push(CROCKFORD[((v >> (i * 5)) & 31) as usize] as char);
    }
}

/// Formats Unix milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let ms = unix_ms % 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Parses what [`rfc3339`] writes (`YYYY-MM-DDTHH:MM:SS[.mmm]Z`) back into
/// Unix milliseconds; `None` for anything else.
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || *b.last()? != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let ms = match &s[19..s.len() - 1] {
        "" => 0,
        f if f.len() == 4 && f.starts_with('.') => f[1..].parse().ok()?,
        _ => return None,
    };
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let days = days_from_civil(y, m as u32, d as u32);
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    u64::try_from(secs * 1000 + ms).ok()
}

// Howard Hinnant's civil-to-days algorithm.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_000_000_123), "2026-11-30T00:53:20.123Z");
        for ms in [0, 1_796_000_000_123, 951_782_400_999, 4_102_444_800_000] {
            assert_eq!(parse_rfc3339(&rfc3339(ms)), Some(ms));
        }
        assert_eq!(
            parse_rfc3339("2026-11-30T00:53:20Z"),
            Some(1_796_000_000_000)
        );
        for bad in [
            "",
            "2026-11-30",
            "2026-13-30T00:53:20.123Z",
            "2026-11-30T00:53:20.1Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn ids_sort_by_time_and_are_unique() {
        let c = Clock::fixed(1_796_000_000_000, 7);
        let ids: Vec<String> = (0..1000).map(|_| c.new_id("ckpt_")).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
        sorted.dedup();
        assert_eq!(sorted.len(), 1000);
        assert_eq!(ids[0].len(), 5 + 14);
    }
}
