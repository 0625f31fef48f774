//! `nightshift limit parse` (docs/commands.md): explains how a piece of agent output is
//! read as a usage limit, with an injectable `now` and zone for scripts.

use std::io::Read;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::{config, limit, schedule};

/// `nightshift limit parse [TEXT] [--now RFC3339] [--tz ZONE] [--json]`.
pub(crate) fn parse(
    text: Option<String>,
    now: Option<&str>,
    tz: Option<&str>,
    json: bool,
) -> Result<()> {
    let text = match text {
        Some(t) => t,
        None => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| Error::argument(format!("cannot read stdin: {e}")))?;
            s
        }
    };
    let now: DateTime<Utc> = match now {
        Some(n) => DateTime::parse_from_rfc3339(n)
            .map_err(|e| {
                Error::argument(format!(
                    "--now {n:?}: {e}; write RFC 3339, e.g. 2026-03-04T17:50:00Z"
                ))
            })?
            .with_timezone(&Utc),
        None => Utc::now(),
    };
    let (zone, _) =
        schedule::resolve_zone(tz).map_err(|e| Error::argument(format!("--tz: {e}")))?;
    let reading = limit::read_text(&text, now, zone);
    let policy = crate::run::sleep_policy(&config::Limits::default());
    if json {
        println!(
            "{}",
            serde_json::to_string(&limit::explain(&reading, now, zone, &policy)).expect("JSON")
        );
    } else {
        println!("{}", limit::explain_text(&reading, now, zone, &policy));
    }
    Ok(())
}
