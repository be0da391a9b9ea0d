//! How a drill writes a moment: RFC 3339, UTC, milliseconds.

use std::time::SystemTime;

pub fn timestamp(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
