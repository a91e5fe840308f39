//! Time spans and dates in the words `kubectl` uses.

use std::time::{Duration, SystemTime};

/// A span written as Kubernetes writes ages and durations (`HumanDuration` of
/// `k8s.io/apimachinery/pkg/util/duration`, what `kubectl get` prints in `AGE`): at most two
/// units, coarser as the span grows: `45s`, `5m30s`, `2h10m`, `12h`, `6d4h`, `29d`, `2y30d`.
pub fn duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        return match secs % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 3 * 60 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{}d", hours / 24),
            h => format!("{}d{h}h", hours / 24),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        return match (hours / 24) % 365 {
            0 => format!("{}y", hours / 24 / 365),
            d => format!("{}y{d}d", hours / 24 / 365),
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// A moment as RFC 3339 in UTC, to the second (`2026-11-24T10:00:00Z`), as Kubernetes writes
/// timestamps.
pub fn date(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
    k8s_openapi::jiff::Timestamp::from_second(secs).map(|t| t.to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_written_as_kubectl_writes_them() {
        let cases = [
            (0, "0s"),
            (45, "45s"),
            (119, "119s"),
            (120, "2m"),
            (330, "5m30s"),
            (600, "10m"),
            (179 * 60, "179m"),
            (3 * 3600, "3h"),
            (2 * 3600 + 10 * 60 + 60 * 60, "3h10m"),
            (12 * 3600 + 59, "12h"),
            (6 * 86400 + 4 * 3600, "6d4h"),
            (7 * 86400, "7d"),
            (30 * 86400 - 1, "29d"),
            (2 * 365 * 86400 + 30 * 86400, "2y30d"),
            (9 * 365 * 86400, "9y"),
        ];
        for (secs, want) in cases {
            assert_eq!(duration(Duration::from_secs(secs)), want, "{secs}s");
        }
    }

    #[test]
    fn dates_are_rfc3339_utc() {
        assert_eq!(date(SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000)), "2026-11-18T11:06:40Z");
    }
}
