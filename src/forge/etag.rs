//! Conditional GETs (docs/github.md#ci): GitHub answers most reads with an
//! `ETag`, and a read that sends it back in `If-None-Match` is answered
//! `304 Not Modified` — without a body, and without counting against the
//! rate limit — while the resource is unchanged. The CI watch reads the
//! same check runs and statuses every poll, so most of its reads are such
//! repeats. This is the cache of the last answer per path: bounded
//! ([`MAX_ENTRIES`] answers of at most [`MAX_BODY`] bytes each), in memory,
//! one per client (so per process and per run), never written anywhere.
//! Not the sending (see [`super::redirect`]) nor the judging of an answer.

use std::collections::{HashMap, VecDeque};

use http::{HeaderMap, HeaderValue, StatusCode};

use super::body::header;
use super::exchange::Reply;

/// Answers kept at most; the oldest kept is forgotten first. A night
/// watches a few dozen PRs at two reads each, plus their pages.
pub(super) const MAX_ENTRIES: usize = 256;

/// Bytes of a body kept at most; a larger answer is not kept (its next
/// read is a plain one).
pub(super) const MAX_BODY: usize = 256 * 1024;

/// The last 200 answer with an `ETag` per path (with its query).
#[derive(Debug, Default)]
pub(super) struct EtagCache {
    entries: HashMap<String, Kept>,
    /// Paths in the order they were first kept (for forgetting the oldest).
    order: VecDeque<String>,
    /// 304 answers turned into the kept answer (for the log and tests).
    pub(super) not_modified: u64,
}

#[derive(Debug, Clone)]
struct Kept {
    etag: HeaderValue,
    headers: HeaderMap,
    body: String,
}

/// What a read sent back: the `ETag` of the answer kept for its path,
/// and that answer (taken when the read was sent, so that a 304 finds it
/// even if the cache forgot it meanwhile).
#[derive(Debug, Clone)]
pub(super) struct Sent(Kept);

impl Sent {
    /// The `If-None-Match` value.
    pub(super) fn etag(&self) -> HeaderValue {
        self.0.etag.clone()
    }
}

impl EtagCache {
    /// What to send back for a GET of `path`, if an answer of it is kept.
    pub(super) fn for_path(&self, path: &str) -> Option<Sent> {
        self.entries.get(path).cloned().map(Sent)
    }

    /// Takes in the answer of a GET of `path` that sent `sent` back: a 200
    /// with an `ETag` (and a body within [`MAX_BODY`]) is kept; a 304 is
    /// replaced by the answer sent back (as a 200, its headers updated by
    /// the 304's, which GitHub sends current); anything else is returned
    /// as it is.
    pub(super) fn answer(&mut self, path: &str, sent: Option<Sent>, reply: Reply) -> Reply {
        if reply.status == StatusCode::NOT_MODIFIED {
            let Some(Sent(kept)) = sent else {
                return reply;
            };
            self.not_modified += 1;
            let mut headers = kept.headers;
            for (name, value) in &reply.headers {
                headers.insert(name.clone(), value.clone());
            }
            return Reply {
                status: StatusCode::OK,
                headers,
                body: kept.body,
            };
        }
        let etag = header(&reply.headers, "etag").and_then(|e| HeaderValue::from_str(e).ok());
        match etag {
            Some(etag) if reply.status == StatusCode::OK && reply.body.len() <= MAX_BODY => {
                self.keep(path, etag, &reply);
            }
            // A changed answer without an ETag (or too large) makes the kept
            // one stale: forget it.
            _ if reply.status == StatusCode::OK => self.forget(path),
            _ => {}
        }
        reply
    }

    fn keep(&mut self, path: &str, etag: HeaderValue, reply: &Reply) {
        let kept = Kept {
            etag,
            headers: reply.headers.clone(),
            body: reply.body.clone(),
        };
        if self.entries.insert(path.to_string(), kept).is_none() {
            self.order.push_back(path.to_string());
        }
        while self.entries.len() > MAX_ENTRIES {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.entries.remove(&oldest);
        }
    }

    fn forget(&mut self, path: &str) {
        if self.entries.remove(path).is_some() {
            self.order.retain(|p| p != path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, etag: Option<&str>, body: &str) -> Reply {
        let mut headers = HeaderMap::new();
        if let Some(e) = etag {
            headers.insert("etag", HeaderValue::from_str(e).unwrap());
        }
        Reply {
            status: StatusCode::from_u16(status).unwrap(),
            headers,
            body: body.to_string(),
        }
    }

    #[test]
    fn a_304_is_the_kept_answer_and_a_changed_one_replaces_it() {
        let mut c = EtagCache::default();
        assert!(c.for_path("/a").is_none());
        c.answer("/a", None, reply(200, Some("W/\"1\""), "one"));
        let sent = c.for_path("/a").unwrap();
        assert_eq!(sent.etag(), "W/\"1\"");
        let again = c.answer("/a", Some(sent), reply(304, Some("W/\"1\""), ""));
        assert_eq!((again.status.as_u16(), again.body.as_str()), (200, "one"));
        assert_eq!(c.not_modified, 1);
        c.answer("/a", None, reply(200, Some("W/\"2\""), "two"));
        assert_eq!(c.for_path("/a").unwrap().etag(), "W/\"2\"");
        c.answer("/a", None, reply(200, None, "three"));
        assert!(
            c.for_path("/a").is_none(),
            "a changed answer without an ETag"
        );
        let lone = c.answer("/b", None, reply(304, None, ""));
        assert_eq!(lone.status.as_u16(), 304, "a 304 nothing was sent back for");
    }

    #[test]
    fn the_cache_is_bounded_and_forgets_the_oldest() {
        let mut c = EtagCache::default();
        for i in 0..MAX_ENTRIES + 10 {
            c.answer(&format!("/p{i}"), None, reply(200, Some("\"e\""), "x"));
        }
        assert_eq!(c.entries.len(), MAX_ENTRIES);
        assert!(c.for_path("/p0").is_none() && c.for_path("/p9").is_none());
        assert!(c.for_path(&format!("/p{}", MAX_ENTRIES + 9)).is_some());
        let big = "y".repeat(MAX_BODY + 1);
        c.answer("/big", None, reply(200, Some("\"b\""), &big));
        assert!(c.for_path("/big").is_none(), "too large to keep");
    }
}
